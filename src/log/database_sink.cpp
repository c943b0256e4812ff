#include "holdfast/log/database_sink.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "format.hpp"
#include "loss_report.hpp"
#include "overload_pause.hpp"

namespace holdfast {
namespace {

using log_detail::index_of;
using log_detail::kLevels;
using log_detail::kLoggerContext;
using log_detail::kMaxReports;
using log_detail::PerLevel;
using log_detail::StringOut;

constexpr std::size_t kReservedContextBytes = 32;
constexpr std::size_t kMaxContextBytes = 128;
constexpr std::string_view kTruncated = " [truncated]";

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

std::vector<LogRecord> reserved_records(std::size_t n, std::size_t message_bytes) {
  std::vector<LogRecord> v(n);
  for (LogRecord& r : v) {
    r.context.reserve(kReservedContextBytes);
    r.message.reserve(message_bytes);
  }
  return v;
}

}  // namespace

struct DatabaseSink::State {
  State(LogStore& s, const Options& o)
      : store(s),
        options(o),
        clock(o.clock ? *o.clock : Clock::system()),
        wall(o.wall ? *o.wall : WallClock::system()),
        writer(o) {
    queue.front = reserved_records(o.queue_capacity, o.reserved_message_bytes);
  }

  // The queue, guarded by `mutex`: callers fill `front` (preallocated records, in order);
  // the writer swaps it whole with its emptied `back`, so the writer holds the lock for an
  // O(1) swap, never for a copy.
  struct Queue {
    mutable std::mutex mutex;
    std::condition_variable wake;  // the writer waits here
    std::condition_variable done;  // flush() waits here
    std::vector<LogRecord> front;
    std::size_t count = 0;  // records in use at the start of `front`
    std::array<std::size_t, kLevels> by_level{};
    bool writer_waiting = false;
    bool wake_requested = false;
    bool stopping = false;
    std::size_t flush_waiters = 0;
    std::uint64_t pushed = 0;   // entries that entered the queue
    std::uint64_t handled = 0;  // entries that left it: written, skipped, lost or evicted
    PerLevel shutdown_lost{};   // discarded by the destructor
  };

  // What stats() and paused() read, from any thread.
  struct Counters {
    std::atomic<std::uint64_t> accepted{0};
    std::atomic<std::uint64_t> stored{0};
    std::atomic<std::uint64_t> reports{0};
    std::atomic<std::uint64_t> failed_writes{0};
    std::atomic<std::uint64_t> pauses{0};
    std::array<std::atomic<std::uint64_t>, kLevels> skipped{};
    std::array<std::atomic<std::uint64_t>, kLevels> dropped{};
    std::array<std::atomic<std::uint64_t>, kLevels> lost{};
    std::atomic<bool> paused{false};
    std::atomic<std::int64_t> pause_until_ns{0};

    [[nodiscard]] PerLevel dropped_now() const noexcept {
      PerLevel out{};
      for (std::size_t i = 0; i < kLevels; ++i)
        out[i] = dropped[i].load(std::memory_order_relaxed);
      return out;
    }
  };

  // The writer thread's (and the destructor's, once the writer has stopped).
  struct Writer {
    explicit Writer(const Options& o)
        : out(reserved_records(o.batch_size + kMaxReports, o.reserved_message_bytes)),
          pause(o.overload_pause, o.paused_error_interval) {
      back = reserved_records(o.queue_capacity, o.reserved_message_bytes);
      entry_levels.reserve(o.batch_size);
    }
    std::vector<LogRecord> back;  // the last `front` taken, written batch by batch
    std::vector<LogRecord> out;   // the rows of one write_batch() call: reports, then entries
    std::vector<Level> entry_levels;
    log_detail::OverloadPause pause;
    log_detail::LossReport losses;
    std::thread thread;
  };

  std::unique_ptr<LogStore> owned_store;  // set when the sink owns its store
  LogStore& store;
  const Options options;
  Clock& clock;
  const WallClock& wall;
  const std::size_t wake_threshold = std::max(options.batch_size, options.queue_capacity / 2);
  Queue queue;
  Counters counters;
  Writer writer;

  // REQUIRES: queue.mutex held, queue full. Evicts the oldest queued entry of the lowest
  // level below `incoming`; false when there is none.
  bool evict_below(Level incoming) noexcept;

  void run() noexcept;
  // Stores the `n` entries at `batch` that the pause lets through, after the report rows
  // due; `final_reports`: shutting down, the report rows go even with no entry.
  void process(LogRecord* batch, std::size_t n, bool final_reports) noexcept;
  // Moves the entries the pause lets through to the front of `batch`; returns how many.
  std::size_t select(LogRecord* batch, std::size_t n, TimePoint now) noexcept;
  // write_batch() of writer.out[0, rows): true when stored, else `status` says why (a store
  // that throws is a failure, kInternal when there is memory to say so).
  bool write_rows(std::size_t rows, Status& status) noexcept;
  void on_failed(const Status& status, TimePoint now) noexcept;
};

bool DatabaseSink::State::evict_below(Level incoming) noexcept {
  std::vector<LogRecord>& front = queue.front;
  for (std::size_t lvl = 0; lvl < index_of(incoming); ++lvl) {
    if (queue.by_level[lvl] == 0) continue;
    std::size_t i = 0;
    while (index_of(front[i].level) != lvl)
      ++i;
    // Close the gap so the queue keeps its order (swaps move no text).
    for (; i + 1 < queue.count; ++i)
      std::swap(front[i], front[i + 1]);
    --queue.count;
    --queue.by_level[lvl];
    counters.dropped[lvl].fetch_add(1, std::memory_order_relaxed);
    ++queue.handled;
    return true;
  }
  return false;
}

void DatabaseSink::State::run() noexcept {
  std::unique_lock<std::mutex> lock(queue.mutex);
  for (;;) {
    auto ready = [&] {
      return queue.stopping || queue.wake_requested || queue.count >= options.batch_size;
    };
    if (!ready()) {
      queue.writer_waiting = true;
      queue.wake.wait_for(lock, options.linger, ready);
      queue.writer_waiting = false;
    }
    if (queue.count == 0) {
      queue.wake_requested = false;
      if (queue.stopping) break;
      continue;
    }
    std::swap(queue.front, writer.back);
    const std::size_t taken = queue.count;
    queue.count = 0;
    queue.by_level = {};
    queue.wake_requested = false;
    lock.unlock();
    for (std::size_t i = 0; i < taken; i += options.batch_size) {
      process(writer.back.data() + i, std::min(options.batch_size, taken - i), false);
    }
    lock.lock();
    queue.handled += taken;
    if (queue.flush_waiters > 0) queue.done.notify_all();
  }
  writer.losses.shut_down(queue.shutdown_lost);
  lock.unlock();
  // Shutting down: a pause that is over still gets its gap line (and other reports) stored.
  process(nullptr, 0, true);
}

std::size_t DatabaseSink::State::select(LogRecord* batch, std::size_t n, TimePoint now) noexcept {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Level level = batch[i].level;
    if (!writer.pause.stores(level, now)) {
      counters.skipped[index_of(level)].fetch_add(1, std::memory_order_relaxed);
      writer.losses.skipped(level);
      continue;
    }
    if (keep != i) std::swap(batch[keep], batch[i]);
    ++keep;
  }
  return keep;
}

void DatabaseSink::State::process(LogRecord* batch, std::size_t n, bool final_reports) noexcept {
  const TimePoint now = clock.now();
  if (writer.pause.end_if_over(now)) counters.paused.store(false, std::memory_order_relaxed);
  const std::size_t keep = select(batch, n, now);
  if (keep == 0 && !final_reports) return;

  std::size_t rows = 0;
  PerLevel dropped{};
  try {
    if (!writer.pause.active()) {
      // The report rows take the time of the first entry they precede, so ordering the
      // table by created_at keeps them just before it.
      const WallTime at = keep > 0 ? batch[0].created_at : WallTime{};
      std::optional<Duration> gap;
      if (writer.pause.gap_due()) gap = writer.pause.unreported();
      dropped = counters.dropped_now();
      rows = writer.losses.write_rows(writer.out, at, gap, dropped);
    }
  } catch (...) {
    rows = 0;  // no memory for report text: they stay pending
  }
  if (keep == 0 && (rows == 0 || !final_reports)) return;
  if (keep == 0) {
    // Shutdown reports stand alone: date them now.
    const WallTime at = wall.now();
    for (std::size_t i = 0; i < rows; ++i)
      writer.out[i].created_at = at;
  }
  const std::size_t report_rows = rows;
  writer.entry_levels.clear();
  for (std::size_t i = 0; i < keep; ++i) {
    writer.entry_levels.push_back(batch[i].level);
    std::swap(writer.out[rows++], batch[i]);
  }

  Status status;
  if (write_rows(rows, status)) {
    counters.stored.fetch_add(keep, std::memory_order_relaxed);
    if (report_rows > 0) {
      counters.reports.fetch_add(report_rows, std::memory_order_relaxed);
      writer.pause.gap_reported();
      writer.losses.rows_stored(dropped);
    }
    return;
  }
  const bool overload = status.fault().overload;
  for (Level level : writer.entry_levels) {
    const std::size_t l = index_of(level);
    if (overload) {
      counters.skipped[l].fetch_add(1, std::memory_order_relaxed);
      writer.losses.skipped(level);
    } else {
      counters.lost[l].fetch_add(1, std::memory_order_relaxed);
      writer.losses.lost(level);
    }
  }
  on_failed(status, now);
}

bool DatabaseSink::State::write_rows(std::size_t rows, Status& status) noexcept {
  try {
    status = store.write_batch(std::span<const LogRecord>(writer.out.data(), rows));
    return status.ok();
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
  return false;
}

void DatabaseSink::State::on_failed(const Status& status, TimePoint now) noexcept {
  counters.failed_writes.fetch_add(1, std::memory_order_relaxed);
  if (!status.fault().overload) {
    writer.losses.write_failed(status);
    return;
  }
  if (writer.pause.on_overload(now)) {
    counters.paused.store(true, std::memory_order_relaxed);
    counters.pauses.fetch_add(1, std::memory_order_relaxed);
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
  counters.pause_until_ns.store(writer.pause.until().time_since_epoch().count(),
                                std::memory_order_relaxed);
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
  state_->writer.thread = std::thread([s = state_.get()] {
    pthread_setname_np(pthread_self(), "hf-log-writer");  // seen in top -H and /proc
    s->run();
  });
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
  State::Queue& q = s.queue;
  {
    std::lock_guard<std::mutex> lock(q.mutex);
    // Whatever the writer could not store in time is lost.
    for (std::size_t i = 0; i < q.count; ++i) {
      const Level level = q.front[i].level;
      s.counters.lost[index_of(level)].fetch_add(1, std::memory_order_relaxed);
      ++q.shutdown_lost[index_of(level)];
    }
    q.handled += q.count;
    q.count = 0;
    q.by_level = {};
    q.stopping = true;
  }
  q.wake.notify_all();
  if (s.writer.thread.joinable()) s.writer.thread.join();
  s.writer.losses.console_summary(s.counters.dropped_now());
}

bool DatabaseSink::accepts(Level level) const noexcept {
  return level >= state_->options.min_level;
}

void DatabaseSink::write(const LogEntry& entry) noexcept {
  if (!accepts(entry.level)) return;
  State& s = *state_;
  State::Queue& q = s.queue;
  const std::size_t level = index_of(entry.level);
  bool notify = false;
  try {
    lock_spinning_briefly(q.mutex);
    std::lock_guard<std::mutex> lock(q.mutex, std::adopt_lock);
    if (q.stopping) {
      s.counters.lost[level].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (q.count == q.front.size() && !s.evict_below(entry.level)) {
      s.counters.dropped[level].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    LogRecord& r = q.front[q.count];
    r.level = entry.level;
    r.created_at = entry.created_at;
    r.context.assign(entry.context.substr(0, kMaxContextBytes));
    fill_message(r.message, entry, s.options.max_message_bytes);
    ++q.count;
    ++q.by_level[level];
    ++q.pushed;
    s.counters.accepted.fetch_add(1, std::memory_order_relaxed);
    if (entry.level == Level::kError) q.wake_requested = true;
    // Wake the writer only when it has a reason to hurry (an ERROR, a half-full queue);
    // otherwise it comes by itself within `linger`, and the caller makes no system call.
    if (q.writer_waiting && (q.wake_requested || q.count >= s.wake_threshold)) {
      q.writer_waiting = false;
      notify = true;
    }
  } catch (...) {
    // Out of memory while copying the message: the slot was not taken.
    s.counters.dropped[level].fetch_add(1, std::memory_order_relaxed);
  }
  if (notify) q.wake.notify_one();
}

bool DatabaseSink::flush(std::chrono::milliseconds timeout) noexcept {
  State::Queue& q = state_->queue;
  try {
    std::unique_lock<std::mutex> lock(q.mutex);
    const std::uint64_t target = q.pushed;
    if (q.handled >= target) return true;
    q.wake_requested = true;
    q.wake.notify_one();
    ++q.flush_waiters;
    const bool done = q.done.wait_for(lock, timeout, [&] { return q.handled >= target; });
    --q.flush_waiters;
    return done;
  } catch (...) {
    return false;
  }
}

DatabaseSinkStats DatabaseSink::stats() const noexcept {
  const State::Counters& c = state_->counters;
  DatabaseSinkStats out;
  out.accepted = c.accepted.load(std::memory_order_relaxed);
  out.stored = c.stored.load(std::memory_order_relaxed);
  out.reports = c.reports.load(std::memory_order_relaxed);
  out.failed_writes = c.failed_writes.load(std::memory_order_relaxed);
  out.pauses = c.pauses.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kLevels; ++i) {
    out.skipped.by_level[i] = c.skipped[i].load(std::memory_order_relaxed);
    out.dropped.by_level[i] = c.dropped[i].load(std::memory_order_relaxed);
    out.lost.by_level[i] = c.lost[i].load(std::memory_order_relaxed);
  }
  out.paused = paused();
  {
    std::lock_guard<std::mutex> lock(state_->queue.mutex);
    out.queued = state_->queue.count;
  }
  return out;
}

bool DatabaseSink::paused() const noexcept {
  const State& s = *state_;
  return s.counters.paused.load(std::memory_order_relaxed) &&
         s.clock.now().time_since_epoch().count() <
             s.counters.pause_until_ns.load(std::memory_order_relaxed);
}

const DatabaseSink::Options& DatabaseSink::options() const noexcept {
  return state_->options;
}

}  // namespace holdfast
