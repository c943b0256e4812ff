// A request's position carried to another thread (pg::PositionScope): on the real primary
// and hot standby of scripts/pg-test-server.sh (HOLDFAST_PG_STANDBY=1), with the standby's
// replay paused for real. Who answered is what the server says.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
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

class PgCarriedPosition : public ::testing::Test {
 protected:
  void SetUp() override {
    HOLDFAST_REQUIRE_PG_STANDBY();
    admin_ = std::make_unique<Admin>(server_url());
    standby_ = std::make_unique<Admin>(standby_url());
    table_ = unique("hf_carried");
    admin_->exec("CREATE TABLE " + table_ + " (id int PRIMARY KEY)");
    ASSERT_TRUE(pgtest::eventually([&] {
      return standby_->count("SELECT count(*) FROM pg_class WHERE relname = $1", {table_}) == 1;
    }));
    DatabaseOptions o;
    o.url = server_url();
    o.replica_urls = {standby_url()};
    o.application_name = unique("hf_carried");
    o.max_replica_lag = std::chrono::seconds(60);  // about own writes, not lag
    db_ = std::make_unique<Database>(o);
  }
  void TearDown() override {
    db_.reset();
    if (admin_) admin_->exec("DROP TABLE IF EXISTS " + table_);
  }

  std::unique_ptr<Admin> admin_;
  std::unique_ptr<Admin> standby_;
  std::string table_;
  std::unique_ptr<Database> db_;
};

TEST_F(PgCarriedPosition, ARequestsPositionCarriedToAnotherThreadKeepsItsReadsOffAStaleStandby) {
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
