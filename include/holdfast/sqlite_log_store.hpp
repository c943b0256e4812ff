// holdfast::sqlite::LogStore: the logs table in a SQLite file, for DatabaseSink.
//
//   auto store = holdfast::sqlite::SqliteLogStore::open({.path = "club.db"});
//   auto sink = std::make_shared<holdfast::DatabaseSink>(std::move(*store));
//   logger.add_sink(sink);
//
// It opens a Database of its own on the file (so log batches never queue behind the
// application's writes inside the process), creates the logs table and its index, and
// writes each batch as one short BEGIN IMMEDIATE transaction. A batch is never retried
// here and waits at most Options::busy_timeout for the write lock: when the database is
// busy the batch fails with SQLITE_BUSY (an overload fault) and the sink's 30 s pause is
// the backoff — logging never adds load to a database that is refusing writes.
#pragma once

#include <memory>
#include <string>

#include "holdfast/database_sink.hpp"
#include "holdfast/sqlite_database.hpp"

namespace holdfast::sqlite {

class SqliteLogStore final : public LogStore {
 public:
  struct Options {
    std::string path;
    // The longest a batch waits for the write lock. Short on purpose (see above).
    Duration busy_timeout = std::chrono::milliseconds(50);
    Clock* clock = &Clock::system();
  };

  // Opens the file (creating the table if needed). A bad path is a Status naming it.
  static Result<std::unique_ptr<SqliteLogStore>> open(Options options);

  Status write_batch(std::span<const LogRecord> records) override;
  Result<int> delete_older_than(WallTime cutoff, int limit) override;

  [[nodiscard]] Database& database() noexcept { return db_; }

 private:
  explicit SqliteLogStore(Database db) noexcept : db_(std::move(db)) {}
  Database db_;
};

}  // namespace holdfast::sqlite
