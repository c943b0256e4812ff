// holdfast::asio::pg::Client's transactions of several statements against a real server:
// all or nothing, a failed statement fails the transaction, the Client's own BEGIN and COMMIT,
// a re-runnable function run again after its connection was lost (and any other not), a COMMIT
// in doubt resolved (FAULTS.md: the backend terminated during COMMIT), and a keyed transaction
// whose function runs once for its key.
#include <thread>

#include "asio_pg_test_support.hpp"

namespace {

using namespace holdfast::asio_pg_test;
using holdfast::Status;
using holdfast::TxnState;
using holdfast::pg::TransactionOptions;
using holdfast::pg::TransactionReport;
using Tx = Client<>::Transaction;
template <class T>
using Awaitable = net::awaitable<T>;

class AsioPgTransaction : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = server_url();
    if (url_.empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_URL is not set";
    admin_.emplace(url_);
    table_ = unique("asio_tx");
    fn_ = unique("asio_slow_commit");
    app_ = unique("asio_tx_app");
    admin_->exec("CREATE TABLE " + table_ + " (id bigserial PRIMARY KEY, note text NOT NULL)");
    admin_->exec(
        "CREATE TABLE IF NOT EXISTS holdfast_idempotency (key text PRIMARY KEY, result text, "
        "created_at timestamptz NOT NULL DEFAULT now())");
    make_commit_slow(*admin_, table_, fn_);
  }
  void TearDown() override {
    if (!admin_) return;
    admin_->exec("DROP TABLE IF EXISTS " + table_);
    admin_->exec("DROP FUNCTION IF EXISTS " + fn_ + "()");
  }
  long long rows() { return admin_->count("SELECT count(*) FROM " + table_); }
  ClientOptions options() {
    ClientOptions o = options_for(url_);
    o.connect.application_name = app_;
    return o;
  }

  // Terminates the Client's backend once it is in COMMIT and waiting for `wait_event`.
  std::thread kill_during_commit(const std::string& wait_event) {
    return holdfast::pgtest::kill_during_commit(url_, app_, wait_event);
  }

  std::string url_;
  std::optional<Admin> admin_;
  std::string table_;
  std::string fn_;
  std::string app_;
};

TEST_F(AsioPgTransaction, StatementsCommitTogetherOrNotAtAll) {
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), options()).value();
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1) RETURNING id";
    const Param a[] = {Param("a")};
    const Param b[] = {Param("b")};
    RequestContext request;
    TransactionOptions t;

    // Two inserts and what the function makes of them: committed together, and the request
    // knows where its write is (its later reads may go to a standby that has it).
    Result<long long> made = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<long long>> {
          Result<Rows> first = co_await tx.query(insert, a);
          if (!first.ok()) co_return first.status();
          Result<Rows> second = co_await tx.query(insert, b);
          if (!second.ok()) co_return second.status();
          Result<Rows> n = co_await tx.query("SELECT count(*) FROM " + table_);
          if (!n.ok()) co_return n.status();
          co_return std::stoll(std::string(n->text(0, 0)));
        },
        t, net::use_awaitable);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    if (made.ok()) {
      EXPECT_EQ(*made, 2);  // the transaction saw its own first insert
    }
    EXPECT_FALSE(request.position().primary_only);
    EXPECT_GT(request.position().value, 0u);

    // The function's own error rolls back what it did, and is the call's answer as it is.
    Result<long long> refused = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<long long>> {
          Result<Rows> first = co_await tx.query(insert, a);
          if (!first.ok()) co_return first.status();
          co_return Status(Code::kFailedPrecondition, "the game is full");
        },
        t, net::use_awaitable);
    EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
    EXPECT_EQ(refused.status().message(), "the game is full");

    // A failed statement fails the transaction even when the function goes on and says OK.
    Result<long long> ignored = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<long long>> {
          (void)co_await tx.query(insert, a);
          Result<Rows> bad = co_await tx.query("SELECT 1 / 0");
          EXPECT_EQ(bad.status().sqlstate(), "22012");
          Result<Rows> after = co_await tx.query(insert, b);  // not sent: the same failure
          EXPECT_EQ(after.status().sqlstate(), "22012");
          co_return 0;
        },
        t, net::use_awaitable);
    EXPECT_FALSE(ignored.ok());
    EXPECT_EQ(ignored.status().sqlstate(), "22012");
    EXPECT_EQ(ignored.status().txn_state(), TxnState::kRolledBack);

    // The Client begins and ends the transaction: a COMMIT of the function's is refused.
    Result<long long> own_commit = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<long long>> {
          (void)co_await tx.query(insert, a);
          Result<Rows> commit = co_await tx.query("COMMIT");
          if (!commit.ok()) co_return commit.status();
          co_return 0;
        },
        t, net::use_awaitable);
    EXPECT_EQ(own_commit.status().code(), Code::kInvalidArgument);

    // A function that throws: an internal error, rolled back, its connection given back.
    Result<long long> threw = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<long long>> {
          (void)co_await tx.query(insert, a);
          throw std::runtime_error("a bug in the function");
        },
        t, net::use_awaitable);
    EXPECT_EQ(threw.status().code(), Code::kInternal);
    EXPECT_NE(threw.status().message().find("a bug in the function"), std::string_view::npos);
    EXPECT_LE(client->open_connections(), 4u);

    EXPECT_EQ(rows(), 2);  // only the first transaction's
  });
}

TEST_F(AsioPgTransaction, OnlyARerunnableFunctionRunsAgainAfterItsConnectionIsLost) {
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), options()).value();
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1)";
    const Param paid[] = {Param("paid")};
    // The first run's connection is terminated after its insert, before COMMIT: the server
    // rolls it back, so nothing of it was applied.
    auto fn = [&](TransactionReport& report) {
      return [&](Tx& tx) -> Awaitable<Result<int>> {
        Result<Rows> r = co_await tx.query(insert, paid);
        if (!r.ok()) co_return r.status();
        if (report.runs == 1) {
          r = co_await tx.query("SELECT pg_terminate_backend(pg_backend_pid())");
          if (!r.ok()) co_return r.status();
        }
        co_return 1;
      };
    };
    RequestContext request;
    TransactionReport once_only;
    TransactionOptions plain;
    plain.report = &once_only;
    Result<int> not_again =
        co_await client->async_transaction(request, fn(once_only), plain, net::use_awaitable);
    EXPECT_FALSE(not_again.ok());
    EXPECT_EQ(not_again.status().fault().outcome, Outcome::kNotApplied);
    EXPECT_EQ(not_again.status().stop_reason(), StopReason::kNotSafeToRepeat);
    EXPECT_EQ(once_only.runs, 1);
    EXPECT_EQ(rows(), 0);

    TransactionReport twice;
    TransactionOptions rerunnable;
    rerunnable.operation = Operation::transaction(true, "t.pay");
    rerunnable.report = &twice;
    Result<int> again =
        co_await client->async_transaction(request, fn(twice), rerunnable, net::use_awaitable);
    EXPECT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(twice.runs, 2);
    EXPECT_EQ(rows(), 1);
  });
}

TEST_F(AsioPgTransaction, ACommitKilledBeforeItCommittedIsResolvedAsRolledBack) {
  std::thread killer = kill_during_commit("PgSleep");
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), options()).value();
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ('paid')";
    RequestContext request;
    TransactionReport report;
    TransactionOptions t;
    t.operation = Operation::transaction(true, "t.pay");
    t.report = &report;
    Result<int> paid = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<int>> {
          if (report.runs == 1) {
            Result<Rows> slow = co_await tx.query("SET LOCAL hf.slow_commit = 'on'");
            if (!slow.ok()) co_return slow.status();
          }
          Result<Rows> r = co_await tx.query(insert);
          if (!r.ok()) co_return r.status();
          co_return 1;
        },
        t, net::use_awaitable);
    // Resolved as not committed, so the re-runnable function ran again: applied once.
    EXPECT_TRUE(paid.ok()) << paid.status().to_string();
    EXPECT_EQ(report.commits_in_doubt, 1);
    EXPECT_EQ(report.resolution, TxnState::kRolledBack);
    EXPECT_EQ(report.runs, 2);
  });
  killer.join();
  EXPECT_EQ(rows(), 1);
}

// Its backend says, before it goes, that the wait ended after the local commit: resolved as
// committed on the primary, and answered as unconfirmed (no standby may have it: ADR 0053);
// the request's reads go to the primary.
TEST_F(AsioPgTransaction, ACommitKilledWhileItWaitsForTheSynchronousStandbyIsNeverConfirmed) {
  if (admin_->exec("SHOW synchronous_standby_names").text(0, 0).empty()) {
    GTEST_SKIP() << "SKIPPED: this server has no synchronous_standby_names, so a COMMIT cannot "
                    "be made to wait after committing locally (scripts/pg-test-server.sh sets "
                    "one)";
  }
  std::thread killer = kill_during_commit("SyncRep");
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), options()).value();
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ('paid')";
    RequestContext request;
    TransactionReport report;
    TransactionOptions t;
    t.report = &report;
    Result<int> paid = co_await client->async_transaction(
        request,
        [&](Tx& tx) -> Awaitable<Result<int>> {
          // Waits for the (absent) synchronous standby after the local commit.
          Result<Rows> sync = co_await tx.query("SET LOCAL synchronous_commit = on");
          if (!sync.ok()) co_return sync.status();
          Result<Rows> r = co_await tx.query(insert);
          if (!r.ok()) co_return r.status();
          co_return 1;
        },
        t, net::use_awaitable);
    EXPECT_FALSE(paid.ok());
    EXPECT_EQ(paid.status().txn_state(), TxnState::kUnknown) << paid.status().to_string();
    EXPECT_EQ(paid.status().fault().outcome, holdfast::Outcome::kUnknown);
    EXPECT_TRUE(request.position().primary_only);
    EXPECT_EQ(report.commits_in_doubt, 1);
    EXPECT_EQ(report.resolution, TxnState::kCommitted);
    EXPECT_EQ(report.runs, 1);
  });
  killer.join();
  EXPECT_EQ(rows(), 1);
}

// What a caller is told of a COMMIT that committed on the primary alone: not confirmed.
void expect_unconfirmed(const Status& s) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.txn_state(), TxnState::kUnknown) << s.to_string();
  EXPECT_EQ(s.fault().outcome, holdfast::Outcome::kUnknown) << s.to_string();
  EXPECT_NE(s.message().find("synchronous standby"), std::string_view::npos) << s.to_string();
}

// With synchronous replication and no synchronous standby answering, every COMMIT waits after
// it committed on the primary. At the deadline the Client cancels it, and PostgreSQL answers
// the COMMIT with a WARNING: committed locally, perhaps on no standby. A write, a transaction
// and a keyed transaction answered so are never confirmed to their caller, nor is a repeat of
// that key.
TEST_F(AsioPgTransaction, ACommitWhoseWaitForTheSynchronousStandbyIsCancelledIsNeverConfirmed) {
  if (admin_->exec("SHOW synchronous_standby_names").text(0, 0).empty()) {
    GTEST_SKIP() << "SKIPPED: this server has no synchronous_standby_names (scripts/"
                    "pg-test-server.sh names one that never connects)";
  }
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options();
    o.connect.settings = {{"synchronous_commit", "on"}};  // every COMMIT waits for the standby
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1)";
    const Param paid[] = {Param("paid")};

    RequestContext write_request(800ms, holdfast::Clock::system());
    Result<Rows> written =
        co_await client->async_write(write_request, "t.pay", insert, paid, net::use_awaitable);
    expect_unconfirmed(written.status());

    RequestContext tx_request(800ms, holdfast::Clock::system());
    Result<int> in_tx = co_await client->async_transaction(
        tx_request,
        [&](Tx& tx) -> Awaitable<Result<int>> {
          Result<Rows> r = co_await tx.query(insert, paid);
          if (!r.ok()) co_return r.status();
          co_return 1;
        },
        TransactionOptions{}, net::use_awaitable);
    expect_unconfirmed(in_tx.status());

    TransactionOptions t;
    t.operation = holdfast::Operation::transaction(true, "t.pay");
    const std::string key = unique("pay");
    for (int call = 0; call < 2; ++call) {
      // The repeat finds the key and is not confirmed either: the standby may still lack it.
      RequestContext once_request(800ms, holdfast::Clock::system());
      Result<KeyedResult> keyed = co_await client->async_once(
          once_request, key,
          [&](Tx& tx) -> Awaitable<Result<std::string>> {
            Result<Rows> r = co_await tx.query(insert, paid);
            if (!r.ok()) co_return r.status();
            co_return std::string("paid");
          },
          t, net::use_awaitable);
      expect_unconfirmed(keyed.status());
    }
  });
  EXPECT_EQ(rows(), 3);  // each committed on the primary, and none was confirmed
}

TEST_F(AsioPgTransaction, AKeyedFunctionRunsOnceForItsKey) {
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), options()).value();
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1) RETURNING id";
    const Param payment[] = {Param("payment")};
    const Param receipt[] = {Param("receipt")};
    int calls = 0;
    auto pay = [&](Tx& tx) -> Awaitable<Result<std::string>> {
      ++calls;
      Result<Rows> paid = co_await tx.query(insert, payment);
      if (!paid.ok()) co_return paid.status();
      Result<Rows> noted = co_await tx.query(insert, receipt);
      if (!noted.ok()) co_return noted.status();
      co_return std::string(paid->text(0, 0));
    };
    RequestContext request;
    TransactionOptions t;
    t.operation = Operation::transaction(true, "t.pay");
    const std::string key = unique("pay");
    Result<KeyedResult> first =
        co_await client->async_once(request, key, pay, t, net::use_awaitable);
    Result<KeyedResult> second =
        co_await client->async_once(request, key, pay, t, net::use_awaitable);
    EXPECT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_TRUE(second.ok()) << second.status().to_string();
    if (first.ok() && second.ok()) {
      EXPECT_FALSE(first->replayed);
      EXPECT_TRUE(second->replayed);
      EXPECT_EQ(second->result, first->result);  // the first call's payment id
    }
    EXPECT_EQ(calls, 1);
    // A function that fails records nothing: the key is free for the next call.
    const std::string other = unique("pay");
    Result<KeyedResult> failed = co_await client->async_once(
        request, other,
        [&](Tx& tx) -> Awaitable<Result<std::string>> {
          (void)co_await tx.query(insert, payment);
          co_return Status(Code::kFailedPrecondition, "card declined");
        },
        t, net::use_awaitable);
    EXPECT_EQ(failed.status().code(), Code::kFailedPrecondition);
    Result<KeyedResult> later =
        co_await client->async_once(request, other, pay, t, net::use_awaitable);
    EXPECT_TRUE(later.ok() && !later->replayed);
  });
  EXPECT_EQ(rows(), 4);  // two calls' payment and receipt each
}

}  // namespace

// Every call that begins a transaction tells the server what its deadline leaves, as
// pg::Database does: the server then ends a statement at the deadline by itself, even when
// the Client's cancel cannot reach it (a cut network), so that it holds no lock long after
// its caller has gone. Read back inside the call: a write, and a transaction's statements.
TEST_F(AsioPgTransaction, TheServerIsToldTheDeadlineAsTheStatementTimeout) {
  const std::string timeout_ms =
      "SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'statement_timeout'";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), options()).value();
    RequestContext write_request(2s, holdfast::Clock::system());
    Result<Rows> in_write =
        co_await client->async_write(write_request, "timeout", timeout_ms, {}, net::use_awaitable);
    EXPECT_TRUE(in_write.ok()) << in_write.status().to_string();
    if (in_write.ok()) {
      const long long ms = std::stoll(std::string(in_write->text(0, 0)));
      EXPECT_GE(ms, 1);
      EXPECT_LE(ms, 2000);
    }

    RequestContext tx_request(3s, holdfast::Clock::system());
    Result<long long> in_tx = co_await client->async_transaction(
        tx_request,
        [&](Tx& tx) -> Awaitable<Result<long long>> {
          Result<Rows> first = co_await tx.query(timeout_ms);
          if (!first.ok()) co_return first.status();
          Result<Rows> second = co_await tx.query(timeout_ms);  // SET LOCAL: still there
          if (!second.ok()) co_return second.status();
          EXPECT_EQ(first->text(0, 0), second->text(0, 0));
          co_return std::stoll(std::string(second->text(0, 0)));
        },
        TransactionOptions{}, net::use_awaitable);
    EXPECT_TRUE(in_tx.ok()) << in_tx.status().to_string();
    if (in_tx.ok()) {
      EXPECT_GE(*in_tx, 1);
      EXPECT_LE(*in_tx, 3000);
    }

    // Local to each call's transaction: the next call on the connection has its own.
    RequestContext later(4s, holdfast::Clock::system());
    Result<Rows> next =
        co_await client->async_write(later, "timeout", timeout_ms, {}, net::use_awaitable);
    EXPECT_TRUE(next.ok()) << next.status().to_string();
    if (next.ok()) {
      EXPECT_GT(std::stoll(std::string(next->text(0, 0))), 2000);
    }
  });
}

// A read on the primary tells the server its deadline too, in the same round trip: the read
// and its setting are prepared statements of the connection (both prepared by the first read,
// each Parse just before its statement), and the setting lasts only for the read's own
// implicit transaction.
// A transaction's statements are prepared statements of its connection, as reads and writes
// are: parsed the first time the connection runs them, then executed by name.
TEST_F(AsioPgTransaction, ATransactionsStatementsArePreparedStatementsOfTheirConnection) {
  const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1)";
  const std::string count =
      "SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE name LIKE 'holdfast_loop_%' "
      "AND statement IN ($1, $2)";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options();
    o.max_connections = 1;  // every transaction on one session
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), std::move(o)).value();
    const Param note[] = {Param("paid")};
    const Param texts[] = {Param(insert), Param(count)};
    for (int run = 1; run <= 2; ++run) {
      RequestContext request;
      Result<std::string> seen = co_await client->async_transaction(
          request,
          [&](Tx& tx) -> Awaitable<Result<std::string>> {
            Result<Rows> paid = co_await tx.query(insert, note);  // with BEGIN
            if (!paid.ok()) co_return paid.status();
            Result<Rows> counted = co_await tx.query(count, texts);  // alone
            if (!counted.ok()) co_return counted.status();
            co_return std::string(counted->text(0, 0));
          },
          TransactionOptions{}, net::use_awaitable);
      EXPECT_TRUE(seen.ok()) << seen.status().to_string();
      if (seen.ok()) {
        EXPECT_EQ(*seen, "2") << "run " << run << ": both statements, prepared once";
      }
    }
  });
  EXPECT_EQ(rows(), 2);
}

TEST_F(AsioPgTransaction, APrimaryReadIsPreparedAndCarriesItsDeadlineAsTheStatementTimeout) {
  const std::string timeout_and_prepared =
      "SELECT current_setting('statement_timeout', false), (SELECT count(*) FROM "
      "pg_catalog.pg_prepared_statements WHERE name LIKE 'holdfast_loop_%')";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options();
    o.max_connections = 1;  // every read on one session
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), std::move(o)).value();
    const auto read = [&](holdfast::Duration window) -> net::awaitable<Result<Rows>> {
      RequestContext request(window, holdfast::Clock::system());
      co_return co_await client->async_read(request, "timeout", timeout_and_prepared, {},
                                            net::use_awaitable);
    };
    Result<Rows> first = co_await read(2s);
    EXPECT_TRUE(first.ok()) << first.status().to_string();
    if (!first.ok()) co_return;
    // current_setting() shows the unit: "1999ms", or "2s" when the whole seconds were left.
    const std::string shown(first->text(0, 0));
    EXPECT_TRUE(shown.ends_with("ms") || shown == "2s") << shown;
    if (shown.ends_with("ms")) {
      const long long ms = std::stoll(shown);
      EXPECT_GE(ms, 1);
      EXPECT_LE(ms, 2000);
    }
    EXPECT_EQ(first->text(0, 1), "2") << "the read and its setting, prepared";

    Result<Rows> second = co_await read(5s);  // executed by name now
    EXPECT_TRUE(second.ok()) << second.status().to_string();
    if (!second.ok()) co_return;
    EXPECT_NE(second->text(0, 0), first->text(0, 0)) << "each read its own deadline";
    EXPECT_EQ(second->text(0, 1), "2");

    // A window too long to be a statement_timeout sends none: the session's own is there,
    // so no earlier read's was left behind.
    Result<Rows> unbounded = co_await read(std::chrono::hours(24 * 30));
    EXPECT_TRUE(unbounded.ok()) << unbounded.status().to_string();
    if (!unbounded.ok()) co_return;
    EXPECT_EQ(unbounded->text(0, 0), "0");
  });
}
