// holdfast::pg::Database::transaction(): commit, rollback, and re-runs on real serialization
// failures, deadlocks and lost connections -- each applied exactly once.
#include <gtest/gtest.h>

#include <thread>

#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

class PgTransaction : public testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) return;
    admin_ = std::make_unique<Admin>(server_url());
    table_ = unique("hf_acct");
    admin_->exec("CREATE TABLE " + table_ + " (id int PRIMARY KEY, balance int NOT NULL)");
    admin_->exec("INSERT INTO " + table_ + " VALUES (1, 100), (2, 100)");
    app_ = unique("hf_txn");
  }
  void TearDown() override {
    if (admin_) admin_->exec("DROP TABLE IF EXISTS " + table_);
  }
  long long balance(int id) {
    return admin_->count("SELECT balance FROM " + table_ + " WHERE id = $1", {id});
  }
  DatabaseOptions options() {
    DatabaseOptions o;
    o.url = server_url();
    o.application_name = app_;
    return o;
  }
  Status add(Transaction& tx, int id, int amount) {
    return tx.query("UPDATE " + table_ + " SET balance = balance + $1 WHERE id = $2", {amount, id})
        .status();
  }

  std::unique_ptr<Admin> admin_;
  std::string table_;
  std::string app_;
};

TEST_F(PgTransaction, CommitsAndReturnsTheFunctionsValue) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  TransactionReport report;
  Result<long long> r = db.transaction(
      [&](Transaction& tx) -> Result<long long> {
        EXPECT_FALSE(tx.xid().empty());
        if (Status s = add(tx, 1, -30); !s.ok()) return s;
        if (Status s = add(tx, 2, 30); !s.ok()) return s;
        auto b = tx.query("SELECT balance FROM " + table_ + " WHERE id = 2");
        if (!b.ok()) return b.status();
        return b->int64(0, 0);
      },
      {.report = &report});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, 130);
  EXPECT_EQ(balance(1), 70);
  EXPECT_EQ(balance(2), 130);
  EXPECT_EQ(report.runs, 1);
  EXPECT_EQ(report.commits_in_doubt, 0);
}

TEST_F(PgTransaction, AnErrorFromTheFunctionRollsEverythingBack) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Status s = db.transaction([&](Transaction& tx) -> Status {
    if (Status a = add(tx, 1, -500); !a.ok()) return a;
    return Status(Code::kFailedPrecondition, "insufficient funds");
  });
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(balance(1), 100);
}

TEST_F(PgTransaction, AFailedStatementCannotBeCommittedByIgnoringIt) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Status s = db.transaction([&](Transaction& tx) -> Status {
    EXPECT_TRUE(add(tx, 1, 5).ok());
    EXPECT_EQ(tx.query("SELECT 1 / 0").status().sqlstate(), "22012");
    return Status();  // ignores the failure
  });
  EXPECT_EQ(s.sqlstate(), "22012") << s.to_string();
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(balance(1), 100);
}

TEST_F(PgTransaction, TheFunctionCannotEndTheTransactionItself) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Status s = db.transaction([&](Transaction& tx) -> Status {
    EXPECT_TRUE(add(tx, 1, 5).ok());
    for (const char* sql : {"COMMIT", "ROLLBACK", "END", "BEGIN"}) {
      EXPECT_EQ(tx.query(sql).status().code(), Code::kInvalidArgument) << sql;
    }
    EXPECT_TRUE(tx.query("SAVEPOINT s").ok());
    EXPECT_TRUE(add(tx, 1, 1000).ok());
    EXPECT_TRUE(tx.query("ROLLBACK TO SAVEPOINT s").ok());
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(balance(1), 105);
}

TEST_F(PgTransaction, ASerializationFailureReRunsARerunnableTransactionAndAppliesItOnce) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Admin other(server_url());
  TransactionReport report;
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        auto b = tx.query("SELECT balance FROM " + table_ + " WHERE id = 1");  // the snapshot
        if (!b.ok()) return b.status();
        if (tx.run_number() == 1) {
          other.exec("UPDATE " + table_ + " SET balance = balance + 10 WHERE id = 1");
        }
        return add(tx, 1, 1);
      },
      {.operation = Operation::transaction(true),
       .isolation = Isolation::kRepeatableRead,
       .report = &report});
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(report.runs, 2);
  EXPECT_EQ(balance(1), 111);
}

TEST_F(PgTransaction, ASerializationFailureIsNotReRunUnlessDeclaredSafe) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Admin other(server_url());
  TransactionReport report;
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        auto b = tx.query("SELECT balance FROM " + table_ + " WHERE id = 1");
        if (!b.ok()) return b.status();
        other.exec("UPDATE " + table_ + " SET balance = balance + 10 WHERE id = 1");
        return add(tx, 1, 1);
      },
      {.isolation = Isolation::kRepeatableRead, .report = &report});
  EXPECT_EQ(s.sqlstate(), "40001") << s.to_string();
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(report.runs, 1);
  EXPECT_EQ(balance(1), 110);
}

TEST_F(PgTransaction, ADeadlockVictimIsReRunAndAppliedOnce) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  const std::string other_app = unique("hf_other");
  Admin other(pgtest::url_with(server_url(), "application_name=" + other_app));
  std::thread other_txn;
  TransactionReport report;
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        // We are the one the deadlock detector picks: our timeout is the shorter.
        if (auto r = tx.query("SET LOCAL deadlock_timeout = '100ms'"); !r.ok()) return r.status();
        if (Status a = add(tx, 1, -1); !a.ok()) return a;
        if (tx.run_number() == 1) {
          other_txn = std::thread([&] {
            other.exec("BEGIN");
            other.exec("SET LOCAL deadlock_timeout = '10s'");
            other.exec("UPDATE " + table_ + " SET balance = balance + 10 WHERE id = 2");
            other.exec("UPDATE " + table_ + " SET balance = balance + 10 WHERE id = 1");
            other.exec("COMMIT");
          });
          // Wait until the other session holds row 2 and waits for our row 1.
          Admin watcher(server_url());
          EXPECT_TRUE(pgtest::eventually([&] {
            return watcher.count(
                       "SELECT count(*) FROM pg_stat_activity WHERE "
                       "application_name = $1 AND wait_event_type = 'Lock'",
                       {other_app}) == 1;
          }));
        }
        return add(tx, 2, -1);
      },
      {.operation = Operation::transaction(true), .report = &report});
  if (other_txn.joinable()) other_txn.join();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(report.runs, 2);
  EXPECT_EQ(balance(1), 109);
  EXPECT_EQ(balance(2), 109);
}

TEST_F(PgTransaction, AConnectionLostBeforeCommitReRunsTheWholeTransaction) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  TransactionReport report;
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        if (Status a = add(tx, 1, 7); !a.ok()) return a;
        if (tx.run_number() == 1) {
          EXPECT_EQ(admin_->terminate(app_), 1);
          EXPECT_TRUE(admin_->wait_gone(app_));
        }
        return tx.query("SELECT 1").status();
      },
      {.operation = Operation::transaction(true), .report = &report});
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(report.runs, 2);
  EXPECT_EQ(report.commits_in_doubt, 0);
  EXPECT_EQ(balance(1), 107);
}

TEST_F(PgTransaction, AConnectionLostBeforeCommitIsARollbackTheCallerIsToldOf) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Status s = db.transaction([&](Transaction& tx) -> Status {
    if (Status a = add(tx, 1, 7); !a.ok()) return a;
    EXPECT_EQ(admin_->terminate(app_), 1);
    EXPECT_TRUE(admin_->wait_gone(app_));
    return tx.query("SELECT 1").status();
  });
  EXPECT_EQ(s.sqlstate(), "57P01") << s.to_string();
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(s.fault().scope, RetryScope::kTransaction);
  EXPECT_EQ(s.fault().outcome, Outcome::kNotApplied);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(balance(1), 100);
}

TEST_F(PgTransaction, AReadOnlyTransactionRefusesWrites) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  Status s =
      db.transaction([&](Transaction& tx) -> Status { return add(tx, 1, 1); }, {.read_only = true});
  EXPECT_EQ(s.sqlstate(), "25006") << s.to_string();
  EXPECT_EQ(balance(1), 100);
}

}  // namespace
}  // namespace holdfast::pg
