// PgLogStore against a real PostgreSQL server: a batch is one all-or-nothing statement whose
// values arrive exactly and in order, text PostgreSQL cannot store is sanitized, retention
// deletes oldest first on a connection of its own, a locked table fails a batch quickly with
// an overload fault, a terminated backend is replaced at the next call (one connect attempt
// per call, never a loop), and with several hosts the logs go to the one that takes writes.
// Each test keeps its logs table in a schema of its own (search_path), so reruns and parallel
// test processes never meet. Without a server: log_store_options_test.cpp; with a
// DatabaseSink over the store: log_store_sink_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/pg/log_store.hpp"
#include "log_store_support.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using namespace logstore_test;
using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;
using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// ---------------------------------------------------------------------------------------
// Against the server

TEST(PgLogStore, OpenCreatesTheTableAndIndexAndOpeningAgainIsHarmless) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto first = open_store(schema.options());
  ASSERT_NE(first, nullptr);
  auto second = open_store(schema.options());
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(schema.admin().count(
                "SELECT count(*) FROM pg_indexes WHERE schemaname || '.' || tablename = $1 "
                "AND indexname = 'logs_created_at'",
                {schema.table()}),
            1);
  EXPECT_EQ(schema.count(), 0);
}

TEST(PgLogStore, EightStoresOpeningAtTheSameInstantAllOpenAndMakeOneTable) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  constexpr int kStores = 8;
  std::vector<Result<std::unique_ptr<PgLogStore>>> opened;
  for (int i = 0; i < kStores; ++i)
    opened.emplace_back(Status(Code::kUnknown, "not run"));
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStores; ++i) {
    threads.emplace_back([&, i] {
      const PgLogStore::Options o = schema.options();
      ++ready;
      while (ready.load() < kStores) {
      }
      opened[static_cast<std::size_t>(i)] = PgLogStore::open(o);
    });
  }
  for (auto& t : threads)
    t.join();
  for (int i = 0; i < kStores; ++i) {
    EXPECT_TRUE(opened[static_cast<std::size_t>(i)].ok())
        << i << ": " << opened[static_cast<std::size_t>(i)].status().to_string();
  }
  EXPECT_EQ(schema.admin().count(
                "SELECT count(*) FROM pg_indexes WHERE schemaname || '.' || tablename = $1 "
                "AND indexname = 'logs_created_at'",
                {schema.table()}),
            1);
}

TEST(PgLogStore, OpenWhereNoSchemaCanHoldTheTableFailsNamingTheUrl) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PgLogStore::Options options;
  options.url = server_url();
  options.settings = {{"search_path", unique("hf_no_such_schema")}};
  auto r = PgLogStore::open(options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlstate(), "3F000") << r.status().to_string();
  EXPECT_NE(r.status().message().find("creating the logs table at " + server_url()),
            std::string_view::npos)
      << r.status().to_string();
}

TEST(PgLogStore, ABatchRoundTripsExactlyAndInOrder) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto store = open_store(schema.options());
  ASSERT_NE(store, nullptr);
  const std::vector<std::string> messages = {
      "plain",
      "",
      R"(quote " and backslash \ and \\ two)",
      "{braces}, commas, {\"nested\",\"x\"}",
      "line one\nline two\r\n\ttabbed",
      "NULL",
      "  leading and trailing spaces  ",
      "Zażółć gęślą jaźń — 日本語 \xF0\x9F\x8E\xBE",
      R"(\N and 'single' quotes and $1 and E'\x41')",
      "}",
      "\"",
      "\\",
  };
  std::vector<LogRecord> batch;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Level level = i % 3 == 0 ? Level::kError : (i % 3 == 1 ? Level::kWarn : Level::kInfo);
    batch.push_back(record(level, i == 1 ? "" : "ctx, {" + std::to_string(i) + "}", messages[i],
                           kMorning + milliseconds(1000 - static_cast<int>(i))));
  }
  ASSERT_TRUE(store->write_batch(batch).ok());

  const std::vector<Row> rows = schema.rows();
  ASSERT_EQ(rows.size(), batch.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(rows[i].level, to_string(batch[i].level));
    EXPECT_EQ(rows[i].context, batch[i].context);
    EXPECT_EQ(rows[i].message, batch[i].message);
    EXPECT_EQ(rows[i].created_at, utc_stamp(batch[i].created_at).view());
  }
  // Descending created_at, yet the ids follow the batch.
  EXPECT_EQ(rows.front().created_at, "2026-09-11T06:20:01.000Z");
  EXPECT_EQ(rows.back().created_at, "2026-09-11T06:20:00.989Z");
  EXPECT_EQ(store->stats().sanitized, 0u);
  EXPECT_EQ(store->stats().batches, 1u);
}

TEST(PgLogStore, WithSeveralHostsTheLogsGoToTheOneThatTakesWrites) {
  // A failover URL that names the standby first: the logs still reach the primary (a session
  // on the standby would refuse every INSERT with 25006).
  HOLDFAST_REQUIRE_PG_STANDBY();
  LogSchema schema;
  const std::string url = pgtest::two_hosts(pgtest::host_port(pgtest::standby_url()), server_url());
  auto store = open_store(schema.options(url));
  ASSERT_NE(store, nullptr);
  const std::vector<LogRecord> batch = {
      record(Level::kInfo, "failover", "to the writer", kMorning)};
  Status written = store->write_batch(batch);
  EXPECT_TRUE(written.ok()) << written.to_string();
  EXPECT_EQ(schema.rows().size(), 1u);
}

TEST(PgLogStore, AFullBatchOfThirtyTwoKeepsItsOrder) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto store = open_store(schema.options());
  ASSERT_NE(store, nullptr);
  for (int b = 0; b < 3; ++b) {
    std::vector<LogRecord> batch;
    for (int i = 0; i < 32; ++i) {
      batch.push_back(record(Level::kInfo, "order", std::to_string(b * 32 + i), kMorning));
    }
    ASSERT_TRUE(store->write_batch(batch).ok());
  }
  const std::vector<Row> rows = schema.rows();
  ASSERT_EQ(rows.size(), 96u);
  for (std::size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(rows[i].message, std::to_string(i));
}

TEST(PgLogStore, ABatchIsAllOrNothing) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto store = open_store(schema.options());
  ASSERT_NE(store, nullptr);
  // The third row of the batch breaks a rule of the table.
  schema.admin().exec("ALTER TABLE " + schema.table() +
                      " ADD CONSTRAINT no_poison CHECK (message <> 'poison')");
  std::vector<LogRecord> batch;
  for (const char* m : {"one", "two", "poison", "four", "five"}) {
    batch.push_back(record(Level::kWarn, "tx", m, kMorning));
  }
  const Status s = store->write_batch(batch);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.sqlstate(), "23514") << s.to_string();
  EXPECT_FALSE(s.fault().overload);
  EXPECT_EQ(schema.count(), 0);

  // The connection is still good: the next batch goes in whole.
  batch.erase(batch.begin() + 2);
  ASSERT_TRUE(store->write_batch(batch).ok());
  EXPECT_EQ(schema.count(), 4);
  EXPECT_EQ(store->stats().connects, 1u);
  EXPECT_EQ(store->stats().failed_batches, 1u);
}

TEST(PgLogStore, TextPostgresCannotStoreIsSanitizedInsteadOfFailingTheBatch) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto store = open_store(schema.options());
  ASSERT_NE(store, nullptr);
  std::vector<LogRecord> batch;
  batch.push_back(record(Level::kError, std::string("ctx\0nul", 7),
                         std::string("before\0after", 12), kMorning));
  batch.push_back(record(Level::kError, "bytes", "latin-1 caf\xE9 and \xFF\xFE", kMorning));
  batch.push_back(record(Level::kError, "cut", "ends mid-character \xE2\x82", kMorning));
  batch.push_back(record(Level::kInfo, "fine", "stays as it is", kMorning));
  const Status s = store->write_batch(batch);
  ASSERT_TRUE(s.ok()) << s.to_string();

  const std::vector<Row> rows = schema.rows();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].context, "ctxnul");
  EXPECT_EQ(rows[0].message, "beforeafter");
  EXPECT_EQ(rows[1].message, "latin-1 caf" + kFffd + " and " + kFffd + kFffd);
  EXPECT_EQ(rows[2].message, "ends mid-character " + kFffd);
  EXPECT_EQ(rows[3].message, "stays as it is");
  EXPECT_EQ(store->stats().sanitized, 4u);  // two values of row 0, one each of rows 1 and 2
}

TEST(PgLogStore, DeletesOldestFirstInBatchesOfAtMostTheLimit) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  auto store = open_store(schema.options());
  ASSERT_NE(store, nullptr);
  // 1,200 rows a second apart, written newest first so that ids and times disagree.
  for (int b = 0; b < 12; ++b) {
    std::vector<LogRecord> batch;
    for (int i = 0; i < 100; ++i) {
      const int n = 1199 - (b * 100 + i);
      batch.push_back(record(Level::kInfo, "old", std::to_string(n), kMorning + seconds(n)));
    }
    ASSERT_TRUE(store->write_batch(batch).ok());
  }
  const WallTime cutoff = kMorning + seconds(1000);  // rows 0..999 are older
  const std::string oldest_left = "SELECT min(created_at) FROM " + schema.table();

  auto first = store->delete_older_than(cutoff, 400);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(*first, 400);
  EXPECT_EQ(schema.admin().exec(oldest_left).text(0, 0), utc_stamp(kMorning + seconds(400)).view());
  EXPECT_EQ(*store->delete_older_than(cutoff, 400), 400);
  EXPECT_EQ(*store->delete_older_than(cutoff, 400), 200);
  EXPECT_EQ(*store->delete_older_than(cutoff, 400), 0);
  EXPECT_EQ(schema.count(), 200);
  EXPECT_EQ(schema.admin().exec(oldest_left).text(0, 0), utc_stamp(cutoff).view());

  // prune_logs drives the same store to the end.
  PruneOptions prune;
  prune.batch_size = 64;
  prune.pause_between_batches = Duration::zero();
  auto pruned = prune_logs(*store, kMorning + seconds(1100), prune);
  ASSERT_TRUE(pruned.ok()) << pruned.status().to_string();
  EXPECT_EQ(*pruned, 100);
  EXPECT_EQ(schema.count(), 100);
  EXPECT_EQ(store->delete_older_than(cutoff, 0).status().code(), Code::kInvalidArgument);
}

TEST(PgLogStore, ADeleteWaitingForALockDoesNotHoldUpTheWriter) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  PgLogStore::Options options = schema.options();
  options.lock_timeout = seconds(5);
  options.statement_timeout = seconds(6);
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  const LogRecord old = record(Level::kInfo, "old", "to be pruned", kMorning);
  ASSERT_TRUE(store->write_batch({&old, 1}).ok());

  // Another session holds the old row: the delete must wait for it.
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("SELECT id FROM " + schema.table() + " FOR UPDATE");
  Result<int> deleted = Status(Code::kUnknown, "not run");
  std::thread pruner([&] { deleted = store->delete_older_than(kMorning + seconds(1), 10); });
  ASSERT_TRUE(
      pgtest::eventually([&] { return schema.waiting_for_lock(options.application_name) == 1; }));

  // Meanwhile the writer stores batches on its own connection.
  for (int i = 0; i < 5; ++i) {
    const LogRecord fresh = record(Level::kInfo, "new", std::to_string(i), kMorning + seconds(60));
    const Status s = store->write_batch({&fresh, 1});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  EXPECT_EQ(schema.waiting_for_lock(options.application_name), 1)
      << "the delete stopped waiting before the writes were done: the test proves nothing";
  EXPECT_EQ(schema.admin().backends(options.application_name), 2);

  holder.exec("ROLLBACK");
  pruner.join();
  ASSERT_TRUE(deleted.ok()) << deleted.status().to_string();
  EXPECT_EQ(*deleted, 1);
  EXPECT_EQ(schema.count(), 5);
}

TEST(PgLogStore, ALockedTableFailsTheBatchWithinTheLockTimeoutAsOverloadAndWritesNothing) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  PgLogStore::Options options = schema.options();
  options.lock_timeout = milliseconds(300);
  options.statement_timeout = seconds(2);
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  std::vector<LogRecord> batch(20, record(Level::kError, "locked", "payment failed", kMorning));

  TableLock lock(schema.table());
  const auto start = std::chrono::steady_clock::now();
  const Status s = store->write_batch(batch);
  const double took = pgtest::seconds_since(start);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.sqlstate(), "55P03") << s.to_string();
  EXPECT_TRUE(s.fault().overload);
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 2.0) << "a batch must not wait longer than its statement_timeout";
  lock.release();
  EXPECT_EQ(schema.count(), 0);
  // Same connection, next batch: stored.
  EXPECT_TRUE(store->write_batch(batch).ok());
  EXPECT_EQ(schema.count(), 20);
  EXPECT_EQ(store->stats().connects, 1u);
}

TEST(PgLogStore, TheStatementTimeoutBoundsABatchThatWouldWaitLonger) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  PgLogStore::Options options = schema.options();
  options.lock_timeout = seconds(10);  // longer than the statement may take
  options.statement_timeout = milliseconds(400);
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  const LogRecord one = record(Level::kError, "locked", "x", kMorning);

  TableLock lock(schema.table());
  const auto start = std::chrono::steady_clock::now();
  const Status s = store->write_batch({&one, 1});
  const double took = pgtest::seconds_since(start);
  EXPECT_EQ(s.sqlstate(), "57014") << s.to_string();
  EXPECT_TRUE(s.fault().overload);
  EXPECT_LT(took, 2.0);
  lock.release();
  EXPECT_EQ(schema.count(), 0);
}

TEST(PgLogStore, ABackendTerminatedWhileIdleIsReplacedBeforeTheNextBatch) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  PgLogStore::Options options = schema.options();
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  const LogRecord r = record(Level::kInfo, "kill", "row", kMorning);
  ASSERT_TRUE(store->write_batch({&r, 1}).ok());
  const int first_pid = store->backend_pid();

  ASSERT_EQ(schema.admin().terminate(options.application_name), 1);
  ASSERT_TRUE(schema.admin().wait_gone(options.application_name));

  // The next call fails or reconnects (it reconnects: the FATAL is read before sending);
  // the one after succeeds. One new connection in all.
  const Status next = store->write_batch({&r, 1});
  const Status after = store->write_batch({&r, 1});
  EXPECT_TRUE(after.ok()) << after.to_string();
  EXPECT_EQ(schema.count(), next.ok() ? 3 : 2) << next.to_string();
  EXPECT_EQ(store->stats().connects, 2u);
  EXPECT_NE(store->backend_pid(), first_pid);
}

TEST(PgLogStore, ABackendTerminatedMidBatchFailsThatBatchAndTheNextOneReconnects) {
  HOLDFAST_REQUIRE_PG_SERVER();
  LogSchema schema;
  PgLogStore::Options options = schema.options();
  options.lock_timeout = seconds(5);
  options.statement_timeout = seconds(6);
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  const LogRecord r = record(Level::kInfo, "kill", "row", kMorning);

  Status during;
  {
    TableLock lock(schema.table());
    std::thread writer([&] { during = store->write_batch({&r, 1}); });
    const bool waiting =
        pgtest::eventually([&] { return schema.waiting_for_lock(options.application_name) == 1; });
    EXPECT_TRUE(waiting);
    EXPECT_EQ(schema.admin().terminate(options.application_name), 1);
    writer.join();
  }
  ASSERT_FALSE(during.ok());
  EXPECT_EQ(during.sqlstate(), "57P01") << during.to_string();
  EXPECT_TRUE(during.fault().overload);
  EXPECT_EQ(store->backend_pid(), 0);  // closed, not reconnected within the failed call
  EXPECT_EQ(store->stats().connects, 1u);

  const Status next = store->write_batch({&r, 1});
  EXPECT_TRUE(next.ok()) << next.to_string();
  EXPECT_EQ(store->stats().connects, 2u);
  EXPECT_EQ(schema.count(), 1);
}

TEST(PgLogStore, WhileReconnectingFailsEachCallMakesOneConnectAttemptAndReturns) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string role = unique("hf_logrole");
  admin.exec("CREATE ROLE " + role + " LOGIN");
  {
    LogSchema schema(role);
    PgLogStore::Options options = schema.options(pgtest::url_as(server_url(), role));
    options.connect_timeout = seconds(2);
    auto store = open_store(options);
    ASSERT_NE(store, nullptr);
    const LogRecord r = record(Level::kError, "limit", "row", kMorning);
    ASSERT_TRUE(store->write_batch({&r, 1}).ok());

    // The role may open no more connections, and its one connection is terminated.
    admin.exec("ALTER ROLE " + role + " CONNECTION LIMIT 0");
    ASSERT_EQ(admin.terminate(options.application_name), 1);
    ASSERT_TRUE(admin.wait_gone(options.application_name));

    for (int call = 1; call <= 3; ++call) {
      SCOPED_TRACE(call);
      const auto start = std::chrono::steady_clock::now();
      const Status s = store->write_batch({&r, 1});
      EXPECT_LT(pgtest::seconds_since(start), 2.0);
      EXPECT_EQ(s.sqlstate(), "53300") << s.to_string();  // too many connections for role
      EXPECT_TRUE(s.fault().overload);
      EXPECT_EQ(store->stats().connect_failures, static_cast<std::uint64_t>(call));
    }
    EXPECT_EQ(store->stats().connects, 1u);

    admin.exec("ALTER ROLE " + role + " CONNECTION LIMIT -1");
    const Status back = store->write_batch({&r, 1});
    EXPECT_TRUE(back.ok()) << back.to_string();
    EXPECT_EQ(store->stats().connects, 2u);
    EXPECT_EQ(schema.count(), 2);
  }
  admin.exec("DROP ROLE " + role);
}

}  // namespace
}  // namespace holdfast::pg
