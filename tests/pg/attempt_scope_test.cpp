// One attempt of one step (pg::AttemptScope), for a driver that runs the Shield's loop
// itself, and a request's position carried to another thread (pg::PositionScope): on the
// real primary and hot standby of scripts/pg-test-server.sh (HOLDFAST_PG_STANDBY=1), with
// the standby's replay paused for real. Who answered is what the server says.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg/attempt.hpp"
#include "holdfast/pg/lsn.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::ReplayPause;
using pgtest::rows_and_who_sql;
using pgtest::server_url;
using pgtest::standby_url;
using pgtest::unique;
using Step = AttemptScope::Step;

class PgAttemptScopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HOLDFAST_REQUIRE_PG_STANDBY();
    admin_ = std::make_unique<Admin>(server_url());
    standby_ = std::make_unique<Admin>(standby_url());
    table_ = unique("hf_attempts");
    admin_->exec("CREATE TABLE " + table_ + " (id int PRIMARY KEY)");
    ASSERT_TRUE(pgtest::eventually([&] {
      return standby_->count("SELECT count(*) FROM pg_class WHERE relname = $1", {table_}) == 1;
    }));
    DatabaseOptions o;
    o.url = server_url();
    o.replica_urls = {standby_url()};
    o.application_name = unique("hf_attempts");
    o.max_replica_lag = std::chrono::seconds(60);  // about own writes, not lag
    db_ = std::make_unique<Database>(o);
  }
  void TearDown() override {
    db_.reset();
    if (admin_) admin_->exec("DROP TABLE IF EXISTS " + table_);
  }

  // One attempt of `step` of a read of the table's rows and who answered.
  std::string read_in(RoutedCall& route, Step step) {
    const AttemptScope one(route, step);
    Result<Rows> r = db_->read(rows_and_who_sql(table_));
    return r.ok() ? std::string(r->text(0, 0)) : "failed: " + r.status().to_string();
  }
  std::uint64_t primary_attempts() const { return db_->shield().metrics().snapshot().attempts; }

  std::unique_ptr<Admin> admin_;
  std::unique_ptr<Admin> standby_;
  std::string table_;
  std::unique_ptr<Database> db_;
};

TEST_F(PgAttemptScopeTest, EachStepMakesOneAttemptWhereTheReadWouldBeRouted) {
  ReplayPause pause(*standby_);
  ASSERT_TRUE(pause.paused());
  RequestScope request;
  {
    // No writes to see: the standby answers the replica step.
    RoutedCall route;
    EXPECT_EQ(read_in(route, Step::kReplicas), "0/standby");
    EXPECT_FALSE(route.unanswered);
  }
  {
    // Only the primary step writes: in a replica step nothing is sent.
    RoutedCall route;
    const AttemptScope one(route, Step::kReplicas);
    Result<Rows> w = db_->write("INSERT INTO " + table_ + " VALUES (1)");
    EXPECT_EQ(w.status().code(), Code::kFailedPrecondition);
    EXPECT_TRUE(route.unanswered);
  }
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_), 0);
  const std::uint64_t before = primary_attempts();
  {
    // The primary step's write is the write's one attempt: no Shield of its own (the
    // driver's counts it), and its commit becomes the request's position.
    RoutedCall route;
    const AttemptScope one(route, Step::kPrimary);
    ASSERT_TRUE(db_->write("INSERT INTO " + table_ + " VALUES (1)").ok());
    EXPECT_EQ(route.primary_attempts, 1);
  }
  EXPECT_EQ(primary_attempts(), before);
  EXPECT_FALSE(request_lsn().empty());
  // The standby has not replayed the request's write: the replica step leaves the read
  // to the primary, marking the standby as only behind; the primary step answers; the
  // standby asked again is still behind.
  RoutedCall route;
  EXPECT_EQ(read_in(route, Step::kReplicas).substr(0, 7), "failed:");
  EXPECT_TRUE(route.unanswered);
  EXPECT_EQ(route.behind, 1u);
  EXPECT_EQ(read_in(route, Step::kPrimary), "1/primary");
  EXPECT_EQ(read_in(route, Step::kReplicasAgain).substr(0, 7), "failed:");
  EXPECT_TRUE(route.unanswered);
  pause.resume();
  // Replayed: asked again, it answers with the request's row, and clears `unanswered`.
  EXPECT_TRUE(
      pgtest::eventually([&] { return read_in(route, Step::kReplicasAgain) == "1/standby"; }));
  EXPECT_FALSE(route.unanswered);
  // It was seen past the request's writes: a later primary attempt leaves the read to it,
  // with nothing recorded against the primary.
  Result<Rows> left = [&] {
    const AttemptScope one(route, Step::kPrimary);
    return db_->read(rows_and_who_sql(table_));
  }();
  EXPECT_EQ(left.status().code(), Code::kCancelled);
  EXPECT_EQ(left.status().stop_reason(), StopReason::kCancelled);
  EXPECT_TRUE(route.left_to_replica);
  EXPECT_EQ(primary_attempts(), before);
}

TEST_F(PgAttemptScopeTest, ARequestsPositionCarriedToAnotherThreadKeepsItsReadsOffAStaleStandby) {
  ReplayPause pause(*standby_);
  ASSERT_TRUE(pause.paused());
  RequestScope request;
  ASSERT_TRUE(db_->write("INSERT INTO " + table_ + " VALUES (1)").ok());
  CarriedPosition carried = carried_position();
  ASSERT_FALSE(carried.lsn.empty());
  const Lsn first = carried.lsn;
  std::string without;
  std::string with;
  std::thread job([&] {
    RequestScope adopted(request.window());
    {
      // The window alone: this thread knows nothing of the request's write.
      without = std::string(db_->read(rows_and_who_sql(table_))->text(0, 0));
    }
    {
      const PositionScope position(carried);
      with = std::string(db_->read(rows_and_who_sql(table_))->text(0, 0));
      ASSERT_TRUE(db_->write("INSERT INTO " + table_ + " VALUES (2)").ok());
    }
  });
  job.join();
  EXPECT_EQ(without, "0/standby");
  EXPECT_EQ(with, "1/primary");
  // The job's commit came back with the position, for the request's next thread.
  EXPECT_GT(carried.lsn, first);
  carry_position(carried);
  EXPECT_EQ(request_lsn(), carried.lsn);
}

}  // namespace
}  // namespace holdfast::pg
