#include "holdfast/database_sink.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "format.hpp"

namespace holdfast {
namespace {

constexpr std::size_t kLevels = 4;
constexpr std::size_t kReservedContextBytes = 32;
constexpr std::size_t kMaxContextBytes = 128;
constexpr std::string_view kTruncated = " [truncated]";
constexpr std::string_view kLoggerContext = "logger";
// Report lines ahead of a batch: the pause gap, lost entries, dropped entries.
constexpr std::size_t kMaxReports = 3;

std::size_t index_of(Level level) noexcept {
  return static_cast<std::size_t>(level);
}

class StringOut {
 public:
  explicit StringOut(std::string& s) noexcept : s_(s) {}
  void push(char c) { s_.push_back(c); }
  void append(std::string_view text) { s_.append(text); }

 private:
  std::string& s_;
};

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence.
void cut_utf8(std::string& s, std::size_t max) {
  if (s.size() <= max) return;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;
  s.resize(cut);
}

// The message column: the message, then " key=value" pairs as on the console.
void fill_message(std::string& out, const LogEntry& e, std::size_t max) {
  out.clear();
  out.append(e.message.substr(0, max + 1));
  StringOut s(out);
  log_detail::append_fields(s, e.fields);
  if (out.size() > max) {
    cut_utf8(out, max - kTruncated.size());
    out.append(kTruncated);
  }
}

void append_count(std::string& out, std::uint64_t n) {
  out.append(std::to_string(n));
}

// "812 entries (INFO 700, WARN 100, ERROR 12)"
void append_counts(std::string& out, const std::array<std::uint64_t, kLevels>& counts) {
  std::uint64_t total = 0;
  for (std::uint64_t n : counts)
    total += n;
  append_count(out, total);
  out.append(total == 1 ? " entry (" : " entries (");
  bool first = true;
  for (Level level : {Level::kInfo, Level::kWarn, Level::kError}) {
    if (!first) out.append(", ");
    first = false;
    out.append(to_string(level));
    out.push_back(' ');
    append_count(out, counts[index_of(level)]);
  }
  out.push_back(')');
}

std::uint64_t sum(const std::array<std::uint64_t, kLevels>& counts) noexcept {
  std::uint64_t total = 0;
  for (std::uint64_t n : counts)
    total += n;
  return total;
}

// The lock is held only for a copy (callers) or an O(1) swap (the writer): spin a little
// before sleeping in the kernel, which costs microseconds.
void lock_spinning_briefly(std::mutex& m) noexcept {
  for (int i = 0; i < 100; ++i) {
    if (m.try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  m.lock();
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("DatabaseSink::Options::") + what);
}

}  // namespace

struct DatabaseSink::State {
  State(LogStore& s, const Options& o)
      : store(s),
        options(o),
        clock(o.clock ? *o.clock : Clock::system()),
        wall(o.wall ? *o.wall : WallClock::system()) {
    auto reserved = [&](std::size_t n) {
      std::vector<LogRecord> v(n);
      for (LogRecord& r : v) {
        r.context.reserve(kReservedContextBytes);
        r.message.reserve(o.reserved_message_bytes);
      }
      return v;
    };
    front = reserved(o.queue_capacity);
    back = reserved(o.queue_capacity);
    out = reserved(o.batch_size + kMaxReports);
    entry_levels.reserve(o.batch_size);
  }

  std::unique_ptr<LogStore> owned_store;  // set when the sink owns its store
  LogStore& store;
  const Options options;
  Clock& clock;
  const WallClock& wall;
  const std::size_t wake_threshold = std::max(options.batch_size, options.queue_capacity / 2);

  // The queue, guarded by `mutex`: callers fill `front` (preallocated records, in order);
  // the writer swaps it whole with its emptied `back`, so the writer holds the lock for an
  // O(1) swap, never for a copy.
  mutable std::mutex mutex;
  std::condition_variable wake;  // the writer waits here
  std::condition_variable done;  // flush() waits here
  std::vector<LogRecord> front;
  std::size_t count = 0;  // records in use at the start of `front`
  std::array<std::size_t, kLevels> queued_by_level{};
  bool writer_waiting = false;
  bool wake_requested = false;
  bool stopping = false;
  std::size_t flush_waiters = 0;
  std::uint64_t pushed = 0;   // entries that entered the queue
  std::uint64_t handled = 0;  // entries that left it: written, skipped, lost or evicted
  std::array<std::uint64_t, kLevels> shutdown_lost{};  // discarded by the destructor

  // Counters, read by stats() from any thread.
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> stored{0};
  std::atomic<std::uint64_t> reports{0};
  std::atomic<std::uint64_t> failed_writes{0};
  std::atomic<std::uint64_t> pauses{0};
  std::array<std::atomic<std::uint64_t>, kLevels> skipped{};
  std::array<std::atomic<std::uint64_t>, kLevels> dropped{};
  std::array<std::atomic<std::uint64_t>, kLevels> lost{};
  std::atomic<bool> paused_flag{false};
  std::atomic<std::int64_t> pause_until_ns{0};

  // Writer-thread state (and the destructor's, after the writer has stopped).
  std::vector<LogRecord> back;  // the last `front` taken, written batch by batch
  std::vector<LogRecord> out;   // the rows of one write_batch() call: reports, then entries
  std::vector<Level> entry_levels;
  bool paused = false;
  TimePoint pause_start{};
  TimePoint pause_until{};
  TimePoint next_error_at{};
  Duration paused_unreported{};  // length of ended pauses not yet reported by a gap line
  bool gap_pending = false;      // a pause ended and its gap line is not stored yet
  std::array<std::uint64_t, kLevels> skipped_unreported{};
  bool failing = false;  // the last write failed for a reason other than overload
  std::string lost_reason;
  std::array<std::uint64_t, kLevels> lost_unreported{};
  std::array<std::uint64_t, kLevels> dropped_reported{};

  std::thread writer;

  // REQUIRES: mutex held, queue full. Evicts the oldest queued entry of the lowest level below
  // `incoming`; false when there is none.
  bool evict_below(Level incoming) noexcept {
    for (std::size_t lvl = 0; lvl < index_of(incoming); ++lvl) {
      if (queued_by_level[lvl] == 0) continue;
      std::size_t i = 0;
      while (index_of(front[i].level) != lvl)
        ++i;
      // Close the gap so the queue keeps its order (swaps move no text).
      for (; i + 1 < count; ++i)
        std::swap(front[i], front[i + 1]);
      --count;
      --queued_by_level[lvl];
      dropped[lvl].fetch_add(1, std::memory_order_relaxed);
      ++handled;
      return true;
    }
    return false;
  }

  void run() noexcept;
  void process(LogRecord* batch, std::size_t n, bool final_reports) noexcept;
  std::size_t add_reports(WallTime created_at,
                          std::array<std::uint64_t, kLevels>& dropped_snapshot);
  void end_pause() noexcept;
  void on_stored(std::size_t entries, std::size_t report_rows,
                 const std::array<std::uint64_t, kLevels>& dropped_snapshot) noexcept;
  void on_failed(const Status& status, TimePoint now) noexcept;
  void console_summary() noexcept;
};

void DatabaseSink::State::run() noexcept {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    auto ready = [&] { return stopping || wake_requested || count >= options.batch_size; };
    if (!ready()) {
      writer_waiting = true;
      wake.wait_for(lock, options.linger, ready);
      writer_waiting = false;
    }
    if (count == 0) {
      wake_requested = false;
      if (stopping) break;
      continue;
    }
    std::swap(front, back);
    const std::size_t taken = count;
    count = 0;
    queued_by_level = {};
    wake_requested = false;
    lock.unlock();
    for (std::size_t i = 0; i < taken; i += options.batch_size) {
      process(back.data() + i, std::min(options.batch_size, taken - i), false);
    }
    lock.lock();
    handled += taken;
    if (flush_waiters > 0) done.notify_all();
  }
  for (std::size_t i = 0; i < kLevels; ++i)
    lost_unreported[i] += shutdown_lost[i];
  if (sum(shutdown_lost) > 0 && lost_reason.empty()) {
    try {
      lost_reason = "the sink shut down before they were stored";
    } catch (...) {
    }
  }
  lock.unlock();
  // Shutting down: a pause that is over still gets its gap line (and other reports) stored.
  process(nullptr, 0, true);
}

void DatabaseSink::State::end_pause() noexcept {
  paused = false;
  paused_flag.store(false, std::memory_order_relaxed);
  paused_unreported += pause_until - pause_start;
  gap_pending = true;
}

std::size_t DatabaseSink::State::add_reports(WallTime created_at,
                                             std::array<std::uint64_t, kLevels>& dropped_now) {
  std::size_t r = 0;
  auto next = [&]() -> std::string& {
    LogRecord& rec = out[r++];
    rec.level = Level::kWarn;
    rec.context.assign(kLoggerContext);
    rec.created_at = created_at;
    rec.message.clear();
    return rec.message;
  };
  if (gap_pending) {
    std::string& m = next();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(
        paused_unreported + std::chrono::milliseconds(500));
    m.append("Log persistence paused for ");
    append_count(m, static_cast<std::uint64_t>(secs.count()));
    m.append(" s while the database was overloaded; skipped ");
    append_counts(m, skipped_unreported);
  }
  if (sum(lost_unreported) > 0) {
    std::string& m = next();
    m.append("Log persistence failed; lost ");
    append_counts(m, lost_unreported);
    m.append(": ");
    m.append(lost_reason);
  }
  std::array<std::uint64_t, kLevels> new_drops{};
  for (std::size_t i = 0; i < kLevels; ++i) {
    dropped_now[i] = dropped[i].load(std::memory_order_relaxed);
    new_drops[i] = dropped_now[i] - dropped_reported[i];
  }
  if (sum(new_drops) > 0) {
    std::string& m = next();
    m.append("Log queue was full; dropped ");
    append_counts(m, new_drops);
  }
  return r;
}

void DatabaseSink::State::on_stored(
    std::size_t entries, std::size_t report_rows,
    const std::array<std::uint64_t, kLevels>& dropped_now) noexcept {
  stored.fetch_add(entries, std::memory_order_relaxed);
  if (report_rows == 0) return;
  reports.fetch_add(report_rows, std::memory_order_relaxed);
  gap_pending = false;
  paused_unreported = {};
  skipped_unreported = {};
  if (sum(lost_unreported) > 0) {
    try {
      std::string line = "Log persistence works again; lost ";
      append_counts(line, lost_unreported);
      console::write(Level::kWarn, kLoggerContext, line);
    } catch (...) {
    }
  }
  lost_unreported = {};
  failing = false;
  dropped_reported = dropped_now;
}

void DatabaseSink::State::on_failed(const Status& status, TimePoint now) noexcept {
  failed_writes.fetch_add(1, std::memory_order_relaxed);
  if (status.fault().overload) {
    if (!paused) {
      paused = true;
      pause_start = now;
      paused_flag.store(true, std::memory_order_relaxed);
      pauses.fetch_add(1, std::memory_order_relaxed);
      try {
        const auto secs =
            std::chrono::duration_cast<std::chrono::seconds>(options.overload_pause).count();
        console::write(Level::kWarn, kLoggerContext,
                       "Log persistence paused for " + std::to_string(secs) +
                           " s: the database is overloaded (" + status.to_string() +
                           "); the console still gets every entry");
      } catch (...) {
      }
    }
    // Another overload failure (a paused ERROR write) restarts the pause.
    pause_until = now + options.overload_pause;
    pause_until_ns.store(pause_until.time_since_epoch().count(), std::memory_order_relaxed);
    next_error_at = now + options.paused_error_interval;
    return;
  }
  if (!failing) {
    failing = true;
    try {
      lost_reason = status.ok() ? "the log store failed" : status.to_string();
      console::write(Level::kError, kLoggerContext,
                     "Log persistence failed (" + lost_reason +
                         "); entries are counted as lost until a write succeeds");
    } catch (...) {
    }
  }
}

void DatabaseSink::State::process(LogRecord* batch, std::size_t n, bool final_reports) noexcept {
  const TimePoint now = clock.now();
  if (paused && now >= pause_until) end_pause();

  // Which entries are stored now; the others are skipped by the pause.
  std::size_t keep = 0;
  entry_levels.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const Level level = batch[i].level;
    bool store_it = !paused;
    if (paused && level == Level::kError && now >= next_error_at) {
      store_it = true;
      next_error_at = now + options.paused_error_interval;
    }
    if (!store_it) {
      skipped[index_of(level)].fetch_add(1, std::memory_order_relaxed);
      ++skipped_unreported[index_of(level)];
      continue;
    }
    if (keep != i) std::swap(batch[keep], batch[i]);
    ++keep;
  }
  if (keep == 0 && !final_reports) return;

  std::size_t rows = 0;
  std::array<std::uint64_t, kLevels> dropped_now = dropped_reported;
  try {
    if (!paused) {
      // The report lines take the time of the first entry they precede, so ordering the
      // table by created_at keeps them just before it.
      const WallTime at = keep > 0 ? batch[0].created_at : WallTime{};
      rows = add_reports(at, dropped_now);
    }
  } catch (...) {
    rows = 0;  // no memory for report text: they stay pending
  }
  if (keep == 0 && (rows == 0 || !final_reports)) return;
  if (keep == 0) {
    // Shutdown reports stand alone: date them now.
    const WallTime at = wall.now();
    for (std::size_t i = 0; i < rows; ++i)
      out[i].created_at = at;
  }
  const std::size_t report_rows = rows;
  for (std::size_t i = 0; i < keep; ++i) {
    entry_levels.push_back(batch[i].level);
    std::swap(out[rows++], batch[i]);
  }

  Status status;
  bool failed = true;
  try {
    status = store.write_batch(std::span<const LogRecord>(out.data(), rows));
    failed = !status.ok();
  } catch (const std::exception& e) {
    try {
      status = Status(Code::kInternal, std::string("log store threw: ") + e.what());
    } catch (...) {
    }
  } catch (...) {
    try {
      status = Status(Code::kInternal, "log store threw a non-standard exception");
    } catch (...) {
    }
  }
  if (!failed) {
    on_stored(keep, report_rows, dropped_now);
    return;
  }
  const bool overload = status.fault().overload;
  for (Level level : entry_levels) {
    const std::size_t l = index_of(level);
    if (overload) {
      skipped[l].fetch_add(1, std::memory_order_relaxed);
      ++skipped_unreported[l];
    } else {
      lost[l].fetch_add(1, std::memory_order_relaxed);
      ++lost_unreported[l];
    }
  }
  on_failed(status, now);
}

void DatabaseSink::State::console_summary() noexcept {
  std::array<std::uint64_t, kLevels> new_drops{};
  for (std::size_t i = 0; i < kLevels; ++i) {
    new_drops[i] = dropped[i].load(std::memory_order_relaxed) - dropped_reported[i];
  }
  const std::uint64_t missing = sum(skipped_unreported) + sum(lost_unreported) + sum(new_drops);
  if (missing == 0) return;
  try {
    std::string line = "DatabaseSink closing: ";
    append_count(line, missing);
    line.append(missing == 1 ? " entry" : " entries");
    line.append(" never reached the logs table and no line there says so (skipped ");
    append_counts(line, skipped_unreported);
    line.append("; lost ");
    append_counts(line, lost_unreported);
    line.append("; dropped ");
    append_counts(line, new_drops);
    line.push_back(')');
    console::write(Level::kWarn, kLoggerContext, line);
  } catch (...) {
  }
}

DatabaseSink::DatabaseSink(LogStore& store, Options options) {
  require(options.queue_capacity > 0, "queue_capacity must be at least 1");
  require(options.batch_size > 0, "batch_size must be at least 1");
  require(options.batch_size <= options.queue_capacity,
          "batch_size must not exceed queue_capacity");
  require(options.overload_pause >= Duration::zero(), "overload_pause must not be negative");
  require(options.paused_error_interval >= Duration::zero(),
          "paused_error_interval must not be negative");
  require(options.min_level != Level::kDebug,
          "min_level must be INFO, WARN or ERROR (DEBUG never goes to the database)");
  require(options.max_message_bytes >= 64, "max_message_bytes must be at least 64");
  require(options.linger.count() > 0, "linger must be at least 1 ms");
  require(options.shutdown_drain.count() >= 0, "shutdown_drain must not be negative");
  state_ = std::make_unique<State>(store, options);
  state_->writer = std::thread([s = state_.get()] { s->run(); });
}

DatabaseSink::DatabaseSink(std::unique_ptr<LogStore> store, Options options)
    : DatabaseSink(
          store ? *store : throw std::invalid_argument("DatabaseSink: store must not be null"),
          options) {
  state_->owned_store = std::move(store);
}

DatabaseSink::~DatabaseSink() {
  if (!state_) return;
  State& s = *state_;
  flush(s.options.shutdown_drain);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    // Whatever the writer could not store in time is lost.
    for (std::size_t i = 0; i < s.count; ++i) {
      const Level level = s.front[i].level;
      s.lost[index_of(level)].fetch_add(1, std::memory_order_relaxed);
      ++s.shutdown_lost[index_of(level)];
    }
    s.handled += s.count;
    s.count = 0;
    s.queued_by_level = {};
    s.stopping = true;
  }
  s.wake.notify_all();
  if (s.writer.joinable()) s.writer.join();
  s.console_summary();
}

bool DatabaseSink::accepts(Level level) const noexcept {
  return level >= state_->options.min_level;
}

void DatabaseSink::write(const LogEntry& entry) noexcept {
  if (!accepts(entry.level)) return;
  State& s = *state_;
  const std::size_t level = index_of(entry.level);
  bool notify = false;
  try {
    lock_spinning_briefly(s.mutex);
    std::lock_guard<std::mutex> lock(s.mutex, std::adopt_lock);
    if (s.stopping) {
      s.lost[level].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (s.count == s.front.size() && !s.evict_below(entry.level)) {
      s.dropped[level].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    LogRecord& r = s.front[s.count];
    r.level = entry.level;
    r.created_at = entry.created_at;
    r.context.assign(entry.context.substr(0, kMaxContextBytes));
    fill_message(r.message, entry, s.options.max_message_bytes);
    ++s.count;
    ++s.queued_by_level[level];
    ++s.pushed;
    s.accepted.fetch_add(1, std::memory_order_relaxed);
    if (entry.level == Level::kError) s.wake_requested = true;
    // Wake the writer only when it has a reason to hurry (an ERROR, a half-full queue);
    // otherwise it comes by itself within `linger`, and the caller makes no system call.
    if (s.writer_waiting && (s.wake_requested || s.count >= s.wake_threshold)) {
      s.writer_waiting = false;
      notify = true;
    }
  } catch (...) {
    // Out of memory while copying the message: the slot was not taken.
    s.dropped[level].fetch_add(1, std::memory_order_relaxed);
  }
  if (notify) s.wake.notify_one();
}

bool DatabaseSink::flush(std::chrono::milliseconds timeout) noexcept {
  State& s = *state_;
  try {
    std::unique_lock<std::mutex> lock(s.mutex);
    const std::uint64_t target = s.pushed;
    if (s.handled >= target) return true;
    s.wake_requested = true;
    s.wake.notify_one();
    ++s.flush_waiters;
    const bool done = s.done.wait_for(lock, timeout, [&] { return s.handled >= target; });
    --s.flush_waiters;
    return done;
  } catch (...) {
    return false;
  }
}

DatabaseSinkStats DatabaseSink::stats() const noexcept {
  const State& s = *state_;
  DatabaseSinkStats out;
  out.accepted = s.accepted.load(std::memory_order_relaxed);
  out.stored = s.stored.load(std::memory_order_relaxed);
  out.reports = s.reports.load(std::memory_order_relaxed);
  out.failed_writes = s.failed_writes.load(std::memory_order_relaxed);
  out.pauses = s.pauses.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kLevels; ++i) {
    out.skipped.by_level[i] = s.skipped[i].load(std::memory_order_relaxed);
    out.dropped.by_level[i] = s.dropped[i].load(std::memory_order_relaxed);
    out.lost.by_level[i] = s.lost[i].load(std::memory_order_relaxed);
  }
  out.paused = paused();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    out.queued = s.count;
  }
  return out;
}

bool DatabaseSink::paused() const noexcept {
  const State& s = *state_;
  return s.paused_flag.load(std::memory_order_relaxed) &&
         s.clock.now().time_since_epoch().count() <
             s.pause_until_ns.load(std::memory_order_relaxed);
}

const DatabaseSink::Options& DatabaseSink::options() const noexcept {
  return state_->options;
}

}  // namespace holdfast
