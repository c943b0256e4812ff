// Overload control against a real server (ADR 0008), with the library's defaults, on a
// private server of the test's own: while it is stopped every request is answered at once
// with Retry-After; the first success comes within a second of its return; after its
// connections were exhausted, every process writes again within a second.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::PrivateServer;
using pgtest::unique;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

long long ms_since(Steady::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Steady::now() - t).count();
}

TEST(PgOverloadControl, WhileTheServerIsStoppedRequestsAreAnsweredAtOnceAndServiceReturnsWithin1s) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server(20);
  ASSERT_FALSE(server.url().empty()) << "could not start a private server";
  DatabaseOptions o;
  o.url = server.url();
  o.application_name = unique("hf_overload_stop");
  Database db(o);
  ASSERT_TRUE(db.read("SELECT 1").ok());

  ASSERT_TRUE(server.down());
  std::mutex mutex;
  long long slowest_after_open_ms = 0;
  int after_open = 0;
  int without_retry_after = 0;
  std::atomic<bool> stop{false};
  std::atomic<bool> served{false};
  std::atomic<bool> restarting{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        const bool open = db.shield().breaker().state() != BreakerState::kClosed;
        const auto start = Steady::now();
        Result<Rows> r = Status();
        {
          RequestScope scope;  // the default 6 s window
          r = db.read("SELECT 1");
        }
        const long long ms = ms_since(start);
        if (r.ok()) served = true;
        // Answers given while the server was down, to requests that found the breaker open.
        if (!open || r.ok() || restarting.load()) continue;
        std::lock_guard<std::mutex> lock(mutex);
        if (ms > 100) std::printf("[ slow ] %lld ms: %s\n", ms, r.status().to_string().c_str());
        ++after_open;
        slowest_after_open_ms = std::max(slowest_after_open_ms, ms);
        if (r.status().retry_after() <= Duration::zero()) ++without_retry_after;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  restarting = true;
  ASSERT_TRUE(server.up());
  const auto back = Steady::now();
  const bool came_back = pgtest::eventually([&] { return served.load(); }, std::chrono::seconds(5));
  const long long back_ms = ms_since(back);
  stop = true;
  for (auto& c : clients)
    c.join();

  ASSERT_TRUE(came_back);
  EXPECT_GT(after_open, 100) << "the breaker opened and requests kept coming";
  EXPECT_LE(slowest_after_open_ms, 100) << "a request waited for a database that is down";
  EXPECT_EQ(without_retry_after, 0) << "every refusal says when to come back";
  EXPECT_LE(back_ms, 1000) << "the first success after the server's return";
  std::printf(
      "[ info ] stopped: %d requests answered while open, slowest %lld ms; first "
      "success %lld ms after the server was back\n",
      after_open, slowest_after_open_ms, back_ms);
}

// The first write of an outage may ride a refused connect out on its retry steps (a restart
// is short); a write that comes once the pool knows the server refuses, and whose connect
// is the pool's probe, is answered by that probe's refusal, without a retry (ADR 0022).
TEST(PgOverloadControl, AWriteWhoseConnectProbesARefusingServerIsNotRetried) {
  HOLDFAST_REQUIRE_PG_SERVER();
  DatabaseOptions o;
  o.url = "postgresql://postgres@127.0.0.1:1/postgres";  // port 1: every connect refused
  o.application_name = unique("hf_overload_probe");
  o.reconnect_backoff = Backoff::steps({milliseconds(1)}, Jitter::none());
  Database db(o);
  const Metrics& metrics = db.shield().metrics();
  {
    RequestScope scope;
    Result<Rows> first = db.write("SELECT 1");
    ASSERT_FALSE(first.ok());
    // Its own refused connect was retried; the retry was the pool's probe, refused too.
    EXPECT_EQ(first.status().stop_reason(), StopReason::kProbeFailed) << first.status().to_string();
    EXPECT_EQ(metrics.snapshot().retries, 1u);
  }
  std::this_thread::sleep_for(milliseconds(5));  // the pool's backoff passes
  RequestScope scope;
  Result<Rows> next = db.write("SELECT 1");
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().stop_reason(), StopReason::kProbeFailed) << next.status().to_string();
  EXPECT_GT(next.status().retry_after(), Duration::zero());
  EXPECT_EQ(metrics.snapshot().retries, 1u) << "the refused probe was retried";
  EXPECT_EQ(db.shield().breaker().state(), BreakerState::kClosed) << "three refusals so far";
}

TEST(PgOverloadControl, AfterConnectionsWereExhaustedEveryProcessWritesAgainWithin1s) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server(12);
  ASSERT_FALSE(server.url().empty()) << "could not start a private server";
  const std::string table = unique("hf_exhaust");
  {
    Admin admin(server.url());
    admin.exec("CREATE TABLE " + table + " (id serial PRIMARY KEY, who int)");
  }
  // Two application processes, each with its own pools and Shields.
  constexpr int kProcesses = 2;
  std::vector<std::string> apps;
  std::vector<std::unique_ptr<Database>> dbs;
  for (int p = 0; p < kProcesses; ++p) {
    DatabaseOptions o;
    o.url = server.url();
    o.application_name = unique("hf_exhaust_app");
    apps.push_back(o.application_name);
    dbs.push_back(std::make_unique<Database>(o));
    ASSERT_TRUE(dbs.back()->write("INSERT INTO " + table + " (who) VALUES ($1)", {p}).ok());
  }
  // Exhaust: drop the processes' connections and take every slot left.
  std::vector<std::unique_ptr<pg::Connection>> hog;
  {
    Admin admin(server.url());
    for (const std::string& app : apps) {
      admin.terminate(app);
      ASSERT_TRUE(admin.wait_gone(app));
    }
  }
  for (int i = 0; i < 20; ++i) {
    auto c = pg::Connection::open(server.url());
    if (!c.ok()) break;
    hog.push_back(std::make_unique<pg::Connection>(std::move(*c)));
  }
  ASSERT_FALSE(hog.empty());
  ASSERT_FALSE(pg::Connection::open(server.url()).ok()) << "the server still had a slot";

  std::atomic<bool> released{false};
  std::mutex mutex;
  std::vector<Steady::time_point> first_success(kProcesses);
  std::vector<std::atomic<bool>> done(kProcesses);
  std::vector<int> failed_while_exhausted(kProcesses, 0);
  Steady::time_point released_at;
  // Each process serves several users at once, as a panel does.
  constexpr int kUsers = 4;
  std::vector<std::thread> writers;
  for (int w = 0; w < kProcesses * kUsers; ++w) {
    const int p = w % kProcesses;
    writers.emplace_back([&, p] {
      const auto give_up = Steady::now() + std::chrono::seconds(10);
      while (Steady::now() < give_up) {
        Result<Rows> r = Status();
        {
          RequestScope scope;
          r = dbs[static_cast<std::size_t>(p)]->write("INSERT INTO " + table + " (who) VALUES ($1)",
                                                      {p});
        }
        if (r.ok()) {
          std::lock_guard<std::mutex> lock(mutex);
          const auto i = static_cast<std::size_t>(p);
          if (!released.load()) {
            ADD_FAILURE() << "a write succeeded while the server had no slot";
          } else if (!done[i].load()) {
            first_success[i] = Steady::now();
            done[i] = true;
          }
          return;
        }
        if (!released.load()) {
          std::lock_guard<std::mutex> lock(mutex);
          ++failed_while_exhausted[static_cast<std::size_t>(p)];
        }
        std::this_thread::sleep_for(milliseconds(20));  // a user trying again
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  released_at = Steady::now();
  released = true;
  hog.clear();
  for (auto& w : writers)
    w.join();
  for (int p = 0; p < kProcesses; ++p) {
    const auto i = static_cast<std::size_t>(p);
    ASSERT_TRUE(done[i].load()) << "process " << p << " never wrote again";
    EXPECT_GT(failed_while_exhausted[i], 0) << "process " << p;
    const long long ms =
        std::chrono::duration_cast<milliseconds>(first_success[i] - released_at).count();
    EXPECT_LE(ms, 1000) << "process " << p << " wrote again only after " << ms << " ms";
    std::printf(
        "[ info ] exhausted: process %d failed %d writes, wrote again %lld ms after "
        "the slots came back\n",
        p, failed_while_exhausted[i], ms);
  }
}

}  // namespace
}  // namespace holdfast::pg
