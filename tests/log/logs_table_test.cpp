// The logs table's SQL, run on real SQLite (raw sqlite3 C API; the holdfast driver is
// another part). The store here is a minimal one for this test only.
#include <sqlite3.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "holdfast/core/classify.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/sqlite/log_store.hpp"

namespace holdfast {
namespace {

using namespace std::chrono_literals;
using std::chrono::September;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const WallTime kIncident =
    std::chrono::sys_days{std::chrono::year{2026} / September / 11} + 6h + 20min;

struct Db {
  sqlite3* handle = nullptr;
  explicit Db(const std::string& path) {
    if (sqlite3_open(path.c_str(), &handle) != SQLITE_OK) ADD_FAILURE() << "open " << path;
  }
  ~Db() { sqlite3_close(handle); }
  void exec(std::string_view sql) {
    char* err = nullptr;
    if (sqlite3_exec(handle, std::string(sql).c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << (err ? err : "?");
    }
    sqlite3_free(err);
  }
  std::vector<std::string> column(std::string_view sql, const std::string& param = {}) {
    sqlite3_stmt* st = nullptr;
    std::vector<std::string> out;
    if (sqlite3_prepare_v2(handle, sql.data(), static_cast<int>(sql.size()), &st, nullptr) !=
        SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(handle);
      return out;
    }
    if (sqlite3_bind_parameter_count(st) > 0) {
      sqlite3_bind_text(st, 1, param.c_str(), -1, SQLITE_TRANSIENT);
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        if (c) row += '|';
        const auto* text = sqlite3_column_text(st, c);
        row += text ? reinterpret_cast<const char*>(text) : "";
      }
      out.push_back(row);
    }
    sqlite3_finalize(st);
    return out;
  }
};

// One transaction per batch with the shared SQL; errors classified by holdfast.
class TestSqliteStore final : public LogStore {
 public:
  explicit TestSqliteStore(sqlite3* db) : db_(db) {}

  Status write_batch(std::span<const LogRecord> records) override {
    if (int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); rc != SQLITE_OK) {
      return failure();
    }
    sqlite3_stmt* st = nullptr;
    int rc = sqlite3_prepare_v2(db_, sqlite::logs_table::kInsert.data(),
                                static_cast<int>(sqlite::logs_table::kInsert.size()), &st, nullptr);
    for (std::size_t i = 0; rc == SQLITE_OK && i < records.size(); ++i) {
      const LogRecord& r = records[i];
      const std::string_view level = to_string(r.level);
      const UtcStamp stamp = utc_stamp(r.created_at);
      sqlite3_bind_text(st, 1, level.data(), static_cast<int>(level.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(st, 2, r.context.data(), static_cast<int>(r.context.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_text(st, 3, r.message.data(), static_cast<int>(r.message.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_text(st, 4, stamp.text, stamp.size, SQLITE_TRANSIENT);
      rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK && sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK) {
      return {};
    }
    Status s = failure();
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }

  Result<int> delete_older_than(WallTime cutoff, int limit) override {
    sqlite3_stmt* st = nullptr;
    const auto& sql = sqlite::logs_table::kDeleteOlderThan;
    if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &st, nullptr) !=
        SQLITE_OK) {
      return failure();
    }
    const UtcStamp stamp = utc_stamp(cutoff);
    sqlite3_bind_text(st, 1, stamp.text, stamp.size, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, limit);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return failure();
    batch_sizes.push_back(sqlite3_changes(db_));
    return sqlite3_changes(db_);
  }

  std::vector<int> batch_sizes;

 private:
  Status failure() { return sqlite_status(sqlite3_extended_errcode(db_), sqlite3_errmsg(db_)); }
  sqlite3* db_;
};

void create_schema(Db& db) {
  for (std::string_view sql : sqlite::logs_table::kSchema)
    db.exec(sql);
}

TEST(LogsTable, TheDiagnosticQueryUsesTheCreatedAtIndex) {
  Db db(":memory:");
  create_schema(db);
  create_schema(db);  // IF NOT EXISTS: opening an existing database again is fine
  const auto plan =
      db.column(std::string("EXPLAIN QUERY PLAN ") + std::string(sqlite::logs_table::kRecent),
                "2026-09-11T06:20");
  ASSERT_FALSE(plan.empty());
  EXPECT_THAT(plan[0], HasSubstr("logs_created_at"));
}

TEST(LogsTable, ADatabaseSinkFillsItAndTheOriginsQueryReadsItBack) {
  Db db(":memory:");
  create_schema(db);
  TestSqliteStore store(db.handle);
  ManualClock clock;
  FollowingWallClock wall(clock, kIncident - 1min);
  {
    DatabaseSink::Options o;
    o.clock = &clock;
    auto sink = std::make_shared<DatabaseSink>(store, o);
    Logger log(Logger::Options{&clock, &wall, false, {}});
    log.add_sink(sink);
    log.info("schedule", "before the incident");
    clock.advance(1min);
    log.warn("schedule", "slow", {{"ms", 2400}});
    clock.advance(1500ms);
    log.error("payments", "charge failed");
    ASSERT_TRUE(sink->flush());
  }
  EXPECT_THAT(db.column(sqlite::logs_table::kRecent, "2026-09-11T06:20"),
              ElementsAre("ERROR|payments|charge failed|2026-09-11T06:20:01.500Z",
                          "WARN|schedule|slow ms=2400|2026-09-11T06:20:00.000Z"));
}

TEST(LogsTable, RetentionDeletesOldestFirstInBatches) {
  Db db(":memory:");
  create_schema(db);
  TestSqliteStore store(db.handle);
  std::vector<LogRecord> rows;
  for (int i = 0; i < 25; ++i) {
    rows.push_back(LogRecord{Level::kInfo, "old", "x", kIncident - std::chrono::days(100 + i)});
  }
  rows.push_back(LogRecord{Level::kInfo, "new", "kept", kIncident});
  ASSERT_TRUE(store.write_batch(rows).ok());
  ManualClock clock;
  Result<std::int64_t> deleted = prune_logs(store, retention_cutoff(kIncident), {10, 1ms, &clock});
  ASSERT_TRUE(deleted.ok()) << deleted.status().to_string();
  EXPECT_EQ(*deleted, 25);
  EXPECT_THAT(store.batch_sizes, ElementsAre(10, 10, 5));
  EXPECT_THAT(db.column("SELECT context FROM logs"), ElementsAre("new"));
}

TEST(LogsTable, AWriteLockHeldByAnotherConnectionPausesTheSink) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("holdfast_logs_lock_" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  {
    Db holder(path.string());
    holder.exec("PRAGMA journal_mode=WAL");
    create_schema(holder);
    Db victim(path.string());  // busy_timeout 0: SQLITE_BUSY at once
    TestSqliteStore store(victim.handle);
    ManualClock clock;
    DatabaseSink::Options o;
    o.clock = &clock;
    DatabaseSink sink(store, o);
    holder.exec("BEGIN IMMEDIATE");
    sink.write(LogEntry{Level::kError, "payments", "during the lock", {}, clock.now(), kIncident});
    ASSERT_TRUE(sink.flush());
    EXPECT_TRUE(sink.paused()) << "SQLITE_BUSY counts as overload";
    holder.exec("COMMIT");
    clock.advance(30s);
    sink.write(LogEntry{Level::kInfo, "payments", "after", {}, clock.now(), kIncident + 30s});
    ASSERT_TRUE(sink.flush());
    EXPECT_THAT(holder.column("SELECT message FROM logs ORDER BY id"),
                ElementsAre("Log persistence paused for 30 s while the database was overloaded; "
                            "skipped 1 entry (INFO 0, WARN 0, ERROR 1)",
                            "after"));
  }
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + "-wal");
  std::filesystem::remove(path.string() + "-shm");
}

}  // namespace
}  // namespace holdfast
