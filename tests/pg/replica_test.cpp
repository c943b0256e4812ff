// Replicas on a real streaming hot standby (scripts/pg-test-server.sh with
// HOLDFAST_PG_STANDBY=1): reads go to the standby, writes to the primary; while the
// standby is down the primary answers reads at once, and reads return to the standby once
// a probe finds it back. Who answered is what the server says: pg_is_in_recovery().
#include <gtest/gtest.h>

#include <thread>

#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::standby_url;
using pgtest::unique;

constexpr const char* kWho =
    "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END";

DatabaseOptions replicated(const std::string& primary, const std::string& standby) {
  DatabaseOptions o;
  o.url = primary;
  o.replica_urls = {standby};
  o.application_name = unique("hf_replicated");
  o.shield.breaker.consecutive_failures = 2;
  o.shield.breaker.open_initial = std::chrono::milliseconds(200);
  o.shield.breaker.open_max = std::chrono::milliseconds(400);
  return o;
}

// Who answered a read: "standby", "primary" or "error".
std::string who(Database& db) {
  RequestScope scope(std::chrono::seconds(2));
  auto r = db.read(kWho);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::string(r->text(0, 0)) : std::string("error");
}

TEST(PgReplicas, ReadsGoToTheHotStandbyAndWritesToThePrimary) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_replicated");
  admin.exec("CREATE TABLE " + table + " (id int)");

  Database db(replicated(server_url(), standby_url()));
  ASSERT_EQ(db.replica_count(), 1u);
  EXPECT_EQ(who(db), "standby");
  auto wrote = db.write(std::string(kWho) + " || (SELECT count(*) FROM " + table + ")");
  ASSERT_TRUE(wrote.ok()) << wrote.status().to_string();
  EXPECT_EQ(wrote->text(0, 0), "primary0");
  ASSERT_TRUE(db.write("INSERT INTO " + table + " VALUES (1)").ok());
  EXPECT_EQ(admin.count("SELECT count(*) FROM " + table), 1);
  // Streamed to the standby, where reads find it.
  EXPECT_TRUE(pgtest::eventually([&] {
    auto r = db.read("SELECT count(*) FROM " + table);
    return r.ok() && r->text(0, 0) == "1";
  }));
  EXPECT_EQ(standby.count("SELECT count(*) FROM " + table), 1);
  EXPECT_EQ(db.replica_pool(0).stats().connects, 1u);
  admin.exec("DROP TABLE " + table);
}

TEST(PgReplicas, WhileTheStandbyIsStoppedThePrimaryAnswersReadsAtOnceAndTheyReturnAfterIt) {
  HOLDFAST_REQUIRE_PG_SERVER();
  pgtest::PrivateServer cluster(20, /*with_standby=*/true);
  ASSERT_FALSE(cluster.standby_url().empty()) << "the private primary + standby did not start";
  Database db(replicated(cluster.url(), cluster.standby_url()));
  EXPECT_EQ(who(db), "standby");

  ASSERT_TRUE(cluster.standby_down());
  // Reads keep being answered by the primary, at once, until the standby's breaker opens.
  // The pool retries a failed connect only after a short backoff, so how many reads that
  // takes depends on their pace: read for up to 3 s, 20 ms apart.
  const auto reading_since = std::chrono::steady_clock::now();
  int reads = 0;
  while (db.replica_shield(0).breaker().state() == BreakerState::kClosed &&
         pgtest::seconds_since(reading_since) < 3.0) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(who(db), "primary");
    EXPECT_LT(pgtest::seconds_since(start), 0.5) << "a read waited for the stopped standby";
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
  EXPECT_GE(reads, 1);
  EXPECT_GE(db.replica_pool(0).stats().connect_failures, 1u);
  // While it is open, too.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(who(db), "primary");
  EXPECT_LT(pgtest::seconds_since(start), 0.1);

  // Back: a read admitted as the breaker's probe finds it healthy, and reads return to it.
  ASSERT_TRUE(cluster.standby_up());
  EXPECT_TRUE(pgtest::eventually([&] { return who(db) == "standby"; }, std::chrono::seconds(5)));
  EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
}

}  // namespace
}  // namespace holdfast::pg
