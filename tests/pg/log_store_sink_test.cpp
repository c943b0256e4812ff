// A DatabaseSink over PgLogStore against a real PostgreSQL server: a thousand entries reach
// the table, and under a lock on it the logger never waits and writes its gap line after.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/log/database_sink.hpp"
#include "holdfast/log/logger.hpp"
#include "holdfast/pg/log_store.hpp"
#include "log_store_support.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using namespace logstore_test;
using std::chrono::milliseconds;
using std::chrono::seconds;

Logger::Options quiet(Clock* clock = nullptr, const WallClock* wall = nullptr) {
  Logger::Options o;
  o.console = false;
  o.clock = clock;
  o.wall = wall;
  return o;
}

TEST(PgLogStoreSink, AThousandEntriesReachTheTable) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto store = open_store(schema.options());
  ASSERT_NE(store, nullptr);
  DatabaseSink::Options options;
  options.queue_capacity = 2048;
  auto sink = std::make_shared<DatabaseSink>(std::move(store), options);
  Logger logger(quiet());
  logger.add_sink(sink);

  for (int i = 0; i < 1000; ++i) {
    const Level level = i % 10 == 0 ? Level::kError : (i % 10 < 3 ? Level::kWarn : Level::kInfo);
    logger.log(level, "e2e", "entry", {{"i", i}, {"note", "a \"quoted\" {value}"}});
  }
  ASSERT_TRUE(sink->flush(seconds(10)));
  EXPECT_EQ(sink->stats().stored, 1000u);
  EXPECT_EQ(sink->stats().failed_writes, 0u);
  EXPECT_EQ(schema.count(), 1000);
  EXPECT_EQ(schema.admin().count("SELECT count(*) FROM " + schema.table() +
                                 " WHERE level = 'ERROR' AND context = 'e2e'"),
            100);
  const std::vector<Row> rows = schema.rows();
  ASSERT_EQ(rows.size(), 1000u);
  EXPECT_EQ(rows[7].message, R"(entry i=7 note="a \"quoted\" {value}")");
}

TEST(PgLogStoreSink, UnderALockTheLoggerNeverWaitsAndTheGapLineFollowsTheLock) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  PgLogStore::Options store_options = schema.options();
  store_options.lock_timeout = milliseconds(1500);
  store_options.statement_timeout = seconds(3);
  auto store = open_store(store_options);
  ASSERT_NE(store, nullptr);
  const std::string app = store_options.application_name;

  // The pause is on the sink's clock: 30 s pass at once when the test says so.
  ManualClock clock;
  FollowingWallClock wall(clock, kMorning);
  DatabaseSink::Options options;
  options.clock = &clock;
  options.wall = &wall;
  auto sink = std::make_shared<DatabaseSink>(std::move(store), options);
  Logger logger(quiet(&clock, &wall));
  logger.add_sink(sink);

  auto lock = std::make_unique<TableLock>(schema.table());
  logger.info("e2e", "first");
  ASSERT_TRUE(pgtest::eventually([&] { return schema.waiting_for_lock(app) == 1; }))
      << "the writer never reached the locked table";

  // While the writer waits on the lock, every call returns: the batch is still waiting
  // when the last call is done.
  for (int i = 0; i < 200; ++i) {
    logger.log(i % 3 == 0 ? Level::kWarn : Level::kInfo, "e2e", "during", {{"i", i}});
  }
  EXPECT_EQ(schema.waiting_for_lock(app), 1);
  EXPECT_EQ(sink->stats().failed_writes, 0u);

  // The batch fails with 55P03 after the lock timeout; the sink pauses and skips the rest.
  ASSERT_TRUE(sink->flush(seconds(10)));
  DatabaseSinkStats stats = sink->stats();
  EXPECT_TRUE(stats.paused);
  EXPECT_EQ(stats.pauses, 1u);
  EXPECT_EQ(stats.failed_writes, 1u);
  EXPECT_EQ(stats.skipped.total(), 201u);
  EXPECT_EQ(stats.skipped[Level::kWarn], 67u);
  EXPECT_EQ(stats.stored, 0u);

  lock.reset();
  EXPECT_EQ(schema.count(), 0);
  clock.advance(seconds(31));
  logger.info("e2e", "after the lock");
  ASSERT_TRUE(sink->flush(seconds(10)));

  const std::vector<Row> rows = schema.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].level, "WARN");
  EXPECT_EQ(rows[0].context, "logger");
  EXPECT_EQ(rows[0].message,
            "Log persistence paused for 30 s while the database was overloaded; skipped 201 "
            "entries (INFO 134, WARN 67, ERROR 0)");
  EXPECT_EQ(rows[1].message, "after the lock");
  EXPECT_EQ(rows[1].created_at, utc_stamp(kMorning + seconds(31)).view());
  EXPECT_FALSE(sink->paused());
}

}  // namespace
}  // namespace holdfast::pg
