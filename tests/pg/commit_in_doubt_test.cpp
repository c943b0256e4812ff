// A COMMIT whose connection is lost is in doubt. Both real ways (FAULTS.md): the backend is
// terminated while its COMMIT waits for a synchronous standby that does not exist (it has
// committed locally), or while a deferred trigger runs at COMMIT (it has not). Each is
// resolved with pg_xact_status() of the transaction id recorded at BEGIN.
#include <gtest/gtest.h>

#include <thread>

#include "holdfast/core/window.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

class PgCommitInDoubt : public testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) return;
    admin_ = std::make_unique<Admin>(server_url());
    table_ = unique("hf_doubt");
    fn_ = unique("hf_slow_commit");
    app_ = unique("hf_doubter");
    admin_->exec("CREATE TABLE " + table_ + " (id serial PRIMARY KEY, v text)");
    // Sleeps at COMMIT when the transaction asked for it.
    pgtest::make_commit_slow(*admin_, table_, fn_);
  }
  void TearDown() override {
    if (!admin_) return;
    admin_->exec("DROP TABLE IF EXISTS " + table_);
    admin_->exec("DROP FUNCTION IF EXISTS " + fn_ + "()");
  }
  long long rows() { return admin_->count("SELECT count(*) FROM " + table_); }

  // Terminates our backend once it is in COMMIT and waiting for `wait_event`.
  std::thread kill_during_commit(const std::string& wait_event) {
    return pgtest::kill_during_commit(server_url(), app_, wait_event);
  }

  DatabaseOptions options() {
    DatabaseOptions o;
    o.url = server_url();
    o.application_name = app_;
    o.write_connections = 2;
    return o;
  }

  std::unique_ptr<Admin> admin_;
  std::string table_;
  std::string fn_;
  std::string app_;
};

// Its backend says, before it goes, that the wait ended after the local commit: resolved as
// committed on the primary, and answered as unconfirmed (no standby may have it: ADR 0053).
TEST_F(PgCommitInDoubt, ACommitKilledWhileItWaitsForTheSynchronousStandbyIsNeverConfirmed) {
  HOLDFAST_REQUIRE_PG_SERVER();
  if (admin_->exec("SHOW synchronous_standby_names").text(0, 0).empty()) {
    GTEST_SKIP() << "SKIPPED: this server has no synchronous_standby_names, so a COMMIT cannot "
                    "be made to wait after committing locally (scripts/pg-test-server.sh sets "
                    "one)";
  }
  Database db(options());
  TransactionReport report;
  std::thread killer = kill_during_commit("SyncRep");
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        // Wait for the (absent) synchronous standby after the local commit.
        if (auto r = tx.query("SET LOCAL synchronous_commit = on"); !r.ok()) return r.status();
        return tx.query("INSERT INTO " + table_ + " (v) VALUES ('paid')").status();
      },
      {.report = &report});
  killer.join();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.txn_state(), TxnState::kUnknown) << s.to_string();
  EXPECT_EQ(s.fault().outcome, Outcome::kUnknown) << s.to_string();
  EXPECT_NE(s.message().find("synchronous standby"), std::string_view::npos) << s.to_string();
  EXPECT_EQ(report.commits_in_doubt, 1);
  EXPECT_EQ(report.resolution, TxnState::kCommitted);
  EXPECT_EQ(report.runs, 1);
  EXPECT_EQ(rows(), 1);
}

// With synchronous replication and no synchronous standby answering, every COMMIT waits after
// it committed on the primary. At the window's end the driver cancels it, and PostgreSQL
// answers the COMMIT with a WARNING: committed locally, perhaps on no standby. A transaction,
// a write and a keyed transaction answered so are never confirmed to their caller, nor is a
// repeat of that key.
TEST_F(PgCommitInDoubt, ACommitWhoseWaitForTheSynchronousStandbyIsCancelledIsNeverConfirmed) {
  HOLDFAST_REQUIRE_PG_SERVER();
  if (admin_->exec("SHOW synchronous_standby_names").text(0, 0).empty()) {
    GTEST_SKIP() << "SKIPPED: this server has no synchronous_standby_names (scripts/"
                    "pg-test-server.sh names one that never connects)";
  }
  DatabaseOptions o = options();
  o.settings = {{"synchronous_commit", "on"}};  // every COMMIT waits for the standby
  Database db(o);
  const auto expect_unconfirmed = [](const Status& s) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.txn_state(), TxnState::kUnknown) << s.to_string();
    EXPECT_EQ(s.fault().outcome, Outcome::kUnknown) << s.to_string();
    EXPECT_NE(s.message().find("synchronous standby"), std::string_view::npos) << s.to_string();
  };
  {
    RequestScope scope(std::chrono::milliseconds(800));
    TransactionReport report;
    Status s = db.transaction(
        [&](Transaction& tx) -> Status {
          return tx.query("INSERT INTO " + table_ + " (v) VALUES ('paid')").status();
        },
        {.report = &report});
    expect_unconfirmed(s);
    EXPECT_EQ(report.runs, 1);
  }
  {
    RequestScope scope(std::chrono::milliseconds(800));
    expect_unconfirmed(db.write("INSERT INTO " + table_ + " (v) VALUES ('paid')").status());
  }
  ASSERT_TRUE(Database(options()).create_idempotency_table().ok());  // without the wait
  const std::string key = "sync-" + table_;
  const auto pay = [&](Transaction& tx) -> Status {
    return tx.query("INSERT INTO " + table_ + " (v) VALUES ('paid')").status();
  };
  for (int call = 0; call < 2; ++call) {
    // The repeat finds the key and is not confirmed either: the standby may still lack it.
    RequestScope scope(std::chrono::milliseconds(800));
    expect_unconfirmed(db.once(key, pay).status());
  }
  EXPECT_EQ(rows(), 3);  // each committed on the primary, and none was confirmed
}

TEST_F(PgCommitInDoubt, ACommitKilledBeforeItCommittedIsResolvedAsRolledBack) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  TransactionReport report;
  std::thread killer = kill_during_commit("PgSleep");
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        if (auto r = tx.query("SET LOCAL hf.slow_commit = 'on'"); !r.ok()) return r.status();
        return tx.query("INSERT INTO " + table_ + " (v) VALUES ('paid')").status();
      },
      {.report = &report});
  killer.join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack) << s.to_string();
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_EQ(s.fault().outcome, Outcome::kNotApplied);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);  // not declared re-runnable
  EXPECT_NE(s.message().find("aborted"), std::string_view::npos);
  EXPECT_EQ(report.commits_in_doubt, 1);
  EXPECT_EQ(report.resolution, TxnState::kRolledBack);
  EXPECT_EQ(rows(), 0);
}

TEST_F(PgCommitInDoubt, ARerunnableTransactionResolvedAsRolledBackIsReRunAndAppliedOnce) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  TransactionReport report;
  std::thread killer = kill_during_commit("PgSleep");
  Status s = db.transaction(
      [&](Transaction& tx) -> Status {
        if (tx.run_number() == 1) {
          if (auto r = tx.query("SET LOCAL hf.slow_commit = 'on'"); !r.ok()) return r.status();
        }
        return tx.query("INSERT INTO " + table_ + " (v) VALUES ('paid')").status();
      },
      {.operation = Operation::transaction(true), .report = &report});
  killer.join();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(report.runs, 2);
  EXPECT_EQ(report.commits_in_doubt, 1);
  EXPECT_EQ(report.resolution, TxnState::kRolledBack);
  EXPECT_EQ(rows(), 1);
}

}  // namespace
}  // namespace holdfast::pg
