// The writes a Database confirmed in the recent past, and whether a writer holds them (not
// installed). After a change of writer, lost_writes.cpp checks the ring against the new writer
// with the rules here (ADR 0036).
//
// ConfirmedWrites is a fixed ring filled at construction: recording a commit takes one atomic
// ticket and writes one slot under its own sequence number (a seqlock per slot), with no lock
// and no allocation. A reader copies what it can read whole and skips a slot being written.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"

namespace holdfast::pg::detail {

// The bytes of a key the ring keeps: the key whole when it is this long or shorter, else its
// first bytes (cut at a UTF-8 character's start) and the hash of all of it.
inline constexpr std::size_t kKeptKeyBytes = 64;

// FNV-1a, 64 bits: the hash a key too long to keep whole is known by.
[[nodiscard]] std::uint64_t key_hash(std::string_view key) noexcept;

// One confirmed write, as the ring gives it back.
struct ConfirmedWrite {
  std::uint64_t ticket = 0;    // the order writes were recorded in
  std::uint64_t lsn = 0;       // the writer's WAL position after the COMMIT; 0: not known
  std::uint32_t timeline = 0;  // the writer's timeline; 0: not known
  std::uintptr_t host = 0;     // which host of a multi-host URL (0: the URL's only one)
  TimePoint at{};              // when it was confirmed
  std::uint32_t key_size = 0;  // the whole key's size in bytes; 0: written without a key
  std::uint64_t hash = 0;      // key_hash() of the whole key, when not kept whole (else 0)
  std::string kept;            // the key, or its first bytes when key_size > kKeptKeyBytes

  [[nodiscard]] bool keyed() const noexcept { return key_size > 0; }
  [[nodiscard]] bool key_whole() const noexcept { return kept.size() == key_size; }
  // The key as a log line names it: whole, or its first bytes and "...(N bytes)".
  [[nodiscard]] std::string key_for_log() const;
  // "3:0/5000060", or "?" when the position is not known.
  [[nodiscard]] std::string position_for_log() const;
};

// A fixed ring of the last `capacity` confirmed writes. record() may be called from any
// thread at any time, snapshot() too (from any number of threads).
class ConfirmedWrites {
 public:
  // capacity 0: records nothing.
  explicit ConfirmedWrites(std::size_t capacity);
  ConfirmedWrites(const ConfirmedWrites&) = delete;
  ConfirmedWrites& operator=(const ConfirmedWrites&) = delete;

  // Records one confirmed write. No lock, no allocation. Returns false when the write was
  // dropped: its slot was being written by a writer a whole ring earlier (never in practice
  // with a ring larger than the writes in flight).
  bool record(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host, TimePoint at,
              std::string_view key) noexcept;
  // What the ring holds now, oldest first (slots being written are left out).
  [[nodiscard]] std::vector<ConfirmedWrite> snapshot() const;
  // The ticket the next record() takes: every write recorded so far has a smaller one.
  [[nodiscard]] std::uint64_t next_ticket() const noexcept {
    return next_.load(std::memory_order_acquire);
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  // Writes dropped by record().
  [[nodiscard]] std::uint64_t dropped() const noexcept {
    return dropped_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t kWords = kKeptKeyBytes / 8;
  struct Slot {
    std::atomic<std::uint64_t> seq{0};  // odd while written; 0: never written
    std::atomic<std::uint64_t> ticket{0};
    std::atomic<std::uint64_t> lsn{0};
    std::atomic<std::uint32_t> timeline{0};
    std::atomic<std::uint32_t> key_size{0};
    std::atomic<std::uint32_t> kept{0};
    std::atomic<std::uintptr_t> host{0};
    std::atomic<std::int64_t> at_ns{0};
    std::atomic<std::uint64_t> hash{0};
    std::array<std::atomic<std::uint64_t>, kWords> key{};
  };
  std::size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

// What the checker learnt of the writer it reached.
struct WriterView {
  std::uint32_t timeline = 0;     // its timeline
  std::uintptr_t host = 0;        // which host of the URL (0: the only one)
  std::uint64_t current_lsn = 0;  // pg_current_wal_lsn()
  // Its timeline history: for each timeline it descends from, where it left that timeline
  // (the .history file's "parent-tli switchpoint" lines). Not known: reading it needs
  // rights the role may lack.
  std::optional<std::vector<std::pair<std::uint32_t, std::uint64_t>>> history;
};

// Whether a writer holds a confirmed write.
enum class Presence : std::uint8_t {
  kThere,       // it holds it
  kMissing,     // it does not
  kUnverified,  // cannot be told (no key, and the position cannot be compared)
};

// By commit position and timeline (a write without a key): a write of a later timeline than
// the writer's is missing; on the writer's timeline it is there when the writer's position is
// at or past it; on an earlier timeline it is there when the writer's history leaves that
// timeline at or past it, missing when the history does not pass through it at all, and
// unverified when the history is not known.
[[nodiscard]] Presence presence_by_position(const ConfirmedWrite& w, const WriterView& v) noexcept;

// Whether `w` was written on another writer than `v` (another timeline or another host): the
// writes a change of writer puts in question.
[[nodiscard]] bool written_elsewhere(const ConfirmedWrite& w, const WriterView& v) noexcept;

// A timeline history file's text ("1\t0/3000000\tno recovery target specified\n...") as
// (timeline, switchpoint) pairs; lines it cannot read are skipped.
[[nodiscard]] std::vector<std::pair<std::uint32_t, std::uint64_t>> parse_timeline_history(
    std::string_view text);

}  // namespace holdfast::pg::detail
