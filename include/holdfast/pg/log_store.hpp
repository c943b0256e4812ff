/// @file
/// holdfast::pg::PgLogStore: the logs table on PostgreSQL, for DatabaseSink.
///
/// @code
///   auto store = holdfast::pg::PgLogStore::open({.url = "postgresql://app@db:5432/club"});
///   if (!store.ok()) return store.status();
///   auto sink = std::make_shared<holdfast::DatabaseSink>(std::move(*store));
///   logger.add_sink(sink);
/// @endcode
///
/// - It has connections of its own (never the application's pool), so a log batch never
///   waits for a pooled connection and never takes one from a request: one for write_batch()
///   and, opened at the first delete_older_than(), one for retention.
/// - Each batch is ONE statement, so one round trip and all or nothing:
///     INSERT INTO logs (...) SELECT ... FROM unnest($1::text[], $2::text[], $3::text[],
///                                                  $4::text[]) WITH ORDINALITY ... ORDER BY n
///   The four columns travel as array literals in which every element is double-quoted and
///   `'"'` and `'\'` are backslash-escaped -- the whole of PostgreSQL's array quoting rule, so
///   any text arrives intact. Rows get their ids in the order of the batch.
/// - Text PostgreSQL cannot store is made storable instead of failing the batch forever:
///   NUL bytes are dropped and invalid UTF-8 becomes U+FFFD (one per maximal invalid
///   sequence). The session's client_encoding is UTF8.
/// - A batch waits on the server at most lock_timeout for a lock and statement_timeout in
///   all (55P03 / 57014: overload faults, so the sink pauses; its 30 s pause is the
///   backoff). Nothing is ever retried here.
/// - A lost connection is replaced at the NEXT call, with one connect attempt bounded by
///   connect_timeout; a backend terminated while idle is noticed before the batch is sent
///   (no round trip), so that batch goes to the new connection. Never a reconnect loop.
///
/// Thread safety: write_batch() and delete_older_than() may run at the same time from
/// different threads (each has its own connection; each connection is used under its own
/// mutex, uncontended in the sink's use: one writer thread, one pruning thread). Never throws.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast::pg {

/// The logs table on PostgreSQL (one statement per string: the extended protocol takes one
/// at a time). created_at is utc_stamp text (database_sink.hpp).
namespace logs_table {
/// Creates the table if it does not exist.
inline constexpr std::string_view kCreateTable =
    "CREATE TABLE IF NOT EXISTS logs (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "level TEXT NOT NULL, context TEXT NOT NULL, message TEXT NOT NULL, "
    "created_at TEXT NOT NULL)";
/// Creates the index on created_at if it does not exist.
inline constexpr std::string_view kCreateIndex =
    "CREATE INDEX IF NOT EXISTS logs_created_at ON logs (created_at)";
/// Both, in order: what PgLogStore::open() runs.
inline constexpr std::array<std::string_view, 2> kSchema = {kCreateTable, kCreateIndex};
/// One batch in one statement; parameters: the four columns as text array literals
/// (LogBatch). WITH ORDINALITY + ORDER BY gives the rows their ids in the batch's order.
inline constexpr std::string_view kInsertBatch =
    "INSERT INTO logs (level, context, message, created_at) "
    "SELECT level, context, message, created_at "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) "
    "WITH ORDINALITY AS batch (level, context, message, created_at, n) ORDER BY n";
/// Parameters: cutoff (utc_stamp text), limit.
inline constexpr std::string_view kDeleteOlderThan =
    "DELETE FROM logs WHERE id IN "
    "(SELECT id FROM logs WHERE created_at < $1 ORDER BY created_at LIMIT $2)";
/// The diagnostic query (the recent errors). Parameter: since (utc_stamp text or a prefix of one).
inline constexpr std::string_view kRecent =
    "SELECT level, context, message, created_at FROM logs WHERE created_at >= $1 "
    "ORDER BY created_at DESC LIMIT 50";
}  // namespace logs_table

/// The parameters of logs_table::kInsertBatch for one batch: each column as an array literal
/// in which every element is double-quoted and `'"'` and `'\'` are escaped; NUL bytes are
/// dropped and invalid UTF-8 becomes U+FFFD (see the top of this file). Reused from batch to
/// batch, so a warm writer allocates nothing.
struct LogBatch {
  std::string levels;    ///< $1: each record's level ("INFO", "WARN", "ERROR")
  std::string contexts;  ///< $2: each record's context
  std::string messages;  ///< $3: each record's message
  std::string stamps;    ///< $4: each record's created_at as utc_stamp text

  /// Fills the four arrays with `records`, in order. Returns how many values had to be
  /// changed to be storable.
  std::uint64_t fill(std::span<const LogRecord> records);
};

/// What a PgLogStore did so far (PgLogStore::stats()).
struct PgLogStoreStats {
  std::uint64_t connects = 0;          ///< successful connects (both connections, open() too)
  std::uint64_t connect_failures = 0;  ///< failed connect attempts
  std::uint64_t batches = 0;           ///< write_batch() calls that stored their rows
  std::uint64_t failed_batches = 0;    ///< write_batch() calls that failed
  std::uint64_t sanitized = 0;         ///< values changed to be storable (NUL, bad UTF-8)
};

/// The logs table on PostgreSQL: the LogStore a DatabaseSink writes to (see the top of this
/// file). Not copyable; write_batch() and delete_older_than() use a connection each.
class PgLogStore final : public LogStore {
 public:
  /// Where and how the store connects; open() checks them.
  struct Options {
    /// A connection URL or key=value keywords. REQUIRES: not empty.
    std::string url;
    /// The longest one batch (or one delete) may run on the server. Short on purpose: the
    /// sink pauses on 57014, and a log batch must never hold a connection for long.
    Duration statement_timeout = std::chrono::seconds(2);
    /// The longest a batch waits for a lock on the table (55P03). Below statement_timeout.
    Duration lock_timeout = std::chrono::milliseconds(500);
    /// Cap on one connect attempt.
    Duration connect_timeout = std::chrono::seconds(2);
    /// Reads the deadlines (connect, and the client's wait for an answer). nullptr:
    /// Clock::system().
    Clock* clock = nullptr;
    /// pg_stat_activity.application_name of the store's connections.
    std::string application_name = "holdfast-logs";
    /// More session settings sent at connect, e.g. {"search_path", "ops"} to keep the logs
    /// table in schema `ops` (the schema must exist).
    std::vector<std::pair<std::string, std::string>> settings;
  };

  /// Connects, creates the logs table and its index (logs_table::kSchema) if needed.
  /// A bad option is kInvalidArgument naming the field; a failed connect or DDL is its
  /// classified Status, annotated with the URL without its password.
  static Result<std::unique_ptr<PgLogStore>> open(Options options);

  ~PgLogStore() override;
  PgLogStore(const PgLogStore&) = delete;
  PgLogStore& operator=(const PgLogStore&) = delete;

  /// Inserts `records` in order, in one statement: all or none. On failure returns the
  /// classified Status (fault().overload for 55P03, 57014, 53300, 57P01, ...); a lost
  /// connection is replaced at the next call. Never retries, never throws.
  Status write_batch(std::span<const LogRecord> records) override;

  /// Deletes at most `limit` rows with created_at < utc_stamp(cutoff), oldest first, in one
  /// statement on the store's second connection. Returns how many it deleted. Never throws.
  Result<int> delete_older_than(WallTime cutoff, int limit) override;

  /// A copy of the counters now.
  [[nodiscard]] PgLogStoreStats stats() const noexcept;
  /// The options it was opened with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }
  /// The URL as open() names it in a Status: without its password.
  [[nodiscard]] const std::string& display_url() const noexcept { return display_url_; }

  /// Backend pid of the writing connection (0 while it is closed). For tests and operators.
  [[nodiscard]] int backend_pid() const noexcept;

 private:
  // One connection and the lock that keeps it to one thread at a time.
  struct Lane {
    std::mutex mutex;
    Connection conn;
  };

  PgLogStore(Options options, std::string display_url);
  // Makes `lane.conn` usable: keeps it when it is healthy, else one connect attempt.
  Status ready(Lane& lane);
  Status write_locked(std::span<const LogRecord> records);

  const Options options_;
  const std::string display_url_;
  Clock* clock_;
  ConnectOptions connect_;
  Lane writer_;
  Lane pruner_;
  LogBatch batch_;  // the batch being written (reused)
  std::atomic<std::uint64_t> connects_{0};
  std::atomic<std::uint64_t> connect_failures_{0};
  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> failed_batches_{0};
  std::atomic<std::uint64_t> sanitized_{0};
  std::atomic<int> writer_pid_{0};
};

}  // namespace holdfast::pg
