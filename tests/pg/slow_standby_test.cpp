// A standby that answers, but slowly (DESIGN.md §12, ADR 0041), on the real primary and hot
// standby: a statement that sleeps only in recovery. Its reads are hedged to the primary,
// whose answer comes well before the slow one; after three such reads the standby is used
// less (ejected) and reads go to the primary at once; a probe that finds it fast again
// brings it back. A hedged read keeps read-your-writes, and a write is never doubled.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::seconds_since;
using pgtest::server_url;
using pgtest::standby_url;
using pgtest::unique;

// 1 on the primary; 2 on the standby, after `seconds` there.
std::string slow_on_standby(double seconds) {
  return "SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT 2 FROM pg_sleep(" +
         std::to_string(seconds) + ")) ELSE 1 END";
}

DatabaseOptions with_standby() {
  DatabaseOptions o;
  o.url = server_url();
  o.replica_urls = {standby_url()};
  o.application_name = unique("hf_slow_standby");
  o.hedge_budget = 0.02;  // the budget starts with 10 hedges
  return o;
}

// Reads that teach the Database the standby's normal latency (its p95 needs 16 answers), and
// two idle connections of the primary's read pool (a hedge takes one only while another
// stays idle).
void learn(Database& db) {
  {
    Result<PooledConnection> a = db.read_pool().acquire();
    Result<PooledConnection> b = db.read_pool().acquire();
    ASSERT_TRUE(a.ok() && b.ok());
  }
  for (int i = 0; i < 16; ++i) {
    RequestScope scope(std::chrono::seconds(2));
    Result<Rows> r = db.read("SELECT 1");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
}

TEST(PgSlowStandby, ASlowStandbysReadsAreAnsweredByThePrimaryAndItIsUsedLess) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  DatabaseOptions o = with_standby();
  o.slow_copy_probe_every = std::chrono::seconds(30);  // no probe during this test
  Database db(o);
  learn(db);
  EXPECT_EQ(db.hedged_reads(), 0u);
  EXPECT_FALSE(db.replica_slow(0));
  const std::string slow = slow_on_standby(1.0);
  for (int i = 0; i < 5; ++i) {
    RequestScope scope(std::chrono::seconds(3));
    const auto started = std::chrono::steady_clock::now();
    RetryStats stats;
    Result<Rows> r = db.read(slow, {}, ReadOptions{.stats = &stats});
    const double took = seconds_since(started);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), "1") << "read " << i << ": the primary's answer";
    EXPECT_LT(took, 0.3) << "read " << i << ": not the standby's 1 s";
    // Three reads are hedged (two attempts each); then the standby is slow and the primary
    // answers alone.
    EXPECT_EQ(stats.attempts, i < 3 ? 2 : 1) << "read " << i;
  }
  EXPECT_EQ(db.hedged_reads(), 3u);
  EXPECT_EQ(db.hedges_won(), 3u);
  EXPECT_TRUE(db.replica_slow(0));
}

TEST(PgSlowStandby, WithoutHedgesASlowStandbyIsGivenUpAtTheThresholdOnceItWasSlow) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  DatabaseOptions o = with_standby();
  o.hedge_budget = 0;
  o.slow_copy_probe_every = std::chrono::seconds(30);
  Database db(o);
  learn(db);
  const std::string slow = slow_on_standby(0.5);
  {
    // The first slow answer is waited for: nothing is known yet.
    RequestScope scope(std::chrono::seconds(3));
    Result<Rows> r = db.read(slow);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), "2");
  }
  for (int i = 0; i < 3; ++i) {
    // Then the standby gets no longer than the slow threshold (20 ms) before the primary
    // answers; after two more of those it is ejected.
    RequestScope scope(std::chrono::seconds(3));
    const auto started = std::chrono::steady_clock::now();
    Result<Rows> r = db.read(slow);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), "1") << "read " << i;
    EXPECT_LT(seconds_since(started), 0.25) << "read " << i;
  }
  EXPECT_TRUE(db.replica_slow(0));
  EXPECT_EQ(db.hedged_reads(), 0u);
}

TEST(PgSlowStandby, AProbeThatFindsTheStandbyFastAgainBringsItBack) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  DatabaseOptions o = with_standby();
  o.slow_copy_probe_every = std::chrono::milliseconds(50);
  Database db(o);
  learn(db);
  const std::string slow = slow_on_standby(1.0);
  for (int i = 0; i < 3; ++i) {
    RequestScope scope(std::chrono::seconds(3));
    ASSERT_TRUE(db.read(slow).ok());
  }
  ASSERT_TRUE(db.replica_slow(0));
  // The standby answers fast again: two probes in a row see it, and it is used again.
  const std::string who = "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END";
  EXPECT_TRUE(pgtest::eventually([&] {
    RequestScope scope(std::chrono::seconds(2));
    Result<Rows> r = db.read(who);
    return r.ok() && r->text(0, 0) == "standby" && !db.replica_slow(0);
  }));
}

TEST(PgSlowStandby, AHedgedReadSeesTheRequestsOwnWriteAndTheWriteIsAppliedOnce) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin primary(server_url());
  const std::string table = unique("hf_hedge_rw");
  primary.exec("CREATE TABLE " + table + " (id int)");
  DatabaseOptions o = with_standby();
  o.slow_copy_floor = Duration::zero();  // hedging alone
  Database db(o);
  learn(db);
  {
    RequestScope scope(std::chrono::seconds(3));
    Result<Rows> w = db.write("INSERT INTO " + table + " VALUES (1)");
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    // Slow on the standby (if the standby answers it at all: it may be behind the write), so
    // the primary answers: with the request's own write.
    const std::string read = "SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT count(*) FROM " +
                             table + ", pg_sleep(1)) ELSE (SELECT count(*) FROM " + table + ") END";
    const auto started = std::chrono::steady_clock::now();
    Result<Rows> r = db.read(read);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), "1");
    EXPECT_LT(seconds_since(started), 0.3);
  }
  EXPECT_EQ(primary.count("SELECT count(*) FROM " + table), 1);
  primary.exec("DROP TABLE " + table);
}

}  // namespace
}  // namespace holdfast::pg
