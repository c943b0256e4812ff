// The write path of holdfast::pg::Database: one attempt unless the fault proves nothing was
// applied, and never a guess when the outcome is unknown.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "holdfast/core/window.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

class PgWritePath : public testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) return;
    admin_ = std::make_unique<Admin>(server_url());
    table_ = unique("hf_write");
    admin_->exec("CREATE TABLE " + table_ + " (id serial PRIMARY KEY, v text)");
  }
  void TearDown() override {
    if (admin_) admin_->exec("DROP TABLE IF EXISTS " + table_);
  }
  long long rows() { return admin_->count("SELECT count(*) FROM " + table_); }

  DatabaseOptions options(const std::string& app) {
    DatabaseOptions o;
    o.url = server_url();
    o.application_name = app;
    // Idempotent operations run under the Shield's reads policy, the rest under writes.
    const auto hook = [this](const RetryEvent& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      retried_.emplace_back(e.status.sqlstate());
    };
    o.shield.reads.on_retry(hook);
    o.shield.writes.on_retry(hook);
    return o;
  }
  std::vector<std::string> retried() {
    std::lock_guard<std::mutex> lock(mutex_);
    return retried_;
  }

  std::unique_ptr<Admin> admin_;
  std::string table_;
  std::mutex mutex_;
  std::vector<std::string> retried_;
};

TEST_F(PgWritePath, ACopyOnTheWritePathFailsCleanlyAndTheConnectionServesTheNextWrite) {
  HOLDFAST_REQUIRE_PG_SERVER();
  DatabaseOptions o = options(unique("hf_writer"));
  o.write_connections = 1;
  Database db(o);
  RequestScope scope(std::chrono::seconds(2));
  const auto start = std::chrono::steady_clock::now();
  auto copy = db.write("COPY " + table_ + " (v) FROM STDIN");
  EXPECT_FALSE(copy.ok());
  EXPECT_LT(pgtest::seconds_since(start), 1.0);
  auto next = db.write("INSERT INTO " + table_ + " (v) VALUES ('after')");
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ(rows(), 1);
}

TEST_F(PgWritePath, AWriteIsAppliedOnce) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options(unique("hf_writer")));
  auto r = db.write("INSERT INTO " + table_ + " (v) VALUES ($1)", {"paid"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->affected(), 1);
  EXPECT_EQ(rows(), 1);
  auto q = db.query("UPDATE " + table_ + " SET v = $1", {"refunded"});
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->affected(), 1);
}

TEST_F(PgWritePath, AWriteThatHitALockTimeoutAppliedNothingAndIsRetried) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE " + table_ + " IN ACCESS EXCLUSIVE MODE");
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    holder.exec("COMMIT");
  });
  DatabaseOptions o = options(unique("hf_writer"));
  o.settings = {{"lock_timeout", "100ms"}};
  Database db(o);
  Result<Rows> r = Status();
  {
    RequestScope scope;
    r = db.write("INSERT INTO " + table_ + " (v) VALUES ('paid')");
  }
  release.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(rows(), 1);
  ASSERT_FALSE(retried().empty());
  EXPECT_EQ(retried().front(), "55P03");
}

TEST_F(PgWritePath, AWriteWhoseConnectionDiedIsNotRepeatedAndSaysTheOutcomeIsUnknown) {
  HOLDFAST_REQUIRE_PG_SERVER();
  const std::string app = unique("hf_writer");
  Database db(options(app));
  std::thread killer([&] {
    pgtest::eventually([&] {
      return admin_->count(
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                 "AND wait_event = 'PgSleep'",
                 {app}) == 1;
    });
    admin_->terminate(app);
  });
  Result<Rows> r = Status();
  {
    RequestScope scope;
    r = db.write("INSERT INTO " + table_ + " (v) SELECT 'paid' FROM pg_sleep(2)");
  }
  killer.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlstate(), "57P01") << r.status().to_string();
  EXPECT_EQ(r.status().fault().outcome, Outcome::kUnknown);
  EXPECT_EQ(r.status().stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(r.status().attempts(), 1);
  EXPECT_TRUE(retried().empty());
  EXPECT_EQ(rows(), 0);  // this time the server rolled it back; the caller could not know
}

TEST_F(PgWritePath, AnIdempotentWriteIsRetriedAfterItsConnectionDied) {
  HOLDFAST_REQUIRE_PG_SERVER();
  const std::string app = unique("hf_writer");
  admin_->exec("INSERT INTO " + table_ + " (id, v) VALUES (1, 'open')");
  Database db(options(app));
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    pgtest::eventually([&] {
      return admin_->count(
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                 "AND wait_event = 'PgSleep'",
                 {app}) == 1;
    });
    killed = admin_->terminate(app) == 1;
  });
  Result<Rows> r = Status();
  {
    RequestScope scope;
    r = db.write("UPDATE " + table_ + " SET v = 'closed' FROM pg_sleep(0.3) WHERE id = 1", {},
                 Operation::idempotent_write("close"));
  }
  killer.join();
  ASSERT_TRUE(killed);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_FALSE(retried().empty());
  EXPECT_EQ(retried().front(), "57P01");
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE v = 'closed'"), 1);
}

TEST_F(PgWritePath, StatementsThatWouldLeaveStateOnAPooledConnectionAreRefused) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options(unique("hf_writer")));
  for (const char* sql : {"BEGIN", "SET work_mem = '1MB'", "LISTEN news", "PREPARE p AS SELECT 1",
                          "DECLARE c CURSOR FOR SELECT 1"}) {
    auto r = db.write(sql);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << sql;
  }
  auto multi = db.write("INSERT INTO " + table_ + " (v) VALUES ('a'); DELETE FROM " + table_);
  EXPECT_EQ(multi.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(db.write_pool().stats().connects, 0u);
}

TEST_F(PgWritePath, BadInputFailsAtOnceAndIsNotRetried) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options(unique("hf_writer")));
  auto r = db.write("INSERT INTO " + table_ + " (id, v) VALUES (1, 'a')");
  ASSERT_TRUE(r.ok());
  auto dup = db.write("INSERT INTO " + table_ + " (id, v) VALUES (1, 'b')");
  EXPECT_EQ(dup.status().sqlstate(), "23505");
  EXPECT_EQ(dup.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(dup.status().stop_reason(), StopReason::kPermanent);
  EXPECT_TRUE(retried().empty());
}

}  // namespace
}  // namespace holdfast::pg
