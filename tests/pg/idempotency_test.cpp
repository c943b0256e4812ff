// Idempotency keys: a write recorded with its key in one transaction is never applied
// twice, however often it is retried -- also while backends are being terminated.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/core/window.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

class PgIdempotency : public testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) return;
    admin_ = std::make_unique<Admin>(server_url());
    keys_ = unique("hf_keys");
    payments_ = unique("hf_payments");
    app_ = unique("hf_payer");
    // No unique constraint on the payments: only the key table keeps them single.
    admin_->exec("CREATE TABLE " + payments_ + " (id serial PRIMARY KEY, key text, amount int)");
  }
  void TearDown() override {
    if (!admin_) return;
    admin_->exec("DROP TABLE IF EXISTS " + payments_);
    admin_->exec("DROP TABLE IF EXISTS " + keys_);
  }
  DatabaseOptions options() {
    DatabaseOptions o;
    o.url = server_url();
    o.application_name = app_;
    o.idempotency_table = keys_;
    return o;
  }
  Result<std::string> pay(Transaction& tx, const std::string& key, int amount) {
    auto r = tx.query("INSERT INTO " + payments_ + " (key, amount) VALUES ($1, $2) RETURNING id",
                      {key, amount});
    if (!r.ok()) return r.status();
    return std::string(r->text(0, 0));
  }

  std::unique_ptr<Admin> admin_;
  std::string keys_;
  std::string payments_;
  std::string app_;
};

TEST_F(PgIdempotency, ASecondCallWithTheSameKeyReturnsTheFirstResultWithoutRunning) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  ASSERT_TRUE(db.create_idempotency_table().ok());
  ASSERT_TRUE(db.create_idempotency_table().ok());  // idempotent itself
  int runs = 0;
  const auto payment = [&](Transaction& tx) {
    ++runs;
    return pay(tx, "order-1", 25);
  };
  auto first = db.once("order-1", payment);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(first->replayed);
  auto again = db.once("order-1", payment);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->result, first->result);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + payments_), 1);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + keys_ + " WHERE created_at IS NOT NULL"), 1);
}

TEST_F(PgIdempotency, AFailedWriteLeavesNoKeySoItCanBeTriedAgain) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options());
  ASSERT_TRUE(db.create_idempotency_table().ok());
  auto failed = db.once("order-2", [&](Transaction&) -> Status {
    return Status(Code::kFailedPrecondition, "card declined");
  });
  EXPECT_EQ(failed.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + keys_), 0);
  auto ok = db.once("order-2", [&](Transaction& tx) { return pay(tx, "order-2", 5); });
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_FALSE(ok->replayed);
}

TEST_F(PgIdempotency, ConcurrentPaymentsWhileBackendsAreTerminatedEndWithExactlyNRows) {
  HOLDFAST_REQUIRE_PG_SERVER();
  constexpr int kPayments = 40;
  constexpr int kWorkers = 6;
  DatabaseOptions o = options();
  o.write_connections = kWorkers;
  Database db(o);
  ASSERT_TRUE(db.create_idempotency_table().ok());

  std::atomic<bool> done{false};
  std::atomic<long long> terminated{0};
  std::thread killer([&] {
    Admin k(server_url());
    // A storm of at most 4 s, so a slow machine still finishes.
    const auto storm_end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
    while (!done && std::chrono::steady_clock::now() < storm_end) {
      terminated += k.terminate(app_);
      // Often enough that transactions die at every step (connect, BEGIN, the write,
      // COMMIT), rarely enough that each payment gets through within a few windows.
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
  });

  std::atomic<int> next{0};
  std::atomic<int> calls{0};
  std::atomic<int> failed_calls{0};
  std::atomic<int> gave_up{0};
  std::atomic<int> replayed{0};
  std::mutex last_failure_mutex;
  std::string last_failure;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      for (int i = next++; i < kPayments; i = next++) {
        const std::string key = "payment-" + std::to_string(i);
        bool paid = false;
        // Retrying by key after any failure -- an unknown outcome included -- is safe.
        for (int call = 0; call < 30 && !paid; ++call) {
          RequestScope scope(std::chrono::seconds(3));
          ++calls;
          auto r = db.once(key, [&](Transaction& tx) { return pay(tx, key, 10); });
          paid = r.ok();
          if (!paid) {
            ++failed_calls;
            {
              std::lock_guard<std::mutex> lock(last_failure_mutex);
              last_failure = r.status().to_string();
            }
            // As a client told "busy, retry in N ms" does (the breaker answers at once while
            // it is open; calling again at once would spend the 30 calls in milliseconds).
            std::this_thread::sleep_for(r.status().retry_after());
          }
          if (paid && r->replayed) ++replayed;
        }
        if (!paid) ++gave_up;
      }
    });
  }
  for (auto& w : workers)
    w.join();
  done = true;
  killer.join();

  EXPECT_EQ(gave_up.load(), 0);
  EXPECT_GT(terminated.load(), 0);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + payments_), kPayments);
  EXPECT_EQ(admin_->count("SELECT count(DISTINCT key) FROM " + payments_), kPayments);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + keys_), kPayments);
  std::printf(
      "[ info ] %d payments: %d calls (%d failed and were called again, %d found their "
      "key recorded), %lld backends terminated; the last failure: %s\n",
      kPayments, calls.load(), failed_calls.load(), replayed.load(), terminated.load(),
      last_failure.empty() ? "none" : last_failure.c_str());
}

}  // namespace
}  // namespace holdfast::pg
