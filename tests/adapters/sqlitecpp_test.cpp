// The SQLiteCpp adapter against Debian's SQLiteCpp, on real files with real locks (the fault
// harness's LockHolder). Each test takes at most a few seconds of real time.
#include "holdfast/adapters/sqlitecpp.hpp"

#include <gtest/gtest.h>

#include <SQLiteCpp/SQLiteCpp.h>
#include <chrono>
#include <string>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "sqlite_faults.hpp"

namespace holdfast::sqlitecpp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::LockHolder;
using testing::LockKind;
using testing::RawConnection;
using testing::TempDir;

constexpr int kBusy = 5;

class SqliteCppAdapter : public ::testing::Test {
 protected:
  TempDir dir;
  std::string path = dir.file("club.db");

  // A rollback-journal file with one row in kv (id 1, v 10) and an empty log.
  void SetUp() override {
    Result<RawConnection> raw = RawConnection::open(path);
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    ASSERT_TRUE(raw->exec("PRAGMA journal_mode=DELETE;"
                          "CREATE TABLE kv(id INTEGER PRIMARY KEY, v INTEGER NOT NULL);"
                          "CREATE TABLE log(v INTEGER NOT NULL);"
                          "INSERT INTO kv(id, v) VALUES (1, 10);")
                    .ok());
  }

  std::int64_t count(const char* sql) {
    Result<RawConnection> raw = RawConnection::open(path);
    Result<std::int64_t> n = raw->query_int(sql);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    return n.value_or(-1);
  }

  Result<LockHolder> lock(LockKind kind, Duration hold) {
    return LockHolder::acquire({.path = path, .kind = kind, .hold = hold});
  }
};

TEST_F(SqliteCppAdapter, JudgesReadsWithSqlite3StmtReadonlyOnTheStatement) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  SQLite::Statement select(db, "SELECT v FROM kv WHERE id = ?");
  SQLite::Statement insert(db, "INSERT INTO log(v) VALUES (1)");
  SQLite::Statement with_cte(db, "WITH t(x) AS (SELECT 1) SELECT x FROM t");
  EXPECT_TRUE(is_read(db, select));
  EXPECT_FALSE(is_read(db, insert));
  EXPECT_TRUE(is_read(db, with_cte));
  EXPECT_EQ(operation_for(db, select).idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(operation_for(db, insert).idempotency, Idempotency::kNonIdempotent);
}

TEST_F(SqliteCppAdapter, MapsTheExtendedCodeOfARealBusyAndSqliteCppsOwnErrors) {
  Result<LockHolder> held = lock(LockKind::kBeginImmediate, seconds(5));
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  try {
    db.exec("INSERT INTO log(v) VALUES (1)");
    FAIL() << "the write did not meet the lock";
  } catch (const SQLite::Exception& e) {
    const Status s = to_status(e);
    EXPECT_EQ(s.sqlite_code() & 0xff, kBusy) << s.to_string();
    EXPECT_EQ(s.code(), Code::kUnavailable);
    EXPECT_EQ(s.fault().scope, RetryScope::kStatement);
    EXPECT_EQ(s.fault().outcome, Outcome::kNotApplied);
  }
  held->release();

  SQLite::Statement q(db, "SELECT v FROM kv");
  try {
    (void)q.getColumn(0);  // no row yet: SQLiteCpp's own error, no SQLite code
    FAIL() << "SQLiteCpp did not throw";
  } catch (const SQLite::Exception& e) {
    const Status s = to_status(e);
    EXPECT_EQ(s.code(), Code::kFailedPrecondition);
    EXPECT_FALSE(s.fault().transient());
  }
}

TEST_F(SqliteCppAdapter, AReadDuringAOneSecondWriteLockSucceedsWithinTheWindow) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);  // busy timeout 0: every lock is met
  SQLite::Statement q(db, "SELECT v FROM kv WHERE id = ?");
  q.bind(1, 1);
  // BEGIN EXCLUSIVE in rollback-journal mode: readers meet SQLITE_BUSY too.
  Result<LockHolder> held = lock(LockKind::kBeginExclusive, seconds(1));
  ASSERT_TRUE(held.ok()) << held.status().to_string();

  RequestScope request;  // 6 s
  RetryStats stats;
  const TimePoint start = Clock::system().now();
  Result<int> v = retry(
      RetryPolicy(), db, q,
      [](SQLite::Statement& s) { return s.executeStep() ? s.getColumn(0).getInt() : -1; }, &stats);
  const Duration took = Clock::system().now() - start;

  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, 10);
  EXPECT_GT(stats.attempts, 1) << "the read never met the lock";
  EXPECT_TRUE(request.window().is_open());
  EXPECT_LT(took, seconds(6));
}

TEST_F(SqliteCppAdapter, AWriteThatMetSqliteBusyIsRetriedAndAppliedOnce) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  SQLite::Statement insert(db, "INSERT INTO log(v) VALUES (?)");
  insert.bind(1, 7);
  Result<LockHolder> held = lock(LockKind::kBeginImmediate, seconds(1));
  ASSERT_TRUE(held.ok()) << held.status().to_string();

  Shield shield("sqlitecpp");
  RequestScope request;
  RetryStats stats;
  Result<int> changed = run(
      shield, db, insert, [](SQLite::Statement& s) { return s.exec(); }, &stats);

  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(*changed, 1);
  EXPECT_GT(stats.attempts, 1) << "the write never met the lock";
  EXPECT_EQ(count("SELECT count(*) FROM log WHERE v = 7"), 1);
}

TEST_F(SqliteCppAdapter, ANonRerunnableTransactionWhoseCommitMetSqliteBusyIsNotReRun) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  // A reader's open transaction: our COMMIT meets SQLITE_BUSY until it ends.
  Result<LockHolder> held = lock(LockKind::kReadTransaction, seconds(1));
  ASSERT_TRUE(held.ok()) << held.status().to_string();

  int runs = 0;
  RequestScope request;
  RetryStats stats;
  Result<void> r = retry_transaction(
      RetryPolicy(), Operation::transaction(/*rerunnable=*/false, "log.append"), db,
      [&](SQLite::Database& d) {
        ++runs;
        d.exec("INSERT INTO log(v) VALUES (1)");
      },
      &stats);

  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code() & 0xff, kBusy) << r.status().to_string();
  EXPECT_EQ(r.status().fault().scope, RetryScope::kTransaction);
  EXPECT_EQ(r.status().txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(r.status().stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(stats.attempts, 1);
  held->release();
  EXPECT_EQ(count("SELECT count(*) FROM log"), 0);
}

TEST_F(SqliteCppAdapter, ARerunnableTransactionWhoseCommitMetSqliteBusyIsReRunAndAppliedOnce) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  Result<LockHolder> held = lock(LockKind::kReadTransaction, seconds(1));
  ASSERT_TRUE(held.ok()) << held.status().to_string();

  int runs = 0;
  Shield shield("sqlitecpp");
  RequestScope request;
  Result<long long> total =
      run_transaction(shield, Operation::transaction(/*rerunnable=*/true, "kv.add"), db,
                      [&](SQLite::Database& d) -> long long {
                        ++runs;
                        d.exec("UPDATE kv SET v = v + 1 WHERE id = 1");
                        return d.execAndGet("SELECT v FROM kv WHERE id = 1").getInt64();
                      });

  ASSERT_TRUE(total.ok()) << total.status().to_string();
  EXPECT_EQ(*total, 11);
  EXPECT_GT(runs, 1) << "the commit never met the reader";
  EXPECT_EQ(count("SELECT v FROM kv WHERE id = 1"), 11);
}

TEST_F(SqliteCppAdapter, OtherExceptionsPropagateUnchanged) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  Shield shield("sqlitecpp");
  EXPECT_THROW((void)run(shield, Operation::read(),
                         []() -> int { throw std::logic_error("not the driver's"); }),
               std::logic_error);
  SQLite::Statement q(db, "SELECT v FROM kv");
  EXPECT_THROW((void)retry(RetryPolicy(), db, q,
                           [](SQLite::Statement&) -> int { throw std::logic_error("mine"); }),
               std::logic_error);
}

}  // namespace
}  // namespace holdfast::sqlitecpp
