// Through PgBouncer in transaction mode (Debian's pgbouncer, started by the test with
// scripts/pgbouncer-test.sh): reads, writes, prepared statements, a transaction re-run after
// a real serialization failure, and once() -- with DatabaseOptions::pooling = kTransaction,
// nothing a call sets outlives its transaction, and no statement is prepared under a name
// another transaction could miss.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

class PgBouncerTransactionMode : public testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) return;
    admin_ = std::make_unique<Admin>(server_url());
    table_ = unique("hf_bounced");
    admin_->exec("CREATE TABLE " + table_ + " (id int PRIMARY KEY, balance int NOT NULL)");
    admin_->exec("INSERT INTO " + table_ + " VALUES (1, 100)");
    keys_ = unique("hf_bounced_keys");
    bouncer_ = std::make_unique<pgtest::Bouncer>(server_url());
  }
  void TearDown() override {
    bouncer_.reset();
    if (admin_) {
      admin_->exec("DROP TABLE IF EXISTS " + table_);
      admin_->exec("DROP TABLE IF EXISTS " + keys_);
    }
  }
  DatabaseOptions options() const {
    DatabaseOptions o;
    o.url = bouncer_->url();
    o.pooling = Pooling::kTransaction;
    o.application_name = unique("hf_bounced");
    o.settings = {{"lock_timeout", "1500ms"}};
    o.idempotency_table = keys_;
    o.read_connections = 3;
    o.write_connections = 3;
    return o;
  }
  long long balance() { return admin_->count("SELECT balance FROM " + table_ + " WHERE id = 1"); }

  std::unique_ptr<Admin> admin_;
  std::unique_ptr<pgtest::Bouncer> bouncer_;
  std::string table_;
  std::string keys_;
};

TEST_F(PgBouncerTransactionMode, SessionSettingsAtConnectAreRefusedThere) {
  HOLDFAST_REQUIRE_PG_SERVER();
  ASSERT_FALSE(bouncer_->url().empty()) << "PgBouncer did not start";
  // What the read path used to do (default_transaction_read_only at connect) cannot work.
  ConnectOptions c;
  c.conninfo = bouncer_->url();
  c.settings = {{"default_transaction_read_only", "on"}};
  auto refused = Connection::open(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("unsupported startup parameter"), std::string::npos)
      << refused.status().to_string();
}

TEST_F(PgBouncerTransactionMode, ReadsWritesReRunTransactionsAndOnceWork) {
  HOLDFAST_REQUIRE_PG_SERVER();
  ASSERT_FALSE(bouncer_->url().empty()) << "PgBouncer did not start";
  Database db(options());
  RequestScope scope(std::chrono::seconds(10));

  // Reads: READ ONLY and the settings come with each call's own transaction.
  auto shown = db.read(
      "SELECT current_setting('transaction_read_only'), current_setting('lock_timeout'), "
      "current_setting('statement_timeout') <> '0'");
  ASSERT_TRUE(shown.ok()) << shown.status().to_string();
  EXPECT_EQ(shown->text(0, 0), "on");
  EXPECT_EQ(shown->text(0, 1), "1500ms");
  EXPECT_EQ(shown->text(0, 2), "t");

  // Writes, and prepared statements, many times over the pooler's server connections.
  auto insert = db.prepare("INSERT INTO " + table_ + " VALUES ($1, 0)");
  auto select = db.prepare("SELECT count(*) FROM " + table_ + " WHERE id >= $1");
  ASSERT_TRUE(insert.ok() && select.ok());
  for (int id = 10; id < 40; ++id) {
    auto w = id % 2 == 0 ? db.write(*insert, {id})
                         : db.write("INSERT INTO " + table_ + " VALUES ($1, 0)", {id});
    ASSERT_TRUE(w.ok()) << id << ": " << w.status().to_string();
    auto r = db.read(*select, {10});
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), std::to_string(id - 9));
  }
  // The same from several threads at once, so that the pooler hands each transaction to
  // whichever server connection is free: a statement prepared under a name on one of them
  // would be missing (or another's) on the next.
  std::atomic<int> failures{0};
  std::string first_failure;
  std::mutex failure_mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      RequestScope thread_scope(std::chrono::seconds(10));
      for (int i = 0; i < 25; ++i) {
        const int id = 1000 + t * 100 + i;
        Status s = db.write(*insert, {id}).status();
        if (s.ok()) s = db.read(*select, {1000}).status();
        if (!s.ok() && failures++ == 0) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          first_failure = s.to_string();
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE id >= 1000"), 100);

  auto in_tx = db.transaction([&](Transaction& tx) -> Status {
    for (int id = 40; id < 45; ++id) {
      if (Status s = tx.query(*insert, {id}).status(); !s.ok()) return s;
    }
    return Status();
  });
  ASSERT_TRUE(in_tx.ok()) << in_tx.to_string();
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE id >= 10 AND id < 1000"), 35);

  // A transaction re-run after a real serialization failure, applied once.
  Admin other(server_url());
  TransactionReport report;
  Status paid = db.transaction(
      [&](Transaction& tx) -> Status {
        auto b = tx.query("SELECT balance FROM " + table_ + " WHERE id = 1");  // the snapshot
        if (!b.ok()) return b.status();
        if (tx.run_number() == 1)
          other.exec("UPDATE " + table_ + " SET balance = balance + 10 WHERE id = 1");
        return tx.query("UPDATE " + table_ + " SET balance = balance + 1 WHERE id = 1").status();
      },
      {.operation = Operation::transaction(true),
       .isolation = Isolation::kRepeatableRead,
       .report = &report});
  ASSERT_TRUE(paid.ok()) << paid.to_string();
  EXPECT_EQ(report.runs, 2);
  EXPECT_EQ(balance(), 111);

  // once(): the second call with the key replays the first one's result.
  ASSERT_TRUE(db.create_idempotency_table().ok());
  const auto pay = [&](Transaction& tx) -> Result<std::string> {
    auto r =
        tx.query("UPDATE " + table_ + " SET balance = balance - 25 WHERE id = 1 RETURNING balance");
    if (!r.ok()) return r.status();
    return std::string(r->text(0, 0));
  };
  auto first = db.once("order-1", pay);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto again = db.once("order-1", pay);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(first->replayed);
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->result, "86");
  EXPECT_EQ(balance(), 86);

  // A read the text hides as a write: refused on the read path, applied once as a write.
  const std::string fn = unique("hf_sneaky");
  admin_->exec("CREATE FUNCTION " + fn + "() RETURNS int LANGUAGE sql AS $$ INSERT INTO " + table_ +
               " VALUES (99, 0) RETURNING id $$");
  RetryStats stats;
  ReadOptions sneaky;
  sneaky.stats = &stats;
  ASSERT_TRUE(db.read("SELECT " + fn + "()", {}, sneaky).ok());
  EXPECT_EQ(stats.attempts, 2);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE id = 99"), 1);
  admin_->exec("DROP FUNCTION " + fn + "()");

  // Nothing a call set is left on the pooler's server connections.
  for (int i = 0; i < 4; ++i) {
    auto plain = Connection::open(bouncer_->url());
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    auto left = plain->query(
        "SELECT current_setting('transaction_read_only'), current_setting('lock_timeout'), "
        "current_setting('statement_timeout')");
    ASSERT_TRUE(left.ok()) << left.status().to_string();
    EXPECT_EQ(left->text(0, 0), "off");
    EXPECT_EQ(left->text(0, 1), "0");
    EXPECT_EQ(left->text(0, 2), "0");
  }
}

TEST_F(PgBouncerTransactionMode, AReadQueuedInThePoolerIsAnsweredSoonAfterItsWindow) {
  HOLDFAST_REQUIRE_PG_SERVER();
  ASSERT_FALSE(bouncer_->url().empty()) << "PgBouncer did not start";
  // Each of the pooler's 4 server connections held by an open transaction: a new
  // statement waits in PgBouncer's queue, where neither the server's statement_timeout
  // nor a cancel reaches it.
  std::vector<Connection> holders;
  for (int i = 0; i < 4; ++i) {
    auto c = Connection::open(bouncer_->url());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(c->query("BEGIN").ok());
    ASSERT_TRUE(c->query("SELECT 1").ok());
    holders.push_back(std::move(*c));
  }
  Database db(options());
  const auto start = std::chrono::steady_clock::now();
  Result<Rows> r = Status();
  {
    RequestScope scope(std::chrono::milliseconds(800));
    r = db.read("SELECT 1");
  }
  const double took = pgtest::seconds_since(start);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded) << r.status().to_string();
  // The window, the client's grace before it cancels and the cancel's: 1.15 s. It was
  // 2.3 s, 1.5 s past the window (a page answered 7.9 s into a 6 s window in the drill).
  EXPECT_LT(took, 1.4) << r.status().to_string();
  // Once a server connection is free, the database serves again.
  for (Connection& h : holders)
    ASSERT_TRUE(h.query("COMMIT").ok());
  RequestScope again(std::chrono::seconds(5));
  auto one = db.read("SELECT 1");
  EXPECT_TRUE(one.ok()) << one.status().to_string();
}

}  // namespace
}  // namespace holdfast::pg
