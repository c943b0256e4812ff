// The ring of confirmed writes and the rules that judge them against a writer
// (confirmed_writes.hpp, ADR 0036).
#include "confirmed_writes.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "holdfast/pg/lsn.hpp"

namespace holdfast::pg::detail {

std::uint64_t key_hash(std::string_view key) noexcept {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a's offset basis and prime
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

std::string ConfirmedWrite::key_for_log() const {
  if (key_whole()) return kept;
  return kept + "...(" + std::to_string(key_size) + " bytes)";
}

std::string ConfirmedWrite::position_for_log() const {
  if (lsn == 0) return "?";
  return Lsn{lsn, timeline}.to_string_with_timeline();
}

ConfirmedWrites::ConfirmedWrites(std::size_t capacity)
    : capacity_(capacity), slots_(capacity > 0 ? new Slot[capacity] : nullptr) {}

bool ConfirmedWrites::record(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host,
                             TimePoint at, std::string_view key) noexcept {
  if (capacity_ == 0) return false;
  const std::uint64_t ticket = next_.fetch_add(1, std::memory_order_acq_rel);
  Slot& s = slots_[ticket % capacity_];
  std::uint64_t seq = s.seq.load(std::memory_order_relaxed);
  // Odd: another writer is in this slot (one a whole ring of writes earlier, still at it).
  if ((seq & 1U) != 0 || !s.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire,
                                                        std::memory_order_relaxed)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  std::size_t kept = std::min(key.size(), kKeptKeyBytes);
  if (kept < key.size()) {
    // Cut at a character's start, so that the kept bytes are UTF-8 (a SQL parameter).
    while (kept > 0 && (static_cast<unsigned char>(key[kept]) & 0xC0U) == 0x80U)
      --kept;
  }
  std::array<char, kKeptKeyBytes> bytes{};
  if (kept > 0) std::memcpy(bytes.data(), key.data(), kept);
  for (std::size_t i = 0; i < kWords; ++i) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i * 8, 8);
    s.key[i].store(word, std::memory_order_relaxed);
  }
  s.ticket.store(ticket, std::memory_order_relaxed);
  s.lsn.store(lsn, std::memory_order_relaxed);
  s.timeline.store(timeline, std::memory_order_relaxed);
  s.key_size.store(static_cast<std::uint32_t>(std::min<std::size_t>(key.size(), UINT32_MAX)),
                   std::memory_order_relaxed);
  s.kept.store(static_cast<std::uint32_t>(kept), std::memory_order_relaxed);
  s.host.store(host, std::memory_order_relaxed);
  s.at_ns.store(at.time_since_epoch().count(), std::memory_order_relaxed);
  // Only a key not kept whole is known by its hash.
  s.hash.store(kept < key.size() ? key_hash(key) : 0, std::memory_order_relaxed);
  s.seq.store(seq + 2, std::memory_order_release);
  return true;
}

std::vector<ConfirmedWrite> ConfirmedWrites::snapshot() const {
  std::vector<ConfirmedWrite> out;
  out.reserve(capacity_);
  for (std::size_t i = 0; i < capacity_; ++i) {
    const Slot& s = slots_[i];
    const std::uint64_t before = s.seq.load(std::memory_order_acquire);
    if (before == 0 || (before & 1U) != 0) continue;
    ConfirmedWrite w;
    w.ticket = s.ticket.load(std::memory_order_relaxed);
    w.lsn = s.lsn.load(std::memory_order_relaxed);
    w.timeline = s.timeline.load(std::memory_order_relaxed);
    w.key_size = s.key_size.load(std::memory_order_relaxed);
    const std::uint32_t kept = std::min<std::uint32_t>(s.kept.load(std::memory_order_relaxed),
                                                       static_cast<std::uint32_t>(kKeptKeyBytes));
    w.host = s.host.load(std::memory_order_relaxed);
    w.at = TimePoint(Duration(s.at_ns.load(std::memory_order_relaxed)));
    w.hash = s.hash.load(std::memory_order_relaxed);
    std::array<char, kKeptKeyBytes> bytes{};
    for (std::size_t k = 0; k < kWords; ++k) {
      const std::uint64_t word = s.key[k].load(std::memory_order_relaxed);
      std::memcpy(bytes.data() + k * 8, &word, 8);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != before) continue;  // written meanwhile
    w.kept.assign(bytes.data(), kept);
    out.push_back(std::move(w));
  }
  std::sort(out.begin(), out.end(),
            [](const ConfirmedWrite& a, const ConfirmedWrite& b) { return a.ticket < b.ticket; });
  return out;
}

Presence presence_by_position(const ConfirmedWrite& w, const WriterView& v) noexcept {
  if (w.lsn == 0 || w.timeline == 0 || v.timeline == 0) return Presence::kUnverified;
  // A writer on an older timeline never holds what a later one wrote (a split brain).
  if (w.timeline > v.timeline) return Presence::kMissing;
  if (w.timeline == v.timeline) {
    return w.lsn <= v.current_lsn ? Presence::kThere : Presence::kMissing;
  }
  if (!v.history.has_value()) return Presence::kUnverified;
  for (const auto& [timeline, switchpoint] : *v.history) {
    if (timeline == w.timeline) return w.lsn <= switchpoint ? Presence::kThere : Presence::kMissing;
  }
  // The writer's history never passed through that timeline: it forked before it.
  return Presence::kMissing;
}

bool written_elsewhere(const ConfirmedWrite& w, const WriterView& v) noexcept {
  return w.timeline != v.timeline || w.host != v.host;
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> parse_timeline_history(std::string_view text) {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
      line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    std::uint32_t timeline = 0;
    const auto r = std::from_chars(line.data(), line.data() + line.size(), timeline, 10);
    if (r.ec != std::errc() || timeline == 0) continue;
    std::string_view rest = line.substr(static_cast<std::size_t>(r.ptr - line.data()));
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
      rest.remove_prefix(1);
    const std::size_t stop = rest.find_first_of(" \t");
    Result<Lsn> switchpoint = Lsn::parse(rest.substr(0, stop));
    if (!switchpoint.ok()) continue;
    out.emplace_back(timeline, switchpoint->value);
  }
  return out;
}

}  // namespace holdfast::pg::detail
