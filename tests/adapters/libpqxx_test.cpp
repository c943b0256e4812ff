// The libpqxx adapter against Debian's libpqxx: the exception mapping without a server, and
// real faults on the PostgreSQL server of scripts/pg-test-server.sh (HOLDFAST_TEST_PG_URL;
// those tests report themselves skipped without it).
#include "holdfast/adapters/libpqxx.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <pqxx/pqxx>
#include <stdexcept>
#include <string>
#include <thread>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast::libpqxx {
namespace {

std::string server_url() {
  const char* url = std::getenv("HOLDFAST_TEST_PG_URL");
  return url != nullptr ? std::string(url) : std::string();
}

#define REQUIRE_PG_SERVER()                                                              \
  do {                                                                                   \
    if (server_url().empty()) {                                                          \
      GTEST_SKIP() << "SKIPPED: no PostgreSQL test server (HOLDFAST_TEST_PG_URL is not " \
                      "set). Run `make test` or scripts/run-tests.sh.";                  \
    }                                                                                    \
  } while (0)

// A table name no other test process uses.
std::string unique(const char* prefix) {
  static std::atomic<int> n{0};
  return std::string(prefix) + "_" + std::to_string(::getpid()) + "_" + std::to_string(++n);
}

// --- The mapping (no server) ----------------------------------------------------------

TEST(LibpqxxStatus, ASqlErrorIsClassifiedByItsSqlstate) {
  const Status s = to_status(pqxx::sql_error("ERROR:  deadlock detected\n", "UPDATE", "40P01"));
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_EQ(s.sqlstate(), "40P01");
  EXPECT_EQ(s.fault().scope, RetryScope::kTransaction);
  EXPECT_EQ(s.message(), "ERROR:  deadlock detected");

  const Status unique_violation = to_status(pqxx::unique_violation("dup", "INSERT", "23505"));
  EXPECT_EQ(unique_violation.code(), Code::kAlreadyExists);
  EXPECT_FALSE(unique_violation.fault().transient());
}

TEST(LibpqxxStatus, TheRollbackFamilyWithoutASqlstateIsClassifiedByItsType) {
  EXPECT_EQ(to_status(pqxx::serialization_failure("x")).sqlstate(), "40001");
  EXPECT_EQ(to_status(pqxx::deadlock_detected("x")).sqlstate(), "40P01");
  EXPECT_EQ(to_status(pqxx::transaction_rollback("x")).code(), Code::kAborted);
  EXPECT_EQ(to_status(pqxx::statement_completion_unknown("x")).fault().outcome, Outcome::kUnknown);
}

TEST(LibpqxxStatus, ALostConnectionAndACommitInDoubtHaveAnUnknownOutcome) {
  const Status lost = to_status(pqxx::broken_connection("server closed the connection"));
  EXPECT_EQ(lost.fault().scope, RetryScope::kReconnect);
  EXPECT_EQ(lost.fault().outcome, Outcome::kUnknown);
  EXPECT_EQ(lost.code(), Code::kUnavailable);

  const Status doubt = to_status(pqxx::in_doubt_error("connection lost while committing"));
  EXPECT_EQ(doubt.fault().outcome, Outcome::kUnknown);
  EXPECT_EQ(doubt.txn_state(), TxnState::kUnknown);

  const Status refused = to_status(pqxx::too_many_connections("too many"));
  EXPECT_EQ(refused.sqlstate(), "53300");
  EXPECT_EQ(refused.fault().outcome, Outcome::kNotApplied);
}

TEST(LibpqxxStatus, LibpqxxsLogicErrorsArePermanentAndOtherExceptionsAreNotItsOwn) {
  EXPECT_EQ(to_status(pqxx::usage_error("x")).code(), Code::kFailedPrecondition);
  EXPECT_EQ(to_status(pqxx::conversion_error("x")).code(), Code::kInvalidArgument);
  EXPECT_FALSE(to_status(pqxx::conversion_error("x")).fault().transient());
  EXPECT_TRUE(to_status(std::runtime_error("mine")).ok());
}

// --- Real faults on a real server -----------------------------------------------------

class LibpqxxAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_PG_SERVER();
    admin_.emplace(server_url());
    pqxx::nontransaction w(*admin_);
    w.exec("CREATE TABLE " + counter_ + " (id int PRIMARY KEY, v bigint NOT NULL)");
    w.exec("INSERT INTO " + counter_ + " VALUES (1, 0)");
    w.exec("CREATE TABLE " + log_ + " (n int NOT NULL)");
  }
  void TearDown() override {
    if (!admin_) return;
    pqxx::nontransaction w(*admin_);
    w.exec("DROP TABLE IF EXISTS " + counter_);
    w.exec("DROP TABLE IF EXISTS " + log_);
  }

  long long scalar(const std::string& sql) {
    pqxx::nontransaction w(*admin_);
    return w.exec1(sql)[0].as<long long>();
  }

  // Terminates backend `pid` and waits (really) until it is gone.
  void terminate(int pid) {
    pqxx::nontransaction w(*admin_);
    ASSERT_TRUE(w.exec1("SELECT pg_terminate_backend(" + std::to_string(pid) + ")")[0].as<bool>());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      if (w.exec1("SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(pid))[0]
              .as<int>() == 0) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "backend " << pid << " still there";
  }

  std::optional<pqxx::connection> admin_;
  std::string counter_ = unique("hf_pqxx_counter");
  std::string log_ = unique("hf_pqxx_log");
};

using Serializable = pqxx::transaction<pqxx::serializable>;

// Attempt 1 reads the counter, then a second SERIALIZABLE transaction on another connection
// updates and commits it, then attempt 1 updates it too: 40001 for real.
TEST_F(LibpqxxAdapter, ASerializationFailureReRunsARerunnableTransactionAndAppliesItOnce) {
  pqxx::connection conn(server_url());
  pqxx::connection other(server_url());
  int runs = 0;
  RequestScope request;
  RetryStats stats;
  Result<long long> seen = retry<Serializable>(
      RetryPolicy(), Operation::transaction(/*rerunnable=*/true, "counter.add"), conn,
      [&](Serializable& w) {
        ++runs;
        const auto v = w.exec1("SELECT v FROM " + counter_ + " WHERE id = 1")[0].as<long long>();
        if (runs == 1) {
          Serializable o(other);
          o.exec("UPDATE " + counter_ + " SET v = v + 100 WHERE id = 1");
          o.commit();
        }
        w.exec("UPDATE " + counter_ + " SET v = v + 1 WHERE id = 1");
        w.exec("INSERT INTO " + log_ + " VALUES (1)");
        return v;
      },
      &stats);

  ASSERT_TRUE(seen.ok()) << seen.status().to_string();
  EXPECT_EQ(*seen, 100);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(stats.attempts, 2);
  EXPECT_EQ(scalar("SELECT v FROM " + counter_ + " WHERE id = 1"), 101);
  EXPECT_EQ(scalar("SELECT count(*) FROM " + log_), 1);
}

TEST_F(LibpqxxAdapter, ASerializationFailureDoesNotReRunATransactionNotDeclaredRerunnable) {
  pqxx::connection conn(server_url());
  pqxx::connection other(server_url());
  int runs = 0;
  Shield shield("pqxx");
  RequestScope request;
  Result<void> r =
      run<Serializable>(shield, Operation::transaction(/*rerunnable=*/false, "counter.add"), conn,
                        [&](Serializable& w) {
                          ++runs;
                          w.exec("SELECT v FROM " + counter_ + " WHERE id = 1");
                          if (runs == 1) {
                            Serializable o(other);
                            o.exec("UPDATE " + counter_ + " SET v = v + 100 WHERE id = 1");
                            o.commit();
                          }
                          w.exec("UPDATE " + counter_ + " SET v = v + 1 WHERE id = 1");
                        });

  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlstate(), "40001") << r.status().to_string();
  EXPECT_EQ(r.status().code(), Code::kAborted);
  EXPECT_EQ(r.status().stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(r.status().txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(scalar("SELECT v FROM " + counter_ + " WHERE id = 1"), 100);
}

TEST_F(LibpqxxAdapter, ATerminatedBackendIsALostConnectionAndANonIdempotentWriteIsNotReRun) {
  pqxx::connection conn(server_url());
  const int pid = conn.backendpid();
  int runs = 0;
  Shield shield("pqxx");
  RequestScope request;
  Result<void> r = run(shield, Operation::write("log.append"), conn, [&](pqxx::work& w) {
    ++runs;
    w.exec("INSERT INTO " + log_ + " VALUES (1)");
    terminate(pid);
    w.exec("INSERT INTO " + log_ + " VALUES (2)");
  });

  ASSERT_FALSE(r.ok());
  const Status& s = r.status();
  EXPECT_EQ(s.fault().scope, RetryScope::kReconnect) << s.to_string();
  EXPECT_EQ(s.fault().outcome, Outcome::kUnknown);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);
  EXPECT_EQ(s.txn_state(), TxnState::kUnknown);
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(conn.is_open()) << "the caller is told to reconnect";
  EXPECT_EQ(scalar("SELECT count(*) FROM " + log_), 0);  // never committed

  // The caller reconnects and calls again.
  pqxx::connection again(server_url());
  Result<void> retried = run(shield, Operation::write("log.append"), again,
                             [&](pqxx::work& w) { w.exec("INSERT INTO " + log_ + " VALUES (3)"); });
  ASSERT_TRUE(retried.ok()) << retried.status().to_string();
  EXPECT_EQ(scalar("SELECT count(*) FROM " + log_), 1);
}

TEST_F(LibpqxxAdapter, AReadOnATerminatedBackendStopsSoTheCallerCanReconnect) {
  pqxx::connection conn(server_url());
  const int pid = conn.backendpid();
  int runs = 0;
  RetryStats stats;
  Result<long long> r = retry(
      RetryPolicy(), Operation::read("counter.get"), conn,
      [&](pqxx::work& w) {
        ++runs;
        if (runs == 1) terminate(pid);
        return w.exec1("SELECT v FROM " + counter_ + " WHERE id = 1")[0].as<long long>();
      },
      &stats);

  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().fault().scope, RetryScope::kReconnect) << r.status().to_string();
  EXPECT_EQ(r.status().stop_reason(), StopReason::kPermanent);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(stats.attempts, 1);
}

TEST_F(LibpqxxAdapter, AnErrorStatusFromTheFunctionAbortsAndOtherExceptionsPropagate) {
  pqxx::connection conn(server_url());
  Result<void> r = retry(RetryPolicy(), Operation::write(), conn, [&](pqxx::work& w) -> Status {
    w.exec("INSERT INTO " + log_ + " VALUES (1)");
    return Status(Code::kFailedPrecondition, "not today");
  });
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_THROW((void)retry(RetryPolicy(), Operation::write(), conn,
                           [&](pqxx::work& w) {
                             w.exec("INSERT INTO " + log_ + " VALUES (1)");
                             throw std::logic_error("mine");
                           }),
               std::logic_error);
  EXPECT_EQ(scalar("SELECT count(*) FROM " + log_), 0);
}

}  // namespace
}  // namespace holdfast::libpqxx
