// Confirmed writes that a change of writer lost (lost_writes.hpp, ADR 0036): the success
// path records each commit in the ring; a commit on another writer wakes a thread of the
// Database's own, which asks the writer for what was confirmed elsewhere and reports what it
// does not hold.
#include "lost_writes.hpp"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "array_literal.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/log/logger.hpp"
#include "holdfast/pg/lsn.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg::detail {
namespace {

// Writes named by one log line: a line stays readable, and every missing write is named.
constexpr std::size_t kWritesPerLine = 64;
// How long a check waits before trying again after a failed one.
constexpr Duration kCheckPause = std::chrono::seconds(1);

Logger& console_logger() {
  static Logger* const logger = new Logger();  // never destroyed: used by threads at exit
  return *logger;
}

// "0000000A": a timeline as WAL file names spell it.
std::string timeline_hex(std::uint32_t timeline) {
  char buf[9];
  const auto r = std::to_chars(buf, buf + 8, timeline, 16);
  std::string digits(buf, r.ptr);
  for (char& c : digits) {
    if (c >= 'a' && c <= 'f') c = static_cast<char>(c - 'a' + 'A');
  }
  return std::string(8 - digits.size(), '0') + digits;
}

// `text` in double quotes, '"' and '\' escaped: a key as a log line names it.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string array_literal(const std::vector<const ConfirmedWrite*>& writes) {
  std::string out = "{";
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_array_element(out, writes[i]->kept);
  }
  out.push_back('}');
  return out;
}

}  // namespace

LostWrites::LostWrites(const LostWritesOptions& options, ConnectOptions connect, std::string table,
                       const std::atomic<std::uint32_t>& newest, Metrics& metrics, Clock& clock)
    : options_(options),
      connect_(std::move(connect)),
      table_(std::move(table)),
      newest_(newest),
      metrics_(metrics),
      clock_(clock),
      ring_(options.remember) {}

LostWrites::~LostWrites() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LostWrites::confirmed(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host,
                           const Connection* conn, std::string_view key) noexcept {
  ring_.record(lsn, timeline, host, clock_.now(), key);
  if (timeline == 0) return;  // the position is not known: it says nothing of the writer
  if (timeline == writer_timeline_.load(std::memory_order_relaxed) &&
      host == writer_host_.load(std::memory_order_relaxed)) {
    return;
  }
  changed(Writer{timeline, host}, conn);
}

void LostWrites::changed(Writer to, const Connection* conn) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    const Writer from{writer_timeline_.load(std::memory_order_relaxed),
                      writer_host_.load(std::memory_order_relaxed)};
    if (from.timeline == to.timeline && from.host == to.host) return;
    writer_timeline_.store(to.timeline, std::memory_order_relaxed);
    writer_host_.store(to.host, std::memory_order_relaxed);
    if (conn != nullptr && host_names_.size() < 64 &&
        host_names_.find(to.host) == host_names_.end()) {
      host_names_.emplace(to.host, ConnectionAccess::server_name(*conn));
    }
    if (from.timeline == 0) return;  // the first writer this Database has seen
    ++report_.changes;
    pending_ = true;
    change_at_ = clock_.now();
    if (!thread_.joinable())
      thread_ = std::thread([this] {
        pthread_setname_np(pthread_self(), "hf-pg-lost");  // seen in top -H and /proc
        loop();
      });
  } catch (...) {
    return;  // no thread to be had: this change goes unchecked, the next one may not
  }
  wake_.notify_one();
}

void LostWrites::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || pending_; });
    if (stop_) return;
    pending_ = false;
    const TimePoint at = change_at_;
    bool done = false;
    for (int i = 0; i < options_.check_attempts && !done; ++i) {
      if (i > 0 && wake_.wait_for(lock, kCheckPause, [&] { return stop_; })) return;
      lock.unlock();
      done = check(at);
      lock.lock();
    }
    if (done) {
      ++report_.checks;
    } else {
      ++report_.checks_failed;
    }
  }
}

std::string LostWrites::host_name(std::uintptr_t host) const {
  const auto it = host_names_.find(host);
  return it != host_names_.end() && !it->second.empty() ? it->second : std::string("its host");
}

void LostWrites::log(Level level, const std::string& message) noexcept {
  Logger& logger = options_.logger != nullptr ? *options_.logger : console_logger();
  logger.log(level, "pg.lost_writes", message);
}

namespace {

// What the writer says of itself: that it is one (not in recovery), its WAL position, its
// timeline and which host it is. False when it said no, or could not say.
bool read_writer(Connection& conn, WriterView& view) {
  Result<Rows> recovery = conn.query("SELECT pg_catalog.pg_is_in_recovery()");
  if (!recovery.ok() || recovery->text(0, 0) != "f") return false;  // not the writer (yet)
  Result<Rows> where = conn.query(
      "SELECT pg_catalog.pg_current_wal_lsn()::text, "
      "pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)");
  if (!where.ok()) return false;
  Result<Lsn> current = Lsn::parse(where->text(0, 0));
  view.current_lsn = current.ok() ? current->value : 0;
  const std::string_view tli = where->text(0, 1);
  std::from_chars(tli.data(), tli.data() + tli.size(), view.timeline, 16);
  view.host = ConnectionAccess::host_id(conn);
  return view.timeline != 0 && view.current_lsn != 0;
}

// The idempotency keys the writer holds, of those asked for.
struct FoundKeys {
  std::unordered_set<std::string> keys;      // whole keys found
  std::unordered_set<std::uint64_t> hashes;  // the hashes of long keys found by their prefix
};

bool look_up_keys(Connection& conn, const std::string& table,
                  const std::vector<const ConfirmedWrite*>& whole_keys,
                  const std::vector<const ConfirmedWrite*>& long_keys, FoundKeys& found) {
  if (!whole_keys.empty()) {
    const std::string keys = array_literal(whole_keys);
    Result<Rows> r = conn.query(
        "SELECT key FROM " + table + " WHERE key = ANY($1::pg_catalog.text[])", {Param(keys)});
    if (!r.ok()) return false;
    for (int i = 0; i < r->size(); ++i)
      found.keys.emplace(r->text(i, 0));
  }
  if (!long_keys.empty()) {
    // Keys kept by their first bytes: every key that begins so, known by the hash of all of it.
    const std::string prefixes = array_literal(long_keys);
    Result<Rows> r = conn.query("SELECT k.key FROM " + table +
                                    " k JOIN pg_catalog.unnest($1::pg_catalog.text[]) AS p(prefix) "
                                    "ON pg_catalog.starts_with(k.key, p.prefix)",
                                {Param(prefixes)});
    if (!r.ok()) return false;
    for (int i = 0; i < r->size(); ++i)
      found.hashes.insert(key_hash(r->text(i, 0)));
  }
  return true;
}

// The writer's timeline history into `view` (superuser, or EXECUTE on pg_read_file granted);
// `no_rights` when the role may not read it. False when the connection was lost.
bool read_history(Connection& conn, WriterView& view, bool& no_rights) {
  if (view.timeline == 1) {
    view.history.emplace();  // the first timeline descends from none
    return true;
  }
  const std::string name = "pg_wal/" + timeline_hex(view.timeline) + ".history";
  Result<Rows> r = conn.query(
      "SELECT pg_catalog.pg_read_file($1::pg_catalog.text, 0, 1048576, true)", {Param(name)});
  if (r.ok() && !r->is_null(0, 0)) {
    view.history = parse_timeline_history(r->text(0, 0));
  } else if (!r.ok()) {
    if (!conn.is_open()) return false;
    no_rights = r.status().sqlstate() == "42501";
  }
  return true;
}

}  // namespace

bool LostWrites::check(TimePoint change_at) {
  const TimePoint deadline = clock_.now() + options_.check_timeout;
  Result<Connection> opened = Connection::open(connect_, deadline);
  if (!opened.ok()) return false;
  Connection& conn = *opened;
  conn.set_deadline(deadline);
  WriterView view;
  if (!read_writer(conn, view)) return false;

  const std::vector<ConfirmedWrite> ring = ring_.snapshot();
  std::vector<const ConfirmedWrite*> candidates;
  std::vector<const ConfirmedWrite*> whole_keys;
  std::vector<const ConfirmedWrite*> long_keys;
  bool need_history = false;
  // A key confirmed again (a repeat that replayed it, ADR 0053) is one write: checked and
  // reported once, by its first record.
  std::unordered_set<std::string_view> whole_seen;
  std::unordered_set<std::uint64_t> long_seen;
  for (const ConfirmedWrite& w : ring) {
    if (w.at < change_at - options_.horizon || !written_elsewhere(w, view)) continue;
    if (w.keyed() &&
        !(w.key_whole() ? whole_seen.insert(w.kept).second : long_seen.insert(w.hash).second)) {
      continue;
    }
    if (reported_.count(w.ticket) != 0) continue;
    candidates.push_back(&w);
    if (w.keyed()) {
      (w.key_whole() ? whole_keys : long_keys).push_back(&w);
    } else if (w.timeline != 0 && w.timeline < view.timeline) {
      need_history = true;
    }
  }

  FoundKeys found;
  if (!look_up_keys(conn, table_, whole_keys, long_keys, found)) return false;
  bool no_rights = false;
  if (need_history && !read_history(conn, view, no_rights)) return false;

  std::vector<const ConfirmedWrite*> missing;
  std::vector<const ConfirmedWrite*> unverified;
  for (const ConfirmedWrite* w : candidates) {
    Presence p = Presence::kThere;
    if (w->keyed()) {
      const bool there =
          w->key_whole() ? found.keys.count(w->kept) != 0 : found.hashes.count(w->hash) != 0;
      p = there ? Presence::kThere : Presence::kMissing;
    } else {
      p = presence_by_position(*w, view);
    }
    if (p == Presence::kMissing) missing.push_back(w);
    if (p == Presence::kUnverified) unverified.push_back(w);
  }

  std::lock_guard<std::mutex> lock(mutex_);
  const std::string writer = host_name(view.host) + " on timeline " + std::to_string(view.timeline);
  const std::uint32_t newest = newest_.load(std::memory_order_relaxed);
  if (view.timeline < newest) {
    ++report_.split_brains;
    metrics_.count_split_brain();
    const std::string line = "split brain: the writer (" + writer +
                             ") is on an older timeline than timeline " + std::to_string(newest) +
                             ", which this process confirmed writes on; what was confirmed "
                             "there is not on this writer";
    log(Level::kError, line);
    report_.last_finding = line;
    report_.last_finding_at = clock_.now();
    report_.last_missing.clear();
  }
  if (!missing.empty()) report_missing(writer, missing);
  if (!unverified.empty()) {
    report_.unverified_total += unverified.size();
    metrics_.count_confirmed_writes_unverified(unverified.size());
    for (const ConfirmedWrite* w : unverified)
      reported_.insert(w->ticket);
    log(Level::kWarn,
        std::to_string(unverified.size()) +
            " confirmed writes without an idempotency key, confirmed on an earlier "
            "timeline, could not be checked against the writer (" +
            writer + ")" +
            (no_rights ? ": reading its timeline history needs superuser or EXECUTE on "
                         "pg_read_file(text, bigint, bigint, boolean)"
                       : ": its timeline history could not be read"));
  }
  if (missing.empty() && unverified.empty() && view.timeline >= newest) {
    // Said once per change, so that an operator sees the check ran and found nothing.
    log(Level::kInfo,
        "a change of writer was checked: the writer (" + writer + ") holds all " +
            std::to_string(candidates.size()) + " writes confirmed elsewhere in the last " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(options_.horizon).count()) +
            " s");
  }
  // Tickets the ring no longer holds need not be remembered.
  const std::uint64_t next = ring_.next_ticket();
  if (next > ring_.capacity()) {
    std::erase_if(reported_, [&](std::uint64_t t) { return t < next - ring_.capacity(); });
  }
  return true;
}

void LostWrites::report_missing(const std::string& writer,
                                const std::vector<const ConfirmedWrite*>& missing) {
  report_.missing_total += missing.size();
  metrics_.count_confirmed_writes_missing(missing.size());
  report_.last_missing.clear();
  std::size_t keyed = 0;
  for (std::size_t first = 0; first < missing.size(); first += kWritesPerLine) {
    const std::size_t end = std::min(missing.size(), first + kWritesPerLine);
    std::string line = std::to_string(missing.size()) +
                       " confirmed writes are not on the writer after a change of writer "
                       "(now " +
                       writer + ")";
    if (missing.size() > kWritesPerLine) {
      line += " [" + std::to_string(first + 1) + "-" + std::to_string(end) + "]";
    }
    line += ":";
    for (std::size_t i = first; i < end; ++i) {
      const ConfirmedWrite& w = *missing[i];
      line += i > first ? ", " : " ";
      if (w.keyed()) {
        ++keyed;
        line += "key " + quoted(w.key_for_log()) + " at " + w.position_for_log();
      } else {
        line += "a write without a key at " + w.position_for_log();
      }
      if (report_.last_missing.size() < 64) {
        report_.last_missing.push_back(w.keyed() ? w.key_for_log() : w.position_for_log());
      }
      reported_.insert(w.ticket);
    }
    log(Level::kError, line);
  }
  report_.last_finding = std::to_string(missing.size()) + " confirmed writes (" +
                         std::to_string(keyed) + " with a key) not on the writer (" + writer + ")";
  report_.last_finding_at = clock_.now();
}

LostWritesReport LostWrites::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  LostWritesReport r = report_;
  r.dropped = ring_.dropped();
  return r;
}

}  // namespace holdfast::pg::detail

namespace holdfast::pg {

Status check(const LostWritesOptions& o) {
  if (o.remember == 0) return Status(Code::kInvalidArgument, "lost_writes.remember is 0 (off)");
  if (o.horizon <= Duration::zero()) {
    return Status(Code::kInvalidArgument, "lost_writes.horizon must be greater than zero");
  }
  if (o.check_timeout <= Duration::zero()) {
    return Status(Code::kInvalidArgument, "lost_writes.check_timeout must be greater than zero");
  }
  if (o.check_attempts < 1) {
    return Status(Code::kInvalidArgument, "lost_writes.check_attempts must be at least 1");
  }
  return Status();
}

// ---------------------------------------------------------------------------------------
// LostWritesWatch: a LostWrites with the newest timeline of its own.

struct LostWritesWatch::Impl {
  Impl(const LostWritesOptions& options, ConnectOptions connect, std::string table,
       Metrics& metrics, Clock& clock)
      : lost(options, std::move(connect), std::move(table), newest, metrics, clock) {}
  std::atomic<std::uint32_t> newest{0};
  detail::LostWrites lost;
};

Result<std::unique_ptr<LostWritesWatch>> LostWritesWatch::open(const LostWritesOptions& options,
                                                               const ConnectOptions& connect,
                                                               std::string table, Metrics& metrics,
                                                               Clock& clock) {
  if (Status bad = check(options); !bad.ok()) return bad;
  if (table.empty()) {
    return Status(Code::kInvalidArgument, "LostWritesWatch: no idempotency-key table named");
  }
  ConnectOptions check = connect;
  detail::ConnectionAccess::ask_for_writer(check);
  if (check.clock == nullptr) check.clock = &clock;
  try {
    return std::unique_ptr<LostWritesWatch>(new LostWritesWatch(
        std::make_unique<Impl>(options, std::move(check), std::move(table), metrics, clock)));
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, "LostWritesWatch: no memory for its ring");
  }
}

LostWritesWatch::LostWritesWatch(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

LostWritesWatch::~LostWritesWatch() = default;

void LostWritesWatch::confirmed(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host,
                                std::string_view key) noexcept {
  std::uint32_t seen = impl_->newest.load(std::memory_order_relaxed);
  while (timeline > seen &&
         !impl_->newest.compare_exchange_weak(seen, timeline, std::memory_order_relaxed)) {
  }
  impl_->lost.confirmed(lsn, timeline, host, nullptr, key);
}

LostWritesReport LostWritesWatch::report() const {
  return impl_->lost.report();
}

}  // namespace holdfast::pg
