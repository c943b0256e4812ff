// A server stopped and started again, on a private server of the test's own: the breaker
// opens, no request hangs past its window, a probe closes the breaker after the restart;
// and a COMMIT in doubt that cannot be resolved is reported as unknown, never guessed.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::PrivateServer;
using pgtest::unique;

TEST(PgRestart, TheBreakerOpensWhileTheServerIsDownAndAProbeClosesItAfterTheRestart) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server(20);
  ASSERT_FALSE(server.url().empty()) << "could not start a private server";

  DatabaseOptions o;
  o.url = server.url();
  o.application_name = unique("hf_restart");
  o.shield.breaker.consecutive_failures = 3;
  o.shield.breaker.open_initial = std::chrono::milliseconds(200);
  o.shield.breaker.open_max = std::chrono::seconds(1);
  o.health_probe_interval = std::chrono::milliseconds(100);
  Database db(o);
  std::mutex mutex;
  std::vector<BreakerState> states;
  db.shield().breaker().add_listener([&](const BreakerTransition& t) {
    std::lock_guard<std::mutex> lock(mutex);
    states.push_back(t.to);
  });
  ASSERT_TRUE(db.read("SELECT 1").ok());

  ASSERT_TRUE(server.down());
  constexpr auto kWindow = std::chrono::milliseconds(1000);
  std::atomic<int> requests{0};
  std::atomic<int> failures{0};
  std::atomic<long long> slowest_ms{0};
  std::vector<std::thread> clients;
  const auto outage_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      while (std::chrono::steady_clock::now() < outage_end) {
        const auto start = std::chrono::steady_clock::now();
        Result<Rows> r = Status();
        {
          RequestScope scope(kWindow);
          r = db.read("SELECT 1");
        }
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        long long seen = slowest_ms.load();
        while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
        }
        ++requests;
        if (!r.ok()) ++failures;
      }
    });
  }
  for (auto& c : clients)
    c.join();
  EXPECT_EQ(failures.load(), requests.load());
  // The window opens at the first fault; a request may also wait for a probe inside it.
  EXPECT_LT(slowest_ms.load(), 1600) << "a request hung past its window";
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_NE(std::find(states.begin(), states.end(), BreakerState::kOpen), states.end());
  }
  const PoolStats during = db.read_pool().stats();
  // 4 clients for 2.5 s, but connects are spaced by the pool's backoff and the breaker.
  EXPECT_LT(during.connect_failures, 30u) << "reconnect storm";

  ASSERT_TRUE(server.up());
  const auto restarted = std::chrono::steady_clock::now();
  const bool back = pgtest::eventually(
      [&] {
        RequestScope scope(kWindow);
        return db.read("SELECT 1").ok();
      },
      std::chrono::seconds(8));
  ASSERT_TRUE(back);
  const double recovery = pgtest::seconds_since(restarted);
  EXPECT_TRUE(
      pgtest::eventually([&] { return db.shield().breaker().state() == BreakerState::kClosed; },
                         std::chrono::seconds(8)))
      << "breaker " << to_string(db.shield().breaker().state()) << " after: " << [&] {
           std::lock_guard<std::mutex> lock(mutex);
           std::string all;
           for (BreakerState st : states)
             all += std::string(to_string(st)) + " ";
           return all;
         }();
  EXPECT_LT(recovery, 3.0);
  std::printf(
      "[ info ] outage: %d requests, slowest %lld ms, %llu failed connects; "
      "service back %.2f s after the restart\n",
      requests.load(), slowest_ms.load(), static_cast<unsigned long long>(during.connect_failures),
      recovery);
}

TEST(PgRestart, ACommitInDoubtThatCannotBeResolvedIsReportedUnknownNotGuessed) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server(20);
  ASSERT_FALSE(server.url().empty()) << "could not start a private server";
  const std::string table = unique("hf_unknown");
  const std::string app = unique("hf_unknown");
  {
    Admin admin(server.url());
    admin.exec("CREATE TABLE " + table + " (id serial PRIMARY KEY, v text)");
  }
  DatabaseOptions o;
  o.url = server.url();
  o.application_name = app;
  Database db(o);
  std::thread stopper([&] {
    Admin watcher(server.url());
    EXPECT_TRUE(pgtest::eventually([&] {
      return watcher.count(
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                 "AND wait_event = 'SyncRep'",
                 {app}) == 1;
    }));
    // The COMMIT has committed locally and waits for a standby; now the server goes away.
    EXPECT_TRUE(server.down());
  });
  TransactionReport report;
  Status s;
  {
    RequestScope scope(std::chrono::milliseconds(500));
    s = db.transaction(
        [&](Transaction& tx) -> Status {
          if (auto r = tx.query("SET LOCAL synchronous_commit = on"); !r.ok()) return r.status();
          return tx.query("INSERT INTO " + table + " (v) VALUES ('paid')").status();
        },
        {.report = &report});
  }
  stopper.join();
  EXPECT_EQ(s.txn_state(), TxnState::kUnknown) << s.to_string();
  EXPECT_EQ(s.fault().outcome, Outcome::kUnknown);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(report.commits_in_doubt, 1);
  EXPECT_EQ(report.resolution, TxnState::kUnknown);

  // It had committed: "unknown" was the honest answer, "rolled back" would have been wrong.
  ASSERT_TRUE(server.up());
  Admin after(server.url());
  EXPECT_EQ(after.count("SELECT count(*) FROM " + table), 1);
}

}  // namespace
}  // namespace holdfast::pg
