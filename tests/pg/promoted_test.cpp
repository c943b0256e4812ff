// A standby that was promoted is no replica (ADR 0025): a replica session that finds its
// server not in recovery is not used as one (a read that must see its own writes goes to the
// primary; one that needs none keeps the answer), it and the replica pool's idle sessions to
// that host are closed, and the next connect goes through
// the replica URL's hosts, so reads return to a real standby once there is one. Real
// servers: a private primary and streaming standby, the standby promoted with pg_promote()
// and the old primary rebuilt as its standby (scripts/pg-test-server.sh `promoted`,
// `rebuild-standby`). The rule itself (replica_verdict) is tested without a server.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "database_internal.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/lsn.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using detail::ReplicaVerdict;
using pgtest::Admin;
using pgtest::host_port;
using pgtest::PrivateServer;
using pgtest::two_hosts;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kWho =
    "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END";

TEST(PgReplicaVerdict, AServerNotInRecoveryIsNoReplicaWhateverItsReplayPositionSays) {
  // Promoted: its replay position stopped at the promotion, past or short of the request's.
  EXPECT_EQ(detail::replica_verdict(false, 0x5000, true, 0), ReplicaVerdict::kNotAReplica);
  EXPECT_EQ(detail::replica_verdict(false, 0x5000, true, 0x4000), ReplicaVerdict::kNotAReplica);
  EXPECT_EQ(detail::replica_verdict(false, 0, true, 0x4000), ReplicaVerdict::kNotAReplica);
  // A standby: the request's own writes decide.
  EXPECT_EQ(detail::replica_verdict(true, 0x5000, true, 0), ReplicaVerdict::kServes);
  EXPECT_EQ(detail::replica_verdict(true, 0x5000, false, 0), ReplicaVerdict::kServes);
  EXPECT_EQ(detail::replica_verdict(true, 0x5000, true, 0x5000), ReplicaVerdict::kServes);
  EXPECT_EQ(detail::replica_verdict(true, 0x4fff, true, 0x5000), ReplicaVerdict::kBehind);
  EXPECT_EQ(detail::replica_verdict(true, 0x5000, false, 0x5000), ReplicaVerdict::kEarlySnapshot);
}

// Who answered a read in a request of its own ("standby", "primary", "error"), and how many
// attempts it took on all endpoints; the request must see `position` (as a cookie brings it).
std::string who(Database& db, int* attempts = nullptr, Lsn position = {}) {
  RequestScope scope(seconds(3));
  require_lsn(position);
  RetryStats stats;
  ReadOptions ro;
  ro.stats = &stats;
  auto r = db.read(kWho, {}, ro);
  if (attempts != nullptr) *attempts = stats.attempts;
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::string(r->text(0, 0)) : std::string("error");
}

// The failover: the primary goes for good, and the standby at `standby` is promoted.
void fail_over(PrivateServer& servers, const std::string& standby) {
  ASSERT_TRUE(servers.down());
  ASSERT_EQ(Admin(standby).exec("SELECT pg_promote()").text(0, 0), "t");
  ASSERT_TRUE(servers.promoted());
}

std::uint64_t not_a_replica_faults(Database& db) {
  // detail::not_a_replica(): scope reconnect, overload.
  return db.replica_shield(0).metrics().snapshot().faults[static_cast<std::size_t>(
      RetryScope::kReconnect)][1];
}

TEST(PgPromotedStandby, ItsReplicaSessionsAreClosedAndReadsReturnToTheRebuiltStandby) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer servers(20, /*with_standby=*/true);
  ASSERT_FALSE(servers.standby_url().empty()) << "the private standby did not start";
  const std::string first = servers.url();           // the primary, until the failover
  const std::string second = servers.standby_url();  // the standby, promoted below
  Admin(first).exec("CREATE TABLE promoted_t (id int)");
  Admin(first).exec("CREATE TABLE promoted_before (id int)");

  DatabaseOptions o;
  // Writes: whichever host is not in recovery. Reads: whichever is a standby (the drill's
  // --pg-replica). The replica's sessions have an application_name of their own.
  const std::string app = pgtest::unique("hf_promoted");
  const std::string replica_app = app + "_replica";
  o.url = pgtest::url_with(two_hosts(host_port(first), second), "application_name=" + app);
  o.replica_urls = {
      pgtest::url_with(two_hosts(host_port(second), first),
                       "target_session_attrs=standby&application_name=" + replica_app)};
  o.application_name = "";  // each URL's own
  o.read_connections = 3;
  o.shield.breaker.consecutive_failures = 2;
  o.shield.breaker.open_initial = milliseconds(200);
  o.shield.breaker.open_max = milliseconds(400);
  Database db(o);
  EXPECT_EQ(who(db), "standby");
  Lsn before;  // a write's position on the first primary's timeline
  {
    RequestScope scope(seconds(6));
    ASSERT_TRUE(db.write("INSERT INTO promoted_before VALUES (1)").ok());
    before = request_lsn();
  }
  ASSERT_NE(before.timeline, 0u) << before.to_string();
  {
    // Three sessions to the standby, idle in the replica pool.
    Pool& pool = db.replica_pool(0);
    auto a = pool.acquire();
    auto b = pool.acquire();
    auto c = pool.acquire();
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  }
  ASSERT_EQ(db.replica_pool(0).stats().idle, 3);
  EXPECT_EQ(Admin(second).backends(replica_app), 3);

  ASSERT_NO_FATAL_FAILURE(fail_over(servers, second));

  // A read that needs no write of its own: a replica session reaches the promoted server and
  // finds it not in recovery. Its answer stands (the promoted server holds all a standby
  // did: in a failover the primary's pools may still wait on the frozen old primary), but
  // it is no replica any more: the replica pool keeps no session to it.
  const std::uint64_t discarded_before = db.replica_pool(0).stats().discarded;
  int attempts = 0;
  EXPECT_EQ(who(db, &attempts), "primary");  // the promoted server is out of recovery
  EXPECT_EQ(attempts, 1);
  const PoolStats replica = db.replica_pool(0).stats();
  EXPECT_EQ(replica.idle, 0);
  EXPECT_EQ(replica.open, 0);
  EXPECT_EQ(replica.discarded - discarded_before, 3u);  // it and its two idle siblings
  EXPECT_EQ(not_a_replica_faults(db), 1u);
  Admin on_new_primary(second);
  EXPECT_TRUE(on_new_primary.wait_gone(replica_app));

  // No standby yet (the replica URL's hosts: the promoted server is no standby, the old
  // primary is down): the primary answers every read.
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(who(db), "primary");

  // The old primary rebuilt as the new primary's standby: the replica's next connects take
  // it, and reads go there again.
  ASSERT_TRUE(servers.rebuild_standby());
  EXPECT_EQ(host_port(servers.standby_url()), host_port(first));
  EXPECT_TRUE(pgtest::eventually([&] { return who(db) == "standby"; }, milliseconds(10000)));
  EXPECT_GE(Admin(first).backends(replica_app), 1);
  EXPECT_EQ(on_new_primary.backends(replica_app), 0);

  // Read-your-writes on the new timeline: a request's read after its write sees it.
  {
    RequestScope scope(seconds(6));
    ASSERT_TRUE(db.write("INSERT INTO promoted_t VALUES (1)").ok());
    EXPECT_EQ(request_lsn().timeline, before.timeline + 1) << "the promotion's new timeline";
    auto r = db.read("SELECT count(*) FROM promoted_t");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), "1");
  }
  // A position of the old timeline (a cookie from before the failover) is not compared with
  // the rebuilt standby's replay position, far past it in number: the primary answers. The
  // same number without its timeline is compared as it always was.
  ASSERT_TRUE(pgtest::eventually([&] { return who(db, nullptr, Lsn{before.value}) == "standby"; },
                                 milliseconds(10000)));
  EXPECT_EQ(who(db, nullptr, before), "primary");
  EXPECT_EQ(who(db, nullptr, before), "primary");
  EXPECT_EQ(Admin(second).count("SELECT count(*) FROM promoted_before"), 1)
      << "the write before the failover survived it";
}

TEST(PgPromotedStandby, AReplicaURLThatKeepsReachingThePromotedServerIsNotTriedByEveryRead) {
  // One host, no target_session_attrs: every connect of the replica pool reaches the
  // promoted server again. Each such read counts against the replica's breaker, which
  // opens: the reads after it go to the primary without a connect each.
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer servers(20, /*with_standby=*/true);
  ASSERT_FALSE(servers.standby_url().empty()) << "the private standby did not start";
  const std::string standby = servers.standby_url();

  DatabaseOptions o;
  o.url = standby;  // the primary after the promotion
  o.replica_urls = {standby};
  o.application_name = pgtest::unique("hf_promoted_one");
  o.shield.breaker.consecutive_failures = 2;
  o.shield.breaker.open_initial = seconds(30);
  o.shield.breaker.open_max = seconds(30);
  Database db(o);
  EXPECT_EQ(who(db), "standby");

  ASSERT_NO_FATAL_FAILURE(fail_over(servers, standby));

  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(who(db), "primary");
  // The one session of before, then one connect per read until the breaker opened.
  EXPECT_EQ(db.replica_pool(0).stats().connects, 2u);
  EXPECT_EQ(not_a_replica_faults(db), 2u);
  EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kOpen);
}

TEST(PgPromotedStandby, TheHealthProbeKeepsAPromotedReplicasBreakerOpen) {
  // The replica's health probe asks pg_is_in_recovery() too: a promoted server replays
  // nothing and so lags nothing, but it is no replica, and the probe leaves its session.
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer servers(20, /*with_standby=*/true);
  ASSERT_FALSE(servers.standby_url().empty()) << "the private standby did not start";
  const std::string standby = servers.standby_url();

  DatabaseOptions o;
  o.url = standby;
  o.replica_urls = {standby};
  o.application_name = pgtest::unique("hf_promoted_probe");
  o.shield.breaker.consecutive_failures = 2;
  o.health_probe_interval = milliseconds(50);
  Database db(o);
  EXPECT_EQ(who(db), "standby");

  ASSERT_NO_FATAL_FAILURE(fail_over(servers, standby));
  EXPECT_EQ(who(db), "primary");
  EXPECT_EQ(who(db), "primary");
  ASSERT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kOpen);

  // Several probes later: still open, each probe on a new connection (the last one's was
  // closed), and reads do not try the replica.
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kOpen);
  EXPECT_GE(db.replica_pool(0).stats().connects, 4u);
  EXPECT_EQ(db.replica_pool(0).stats().idle, 0);
  int attempts = 0;
  EXPECT_EQ(who(db, &attempts), "primary");
  EXPECT_EQ(attempts, 1);
}

}  // namespace
}  // namespace holdfast::pg
