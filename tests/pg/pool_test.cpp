// holdfast::pg::Pool against a real server: bounded size, waits bounded by the window,
// health checks before hand-out, read-only sessions, and no reconnect storm.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

PoolOptions pool_options(const std::string& app, int size) {
  PoolOptions o;
  o.connect.conninfo = server_url();
  o.connect.application_name = app;
  o.size = size;
  return o;
}

TEST(PgPool, NeverOpensMoreThanItsSizeAndAWaitEndsAtTheDeadline) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Pool pool(pool_options(unique("hf_pool"), 2));
  auto a = pool.acquire();
  auto b = pool.acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->fresh());
  const auto start = std::chrono::steady_clock::now();
  auto c = pool.acquire(Clock::system().now() + std::chrono::milliseconds(200));
  const double waited = pgtest::seconds_since(start);
  EXPECT_EQ(c.status().code(), Code::kResourceExhausted) << c.status().to_string();
  EXPECT_GE(waited, 0.19);
  EXPECT_LT(waited, 1.0);
  PoolStats s = pool.stats();
  EXPECT_EQ(s.open, 2);
  EXPECT_EQ(s.timeouts, 1u);
}

TEST(PgPool, AWaiterGetsTheConnectionThatComesBack) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Pool pool(pool_options(unique("hf_pool"), 1));
  auto held = pool.acquire();
  ASSERT_TRUE(held.ok());
  const int pid = (*held)->backend_pid();
  std::thread returner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held = Result<PooledConnection>(PooledConnection());  // returns it
  });
  auto next = pool.acquire(Clock::system().now() + std::chrono::seconds(5));
  returner.join();
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_FALSE(next->fresh());
  EXPECT_EQ((*next)->backend_pid(), pid);
  EXPECT_EQ(pool.stats().waits, 1u);
}

TEST(PgPool, AWaitInsideARequestScopeEndsWithItsWindow) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Pool pool(pool_options(unique("hf_pool"), 1));
  auto held = pool.acquire();
  ASSERT_TRUE(held.ok());
  RequestScope scope(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  auto c = pool.acquire();
  EXPECT_FALSE(c.ok());
  EXPECT_LT(pgtest::seconds_since(start), 1.0);
  // Waiting for a connection is time the request spends: it opened the window.
  EXPECT_TRUE(scope.window().is_open());
  EXPECT_EQ(scope.window().remaining(), Duration::zero());
}

TEST(PgPool, ABackendTerminatedWhileIdleIsReplacedBeforeHandOut) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string app = unique("hf_pool_idle");
  Pool pool(pool_options(app, 2));
  int old_pid = 0;
  {
    auto c = pool.acquire();
    ASSERT_TRUE(c.ok());
    old_pid = (*c)->backend_pid();
  }
  ASSERT_EQ(admin.terminate(app), 1);
  ASSERT_TRUE(admin.wait_gone(app));
  auto c = pool.acquire();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_NE((*c)->backend_pid(), old_pid);
  EXPECT_TRUE((*c)->query("SELECT 1").ok());
  EXPECT_EQ(pool.stats().discarded, 1u);
}

TEST(PgPool, ReadOnlySessionsRefuseWrites) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string table = unique("hf_ro");
  admin.exec("CREATE TABLE " + table + " (a int)");
  PoolOptions o = pool_options(unique("hf_pool_ro"), 1);
  o.read_only = true;
  Pool pool(o);
  {
    auto c = pool.acquire();
    ASSERT_TRUE(c.ok());
    auto r = (*c)->query("INSERT INTO " + table + " VALUES (1)");
    EXPECT_EQ(r.status().sqlstate(), "25006") << r.status().to_string();
  }
  EXPECT_EQ(admin.count("SELECT count(*) FROM " + table), 0);
  admin.exec("DROP TABLE " + table);
}

TEST(PgPool, AReadOnlySessionWhoseDefaultWasSwitchedOffIsNeverReused) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PoolOptions o = pool_options(unique("hf_pool_ro"), 1);
  o.read_only = true;
  Pool pool(o);
  int pid = 0;
  {
    auto c = pool.acquire();
    ASSERT_TRUE(c.ok());
    pid = (*c)->backend_pid();
    ASSERT_TRUE(
        (*c)->query("SELECT set_config('default_transaction_read_only', 'off', false)").ok());
  }
  EXPECT_EQ(pool.stats().discarded, 1u);
  auto c = pool.acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)->backend_pid(), pid);
  EXPECT_EQ((*c)->server_parameter("default_transaction_read_only"), "on");
}

TEST(PgPool, AConnectionReturnedInsideATransactionIsClosed) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Pool pool(pool_options(unique("hf_pool_tx"), 1));
  {
    auto c = pool.acquire();
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->query("BEGIN").ok());
  }
  EXPECT_EQ(pool.stats().discarded, 1u);
  EXPECT_EQ(pool.stats().open, 0);
}

TEST(PgPool, ConnectsToADeadServerBackOffInsteadOfStorming) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PoolOptions o;
  o.connect.conninfo = "postgresql://postgres@127.0.0.1:1/postgres";
  o.size = 8;
  Pool pool(o);
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until) {
        auto c = pool.acquire(Clock::system().now() + std::chrono::milliseconds(50));
        EXPECT_FALSE(c.ok());
        ++calls;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  const PoolStats s = pool.stats();
  // 50 ms doubling, one connect at a time: about 5 attempts in 800 ms, whatever the load.
  EXPECT_GE(calls.load(), 50);
  EXPECT_GE(s.connect_failures, 3u);
  EXPECT_LE(s.connect_failures, 10u);
  EXPECT_EQ(s.connects, 0u);
  EXPECT_EQ(s.open, 0);
}

// Connects to a hung server are failing, and one request is trying the next one for up
// to 3 s. Another request is answered after the short wait for that connect's result.
void expect_others_answered_while_a_connect_is_tried(int pool_size) {
  pgtest::SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  PoolOptions o;
  o.connect.conninfo = "postgresql://postgres@127.0.0.1:" + std::to_string(silent.port()) + "/x";
  o.size = pool_size;
  o.reconnect_backoff = Backoff::steps({std::chrono::milliseconds(1)}, Jitter::none());
  Pool pool(o);
  // The first connect times out: connects are failing.
  ASSERT_FALSE(pool.acquire(Clock::system().now() + std::chrono::milliseconds(100)).ok());
  ASSERT_EQ(pool.stats().connect_failures, 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the 1 ms backoff
  // One request tries the next connect, for up to 3 s.
  std::thread prober([&] { (void)pool.acquire(Clock::system().now() + std::chrono::seconds(3)); });
  while (pool.stats().open == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Another, with the same 3 s, is answered after the short wait for that connect's
  // result, as during the backoff: refused by the pool, with when to come back.
  const auto start = std::chrono::steady_clock::now();
  Result<PooledConnection> other = pool.acquire(Clock::system().now() + std::chrono::seconds(3));
  const double took = pgtest::seconds_since(start);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().stop_reason(), StopReason::kBreakerOpen) << other.status().to_string();
  EXPECT_GT(other.status().retry_after(), Duration::zero());
  EXPECT_NE(other.status().message().find("another request is trying to connect"),
            std::string::npos)
      << other.status().to_string();
  EXPECT_EQ(pool.stats().timeouts, 0u) << "it waited out its deadline";
  EXPECT_LT(took, 2.0);
  prober.join();
}

TEST(PgPool, WhileAConnectToAHungServerIsTriedOthersAreAnsweredAtOnce) {
  expect_others_answered_while_a_connect_is_tried(4);
}

// The connect under way holds the last free slot: the others do not wait for it either.
TEST(PgPool, WhileAConnectHoldsTheLastFreeSlotOthersAreAnsweredAtOnce) {
  expect_others_answered_while_a_connect_is_tried(1);
}

// The request that comes after the backoff starts the next connect, but to a server that
// hangs it does not wait for it: it is answered after the short wait, like the others,
// while the connect goes on without it.
TEST(PgPool, TheRequestThatStartsAConnectToAHungServerIsAnsweredAtOnce) {
  pgtest::SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  PoolOptions o;
  o.connect.conninfo = "postgresql://postgres@127.0.0.1:" + std::to_string(silent.port()) + "/x";
  o.connect.connect_timeout = std::chrono::seconds(2);
  o.size = 2;
  o.reconnect_backoff = Backoff::steps({std::chrono::milliseconds(1)}, Jitter::none());
  Pool pool(o);
  ASSERT_FALSE(pool.acquire(Clock::system().now() + std::chrono::milliseconds(100)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the 1 ms backoff
  const auto start = std::chrono::steady_clock::now();
  Result<PooledConnection> c = pool.acquire(Clock::system().now() + std::chrono::seconds(3));
  const double took = pgtest::seconds_since(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().stop_reason(), StopReason::kBreakerOpen) << c.status().to_string();
  EXPECT_GT(c.status().retry_after(), Duration::zero());
  EXPECT_LT(took, 1.0);
  // The connect it started is still under way, and it is the only one.
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.open, 1);
  EXPECT_EQ(s.connect_failures, 1u);
  EXPECT_EQ(s.timeouts, 0u);
}

// A connect that fails at once is the answer of the request that started it, as a failed
// connect made on its own thread would be: its breaker counts it, and it says when the
// pool connects again.
TEST(PgPool, ARefusedConnectIsTheAnswerOfTheRequestThatStartedIt) {
  PoolOptions o;
  o.connect.conninfo = "postgresql://postgres@127.0.0.1:1/postgres";
  o.reconnect_backoff = Backoff::steps({std::chrono::milliseconds(1)}, Jitter::none());
  Pool pool(o);
  // The first refusal may be ridden out (a restart is short)...
  Result<PooledConnection> first = pool.acquire(Clock::system().now() + std::chrono::seconds(1));
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().stop_reason(), StopReason::kNone) << first.status().to_string();
  EXPECT_GT(first.status().retry_after(), Duration::zero());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // ...but a server that refuses the probe too is answered for at once, with when the pool
  // connects again.
  Result<PooledConnection> c = pool.acquire(Clock::system().now() + std::chrono::seconds(1));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().stop_reason(), StopReason::kProbeFailed) << c.status().to_string();
  EXPECT_GT(c.status().retry_after(), Duration::zero());
  EXPECT_EQ(breaker_result(c.status()), CallResult::kRefused);
  EXPECT_EQ(c.status().message().find("another request"), std::string::npos)
      << c.status().to_string();
  EXPECT_EQ(pool.stats().connect_failures, 2u);
}

// A pool of the test server whose connects back off for `backoff` after a failure.
PoolOptions backing_off_after(Duration backoff) {
  PoolOptions o = pool_options(unique("hf_pool"), 2);
  o.reconnect_backoff = Backoff::steps({backoff}, Jitter::none());
  return o;
}

// Makes the pool count a failed connect, as when a pooler says it cannot reach the server.
void fail_a_connect(Pool& pool) {
  auto c = pool.acquire();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  (void)c->server_unreachable(Status(Code::kUnavailable, "pooler: no server"));
}

// Once the server answers again, the request that starts the connect gets the connection.
TEST(PgPool, TheRequestThatStartsAConnectIsServedWhenTheServerAnswers) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Pool pool(backing_off_after(std::chrono::milliseconds(1)));
  fail_a_connect(pool);
  ASSERT_EQ(pool.stats().consecutive_connect_failures, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Result<PooledConnection> c = pool.acquire(Clock::system().now() + std::chrono::seconds(5));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->query("SELECT 1").ok());
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.consecutive_connect_failures, 0);
  EXPECT_EQ(s.connects, 2u);
  EXPECT_EQ(s.open, 1);
}

// A health probe's connect to the same server worked: the pool need not sit out the rest
// of its backoff before it connects again.
TEST(PgPool, AfterTheServerAnsweredElsewhereTheNextConnectNeedNotWaitForTheBackoff) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Pool pool(backing_off_after(std::chrono::seconds(30)));
  fail_a_connect(pool);
  Result<PooledConnection> during = pool.acquire(Clock::system().now() + std::chrono::seconds(5));
  ASSERT_FALSE(during.ok());
  EXPECT_EQ(during.status().stop_reason(), StopReason::kBreakerOpen) << during.status().to_string();
  pool.server_answered();
  Result<PooledConnection> after = pool.acquire(Clock::system().now() + std::chrono::seconds(5));
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_EQ(pool.stats().consecutive_connect_failures, 0);
}

// A failed connect that nobody followed up within a second of its backoff's end (the
// reads went elsewhere meanwhile, say) no longer makes requests connect one at a time:
// once the server is back, a page does not get "another request is trying to connect"
// just because the connect ahead of it is slow.
TEST(PgPool, AnOldConnectFailureLetsRequestsConnectSideBySide) {
  pgtest::SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  PoolOptions o;
  o.connect.conninfo = "postgresql://postgres@127.0.0.1:" + std::to_string(silent.port()) + "/x";
  o.size = 2;
  o.reconnect_backoff = Backoff::steps({std::chrono::milliseconds(1)}, Jitter::none());
  Pool pool(o);
  ASSERT_FALSE(pool.acquire(Clock::system().now() + std::chrono::milliseconds(100)).ok());
  ASSERT_EQ(pool.stats().consecutive_connect_failures, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto connect = [&] { (void)pool.acquire(Clock::system().now() + std::chrono::seconds(1)); };
  std::thread first(connect);
  while (pool.stats().open == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread second(connect);
  // Both connects are under way at once (each hangs until its deadline).
  const auto start = std::chrono::steady_clock::now();
  while (pool.stats().open < 2 && pgtest::seconds_since(start) < 0.5)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(pool.stats().open, 2);
  first.join();
  second.join();
  EXPECT_EQ(pool.stats().connect_failures, 3u);
}

TEST(PgPool, DropIdleToClosesTheIdleConnectionsToOneHostOnly) {
  HOLDFAST_REQUIRE_PG_SERVER();
  const std::string url = server_url();
  const std::size_t loopback = url.find("@127.0.0.1:");
  if (loopback == std::string::npos) GTEST_SKIP() << "the test server is not on 127.0.0.1";
  Pool pool(pool_options(unique("hf_pool"), 3));
  {
    auto a = pool.acquire();
    auto b = pool.acquire();
    ASSERT_TRUE(a.ok() && b.ok());
  }
  ASSERT_EQ(pool.stats().idle, 2);
  // The same server under another host name is another host for libpq: nothing goes.
  std::string by_name = url;
  by_name.replace(loopback + 1, 9, "localhost");
  auto other = Connection::open(by_name);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  pool.drop_idle_to(*other);
  EXPECT_EQ(pool.stats().idle, 2);
  // A connection to the pool's host: both idle ones go, the one lent out stays.
  auto lent = pool.acquire();
  ASSERT_TRUE(lent.ok());
  auto same = Connection::open(url);
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  pool.drop_idle_to(*same);
  PoolStats s = pool.stats();
  EXPECT_EQ(s.idle, 0);
  EXPECT_EQ(s.open, 1);
  EXPECT_EQ(s.discarded, 1u);
  EXPECT_TRUE((*lent)->query("SELECT 1").ok());
}

TEST(PgPool, RejectsABadConfiguration) {
  PoolOptions o;
  EXPECT_THROW(Pool{o}, std::invalid_argument);  // no conninfo
  o.connect.conninfo = "postgresql://127.0.0.1:1/x";
  o.size = 0;
  EXPECT_THROW(Pool{o}, std::invalid_argument);
}

}  // namespace
}  // namespace holdfast::pg
