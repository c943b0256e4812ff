/// @file
/// holdfast::sqlite::LogStore: the logs table in a SQLite file, for DatabaseSink.
///
/// @code
///   auto store = holdfast::sqlite::SqliteLogStore::open({.path = "club.db"});
///   auto sink = std::make_shared<holdfast::DatabaseSink>(std::move(*store));
///   logger.add_sink(sink);
/// @endcode
///
/// It opens a Database of its own on the file (so log batches never queue behind the
/// application's writes inside the process), creates the logs table and its index, and
/// writes each batch as one short BEGIN IMMEDIATE transaction. A batch is never retried
/// here and waits at most Options::busy_timeout for the write lock: when the database is
/// busy the batch fails with SQLITE_BUSY (an overload fault) and the sink's 30 s pause is
/// the backoff — logging never adds load to a database that is refusing writes.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "holdfast/log/database_sink.hpp"
#include "holdfast/sqlite/database.hpp"

namespace holdfast::sqlite {

/// The logs table on SQLite. created_at is utc_stamp text (database_sink.hpp), so comparing
/// text compares time and the index serves the diagnostic query (kRecent).
namespace logs_table {
/// Creates the table if it does not exist.
inline constexpr std::string_view kCreateTable =
    "CREATE TABLE IF NOT EXISTS logs (id INTEGER PRIMARY KEY, level TEXT NOT NULL, "
    "context TEXT NOT NULL, message TEXT NOT NULL, created_at TEXT NOT NULL)";
/// Creates the index on created_at if it does not exist.
inline constexpr std::string_view kCreateIndex =
    "CREATE INDEX IF NOT EXISTS logs_created_at ON logs (created_at)";
/// Both, in order: what SqliteLogStore::open() runs.
inline constexpr std::array<std::string_view, 2> kSchema = {kCreateTable, kCreateIndex};
/// Parameters: level, context, message, created_at.
inline constexpr std::string_view kInsert =
    "INSERT INTO logs (level, context, message, created_at) VALUES (?1, ?2, ?3, ?4)";
/// Parameters: cutoff (utc_stamp text), limit.
inline constexpr std::string_view kDeleteOlderThan =
    "DELETE FROM logs WHERE id IN "
    "(SELECT id FROM logs WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)";
/// The diagnostic query (the recent errors). Parameter: since (utc_stamp text, or a prefix of one
/// such as "2026-09-11T06:20").
inline constexpr std::string_view kRecent =
    "SELECT level, context, message, created_at FROM logs WHERE created_at >= ?1 "
    "ORDER BY created_at DESC LIMIT 50";
}  // namespace logs_table

/// The logs table on SQLite: the LogStore a DatabaseSink writes to (see the top of this
/// file).
class SqliteLogStore final : public LogStore {
 public:
  /// Where the store lives; open() checks it.
  struct Options {
    std::string path;  ///< the database file
    /// The longest a batch waits for the write lock. Short on purpose (see above).
    Duration busy_timeout = std::chrono::milliseconds(50);
    Clock* clock = &Clock::system();  ///< the clock of the store's Database
  };

  /// Opens the file (creating the table if needed). A bad path is a Status naming it.
  static Result<std::unique_ptr<SqliteLogStore>> open(Options options);

  Status write_batch(std::span<const LogRecord> records) override;
  Result<int> delete_older_than(WallTime cutoff, int limit) override;

  /// The Database the store writes through.
  [[nodiscard]] Database& database() noexcept { return db_; }

 private:
  explicit SqliteLogStore(Database db) noexcept : db_(std::move(db)) {}
  Database db_;
};

}  // namespace holdfast::sqlite
