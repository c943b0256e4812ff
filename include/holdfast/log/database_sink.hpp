/// @file
/// DatabaseSink: the logs table, written so that logging never adds load to a failing database.
///
/// A logger that INSERTs each error into the database it logs about adds one write per error to
/// a database that is already overloaded, falls over itself ("Failed to save log to database")
/// and leaves no trace of the incident in the logs table. DatabaseSink's rules instead:
///
///   - Entries go into a bounded, preallocated queue; a background writer stores them in small
///     batches, one LogStore::write_batch() call (one transaction) per batch. The caller never
///     waits on the database and never gets an exception.
///   - When the queue is full the lowest levels go first: an incoming INFO is dropped; a WARN
///     or ERROR evicts the oldest queued entry of the lowest level below it (INFO, then WARN),
///     or is dropped itself when there is none. Every drop is counted by level.
///   - DEBUG never reaches the database (retries are DEBUG: console only).
///   - Overload pause: when a write fails with a Status whose fault().overload is true, writes
///     pause for 30 s (DB_WRITE_PAUSE_MS), counted on the Clock from the failure. During the
///     pause INFO and WARN are not stored (counted as skipped) and ERROR is stored at most
///     once per 5 s (PAUSED_ERROR_WRITE_INTERVAL_MS; the first one 5 s after the failure);
///     the entries of the batch that failed are counted as skipped too (never retried into
///     the overloaded database). Another overload failure during the pause (a paused ERROR
///     write) restarts the 30 s. When the pause is over, the first row stored is a gap line
///     (WARN, context "logger"):
///       Log persistence paused for 30 s while the database was overloaded; skipped 812
///       entries (INFO 700, WARN 100, ERROR 12)
///   - A failure that is not overload (read-only disk, broken store, a store that throws) is
///     reported once on the console per run of failures; its entries are counted as lost and
///     a line saying how many is stored once writes work again. Entries dropped because the
///     queue was full are reported the same way. Report lines wait until no pause is active.
///
/// Pause decisions use the Clock at the moment the writer handles a batch, so on ManualClock
/// they are exact: log, flush(), advance the clock, log, flush().
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/log/console.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast {

/// One row of the logs table.
///
/// The logs table (id, level, context, message, created_at) is each driver's: its SQL is in
/// sqlite/log_store.hpp and pg/log_store.hpp. created_at is ISO-8601 UTC text with
/// milliseconds and 'Z' (utc_stamp), so comparing text compares time.
struct LogRecord {
  Level level = Level::kInfo;  ///< stored as to_string(level): "INFO", "WARN", "ERROR"
  std::string context;         ///< the context tag
  std::string message;         ///< key=value pairs already appended, as on the console
  WallTime created_at{};       ///< stored as utc_stamp(created_at): "2026-11-30T11:40:21.123Z"
};

/// Where DatabaseSink writes and retention deletes. Implemented per database (SQLite,
/// PostgreSQL) and by fakes in tests.
///
/// Thread safety: write_batch() is called only from one DatabaseSink writer thread, one call
/// at a time; delete_older_than() may be called from another thread at the same time.
class LogStore {
 public:
  virtual ~LogStore() = default;

  /// Inserts `records` (1 to batch_size of them, in order) in one transaction: all or none.
  /// On failure returns the classified Status; fault().overload true means the database is
  /// struggling (SQLITE_BUSY, "D1 DB is overloaded", 53300, ...) and the sink pauses.
  /// Should return within a short, bounded time (a small busy_timeout) and must not retry an
  /// overloaded database for long itself: the sink's pause is the backoff. May throw: the
  /// sink treats that as a failure that is not overload.
  virtual Status write_batch(std::span<const LogRecord> records) = 0;

  /// Deletes at most `limit` rows with created_at earlier than `cutoff`, oldest first, in one
  /// short transaction. Returns how many rows it deleted (fewer than `limit`: none are left).
  virtual Result<int> delete_older_than(WallTime cutoff, int limit) = 0;
};

/// Counts by level, indexed by Level.
struct LevelCounts {
  std::array<std::uint64_t, 4> by_level{};  ///< indexed by Level

  /// The count for `level`.
  [[nodiscard]] std::uint64_t operator[](Level level) const noexcept {
    return by_level[static_cast<std::size_t>(level)];
  }
  /// All levels together.
  [[nodiscard]] std::uint64_t total() const noexcept {
    return by_level[0] + by_level[1] + by_level[2] + by_level[3];
  }
  /// Equal when every count is.
  friend bool operator==(const LevelCounts&, const LevelCounts&) = default;
};

/// What a DatabaseSink did so far (DatabaseSink::stats()).
struct DatabaseSinkStats {
  std::uint64_t accepted = 0;       ///< entries that went into the queue
  std::uint64_t stored = 0;         ///< entries written to the store (report lines excluded)
  std::uint64_t reports = 0;        ///< gap, lost and dropped lines written to the store
  LevelCounts skipped;              ///< not stored because of an overload pause
  LevelCounts dropped;              ///< not queued, or evicted, because the queue was full
  LevelCounts lost;                 ///< a failed write that was not overload, or shutdown
  std::uint64_t failed_writes = 0;  ///< write_batch() calls that failed or threw
  std::uint64_t pauses = 0;         ///< overload pauses started
  bool paused = false;              ///< an overload pause is in force (on the sink's Clock)
  std::size_t queued = 0;           ///< entries waiting for the writer
};

/// The logs table as a Sink: a bounded queue and a background writer, so that logging never
/// adds load to a failing database (see the top of this file). Not copyable; write() may be
/// called from any thread.
class DatabaseSink final : public Sink {
 public:
  /// The queue, the batches and the overload pause; the constructor checks them.
  struct Options {
    /// Entries waiting for the writer. Preallocated twice at construction: callers fill one
    /// buffer while the writer stores the other (it takes the whole queue in one O(1) swap).
    std::size_t queue_capacity = 1024;
    /// Rows per write_batch() (one transaction).
    std::size_t batch_size = 32;
    Duration overload_pause = std::chrono::seconds(30);        ///< DB_WRITE_PAUSE_MS
    Duration paused_error_interval = std::chrono::seconds(5);  ///< PAUSED_ERROR_WRITE_INTERVAL_MS
    Level min_level = Level::kInfo;  ///< INFO, WARN or ERROR (DEBUG never goes to the database)
    /// Bytes preallocated per queue slot for the message (and its key=values): a message this
    /// short is queued without any allocation.
    std::size_t reserved_message_bytes = 256;
    /// Longer messages are cut at a UTF-8 boundary and end with " [truncated]".
    std::size_t max_message_bytes = 8192;
    /// Real time the writer sleeps between looks at the queue (at least 1 ms). Latency only,
    /// never a decision: it is also woken at once by an ERROR, a half-full queue and flush(),
    /// so a caller pays for a wake-up (a system call) only on those.
    std::chrono::milliseconds linger{20};
    /// Real time the destructor gives the writer to store what is queued.
    std::chrono::milliseconds shutdown_drain{2000};
    Clock* clock = nullptr;           ///< nullptr: Clock::system()
    const WallClock* wall = nullptr;  ///< nullptr: WallClock::system() (report lines at shutdown)
  };

  /// Starts the writer thread. REQUIRES: `store` outlives this sink. Bad options (a zero
  /// capacity or batch, batch_size > queue_capacity, min_level DEBUG, a negative duration,
  /// a zero linger, max_message_bytes < 64) throw std::invalid_argument naming the field.
  explicit DatabaseSink(LogStore& store) : DatabaseSink(store, Options{}) {}
  /// The same with `options`.
  DatabaseSink(LogStore& store, Options options);
  /// The same, owning the store (destroyed after the writer has stopped). A null store is
  /// std::invalid_argument.
  explicit DatabaseSink(std::unique_ptr<LogStore> store)
      : DatabaseSink(std::move(store), Options{}) {}
  /// The same with `options`, owning the store.
  DatabaseSink(std::unique_ptr<LogStore> store, Options options);
  /// Gives the writer up to shutdown_drain to store what is queued, then counts what is
  /// left as lost, stops the writer and writes a console summary of anything that never
  /// reached the table. Waits for a write_batch() call in progress to return. Never throws.
  ~DatabaseSink() override;
  DatabaseSink(const DatabaseSink&) = delete;
  DatabaseSink& operator=(const DatabaseSink&) = delete;

  [[nodiscard]] bool accepts(Level level) const noexcept override;
  /// Copies the entry into the queue (no allocation when the message and its key=values fit
  /// in reserved_message_bytes and the context in 32 bytes). Never throws, never waits for
  /// the database: holds a lock only to copy into the queue (the writer holds it only to
  /// swap buffers), spinning briefly before it would sleep on it.
  void write(const LogEntry& entry) noexcept override;

  /// Waits (real time, at most `timeout`) until every entry queued before the call has been
  /// stored, skipped or lost. True when it has. For tests and shutdown.
  bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(10)) noexcept;

  /// A copy of the counters now.
  [[nodiscard]] DatabaseSinkStats stats() const noexcept;
  /// True while an overload pause is in force (on the sink's Clock).
  [[nodiscard]] bool paused() const noexcept;
  /// The options it was built with.
  [[nodiscard]] const Options& options() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Retention: 90 days of logs are kept (prune_logs(), run from cron or a housekeeping thread).
inline constexpr std::chrono::days kLogRetention{90};

/// now - keep.
[[nodiscard]] WallTime retention_cutoff(WallTime now, std::chrono::days keep = kLogRetention);

/// How prune_logs() deletes.
struct PruneOptions {
  /// Rows per delete_older_than() call: each call is one short transaction, so the write
  /// lock is never held for long.
  int batch_size = 500;
  /// Slept on the Clock between batches, so writers waiting for the lock get it (SQLite's
  /// busy handler is unfair to waiters when one connection commits back to back).
  Duration pause_between_batches = std::chrono::milliseconds(10);
  Clock* clock = nullptr;  ///< nullptr: Clock::system()
};

/// Deletes rows with created_at earlier than `cutoff`, batch by batch, until a batch deletes
/// fewer than batch_size. Returns how many rows were deleted. Bad options give
/// kInvalidArgument naming the field; a failed batch stops the pruning and returns its
/// Status annotated with how many rows were deleted before it (running again is safe).
[[nodiscard]] Result<std::int64_t> prune_logs(LogStore& store, WallTime cutoff,
                                              const PruneOptions& options = {});

}  // namespace holdfast
