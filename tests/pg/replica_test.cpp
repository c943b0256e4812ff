// Replicas: reads prefer a replica, fall back to the primary while the replica's breaker is
// open, and return once a probe finds it healthy; writes always go to the primary. The
// "replica" is the shared server reached as another role, so the test can refuse its
// connections (CONNECTION LIMIT 0: a real 53300) and see who answered (current_user).
#include <gtest/gtest.h>

#include <thread>

#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

TEST(PgReplicas, ReadsPreferTheReplicaAndFallBackToThePrimaryWhileItsBreakerIsOpen) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string role = unique("hf_replica");
  const std::string table = unique("hf_who");
  admin.exec("CREATE ROLE " + role + " LOGIN");
  admin.exec("CREATE TABLE " + table + " (who text)");

  DatabaseOptions o;
  o.url = server_url();
  o.replica_urls = {pgtest::url_as(server_url(), role)};
  o.application_name = unique("hf_replicated");
  o.shield.breaker.consecutive_failures = 2;
  o.shield.breaker.open_initial = std::chrono::milliseconds(200);
  o.shield.breaker.open_max = std::chrono::milliseconds(400);
  Database db(o);
  ASSERT_EQ(db.replica_count(), 1u);
  const auto who = [&] {
    RequestScope scope(std::chrono::seconds(2));
    auto r = db.read("SELECT current_user::text");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::string(r->text(0, 0)) : std::string("error");
  };

  EXPECT_EQ(who(), role);
  ASSERT_TRUE(db.write("INSERT INTO " + table + " SELECT current_user").ok());
  EXPECT_EQ(admin.exec("SELECT who FROM " + table).text(0, 0), "postgres");

  // The replica stops taking connections, and loses the ones it had.
  admin.exec("ALTER ROLE " + role + " CONNECTION LIMIT 0");
  admin.count("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1",
              {role});
  ASSERT_TRUE(pgtest::eventually([&] {
    return admin.count("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", {role}) == 0;
  }));
  // Reads keep being answered by the primary, at once, until the replica's breaker opens.
  // The pool retries a failed connect only after a short backoff, so how many reads that
  // takes depends on their pace: read for up to 3 s, 20 ms apart.
  const auto reading_since = std::chrono::steady_clock::now();
  while (db.replica_shield(0).breaker().state() == BreakerState::kClosed &&
         pgtest::seconds_since(reading_since) < 3.0) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(who(), "postgres");
    EXPECT_LT(pgtest::seconds_since(start), 0.5) << "a read waited for the broken replica";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
  const std::uint64_t tried = db.replica_pool(0).stats().connect_failures;
  EXPECT_GE(tried, 2u);

  // Back: a read admitted as the breaker's probe finds it healthy, and reads return to it.
  admin.exec("ALTER ROLE " + role + " CONNECTION LIMIT -1");
  EXPECT_TRUE(pgtest::eventually([&] { return who() == role; }, std::chrono::seconds(5)));
  EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kClosed);

  admin.exec("DROP TABLE " + table);
}

}  // namespace
}  // namespace holdfast::pg
