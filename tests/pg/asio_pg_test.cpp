// holdfast::asio::pg::Client against a real server: reads, writes and keyed writes on one
// event loop, and what a frozen server (SIGSTOP) does to them: the loop keeps serving other
// work, the read gives up within its window, and a write in flight is reported as of unknown
// outcome and never sent twice. Runs on Boost.Asio (HOLDFAST_ASIO_BOOST) or standalone Asio.
#include "asio_pg_test_support.hpp"

namespace {

using namespace holdfast::asio_pg_test;

// Options that find a frozen server silent within about a second, and look for it again every
// 100 ms; reads and writes are not retried (each call is one attempt, timed by the tests).
ClientOptions silence_options(const std::string& url) {
  ClientOptions o = options_for(url);
  o.silence_after = 500ms;
  o.silence_check = 500ms;
  o.health_probe_every = 100ms;
  o.shield.reads = holdfast::RetryPolicy::no_retry();
  o.shield.writes = holdfast::RetryPolicy::no_retry();
  return o;
}

// A read on `client` that must be served (it opens a connection before a freeze).
net::awaitable<void> warm_up(Client<>& client) {
  RequestContext warm;
  Result<Rows> w = co_await client.async_read(warm, "warm", "SELECT 1", {}, net::use_awaitable);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
}

// Seconds until `call` (a write or read of `client`, "SELECT 1") is served, trying every
// 50 ms for at most `most` seconds; `most` when it never was.
template <class Call>
net::awaitable<double> seconds_until_served(net::io_context& io, Call call, double most) {
  const auto since = std::chrono::steady_clock::now();
  net::steady_timer pause(io);
  while (seconds_since(since) < most) {
    RequestContext r;
    Result<Rows> answer = co_await call(r);
    if (answer.ok()) co_return seconds_since(since);
    pause.expires_after(50ms);
    co_await pause.async_wait(net::use_awaitable);
  }
  co_return most;
}

class AsioPg : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = server_url();
    if (url_.empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_URL is not set";
    admin_.emplace(url_);
    table_ = unique("asio_pg");
    admin_->exec("CREATE TABLE " + table_ + " (id bigserial PRIMARY KEY, note text NOT NULL)");
    admin_->exec(
        "CREATE TABLE IF NOT EXISTS holdfast_idempotency (key text PRIMARY KEY, result text, "
        "created_at timestamptz NOT NULL DEFAULT now())");
  }
  void TearDown() override {
    if (admin_) admin_->exec("DROP TABLE IF EXISTS " + table_);
  }

  std::string url_;
  std::optional<Admin> admin_;
  std::string table_;
};

TEST_F(AsioPg, ReadsWritesAndKeyedWritesOnOneLoop) {
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> opened = Client<>::open(io.get_executor(), options_for(url_)).value();
    Client<>& client = *opened;
    RequestContext request;
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1) RETURNING id";
    // g++ 12 cannot keep a braced list of Params across co_await ("array used as
    // initializer"): coroutines name their parameters first.
    const Param plain[] = {Param("plain")};
    const Param keyed_note[] = {Param("keyed")};
    Result<Rows> wrote =
        co_await client.async_write(request, "t.insert", insert, plain, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();

    const std::string key = unique("key");
    Result<KeyedResult> first =
        co_await client.async_once(request, key, insert, keyed_note, net::use_awaitable);
    EXPECT_TRUE(first.ok()) << first.status().to_string();
    Result<KeyedResult> again =
        co_await client.async_once(request, key, insert, keyed_note, net::use_awaitable);
    EXPECT_TRUE(again.ok()) << again.status().to_string();
    if (first.ok() && again.ok()) {
      EXPECT_FALSE(first->replayed);
      EXPECT_TRUE(again->replayed);
      EXPECT_FALSE(first->result.empty());
      EXPECT_EQ(again->result, first->result);  // the id the first call got
    }

    const std::string count = "SELECT count(*) FROM " + table_ + " WHERE note = $1";
    Result<Rows> keyed =
        co_await client.async_read(request, "t.count", count, keyed_note, net::use_awaitable);
    EXPECT_TRUE(keyed.ok()) << keyed.status().to_string();
    if (keyed.ok()) {
      EXPECT_EQ(keyed->text(0, 0), "1");  // applied once for two calls
    }

    Result<Rows> bad = co_await client.async_read(request, "t.bad", "SELECT * FROM no_such_table",
                                                  {}, net::use_awaitable);
    EXPECT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().sqlstate(), "42P01");  // classified as the engine says: not retried
    EXPECT_LE(client.open_connections(), 4u);
  });
}

TEST_F(AsioPg, AReadIsPreparedOncePerConnectionAndNothingIsPreparedBehindATransactionPooler) {
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    // How many statements the read's own session has prepared (it counts itself when
    // prepared, and the statement_timeout's setting sent with each read is one too), on the
    // one connection the Client keeps.
    const std::string prepared_here = "SELECT count(*) FROM pg_prepared_statements";
    for (const holdfast::pg::Pooling pooling :
         {holdfast::pg::Pooling::kSession, holdfast::pg::Pooling::kTransaction}) {
      ClientOptions o = options_for(url_);
      o.max_connections = 1;
      o.pooling = pooling;
      std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
      RequestContext request;
      // A text that is not NUL-terminated where the Client keeps it: the values sent with the
      // prepare must be the call's own.
      const std::string notes = "plain keyed";
      const Param one[] = {Param(std::string_view(notes).substr(0, 5))};
      const std::string count = "SELECT count(*), $1::text FROM " + table_;
      holdfast::pg::ReadOptions read;
      read.operation = Operation::read("t.count").critical();
      for (int i = 0; i < 3; ++i) {
        Result<Rows> r = co_await client->async_read(request, count, one, read, net::use_awaitable);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        if (r.ok()) {
          EXPECT_EQ(r->text(0, 1), "plain");
        }
      }
      // A statement the server refuses is not kept: the next one is prepared under its name.
      Result<Rows> bad = co_await client->async_read(
          request, "t.bad", "SELECT * FROM no_such_table", {}, net::use_awaitable);
      EXPECT_EQ(bad.status().sqlstate(), "42P01");
      Result<Rows> n =
          co_await client->async_read(request, "t.prepared", prepared_here, {}, net::use_awaitable);
      EXPECT_TRUE(n.ok()) << n.status().to_string();
      if (n.ok()) {
        EXPECT_EQ(n->text(0, 0), pooling == holdfast::pg::Pooling::kSession ? "3" : "0");
      }
      EXPECT_EQ(client->open_connections(), 1u);
    }
  });
}

TEST_F(AsioPg, BehindAPoolerInTransactionModeTheSettingsGoWithEachTransaction) {
  // PgBouncer refuses session settings at connect: the Client sets them in each transaction
  // (pg_catalog.set_config(..., true)), so every read, write and transaction runs with them
  // and none outlives its transaction on the pooler's shared server sessions.
  Bouncer bouncer(url_);
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options_for(bouncer.url());
    o.pooling = holdfast::pg::Pooling::kTransaction;
    o.connect.settings = {{"lock_timeout", "1234ms"}, {"TimeZone", "Asia/Ho_Chi_Minh"}};
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    RequestContext request;
    const std::string settings =
        "SELECT current_setting('lock_timeout'), current_setting('TimeZone')";
    Result<Rows> read =
        co_await client->async_read(request, "t.settings", settings, {}, net::use_awaitable);
    EXPECT_TRUE(read.ok()) << read.status().to_string();
    if (read.ok()) {
      EXPECT_EQ(read->text(0, 0), "1234ms");
      EXPECT_EQ(read->text(0, 1), "Asia/Ho_Chi_Minh");
    }
    const Param note[] = {Param("bounced")};
    Result<Rows> wrote = co_await client->async_write(
        request, "t.insert",
        "INSERT INTO " + table_ + " (note) VALUES ($1) RETURNING current_setting('lock_timeout')",
        note, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();
    if (wrote.ok()) {
      EXPECT_EQ(wrote->text(0, 0), "1234ms");
    }
    holdfast::pg::TransactionOptions t;
    Result<std::string> in_tx = co_await client->async_transaction(
        request,
        [&](Client<>::Transaction& tx) -> net::awaitable<Result<std::string>> {
          (void)co_await tx.query("SELECT 1");
          Result<Rows> r = co_await tx.query(settings);  // the second statement: still set
          if (!r.ok()) co_return r.status();
          co_return std::string(r->text(0, 0));
        },
        t, net::use_awaitable);
    EXPECT_TRUE(in_tx.ok() && *in_tx == "1234ms") << in_tx.status().to_string();
    const std::string key = unique("key");
    Result<KeyedResult> keyed = co_await client->async_once(
        request, key, "SELECT current_setting('TimeZone')", {}, net::use_awaitable);
    EXPECT_TRUE(keyed.ok() && keyed->result == "Asia/Ho_Chi_Minh") << keyed.status().to_string();
  });
  // Nothing was set for the session: a plain connection through the pooler sees the defaults.
  Admin plain(bouncer.url());
  EXPECT_NE(plain.exec("SHOW lock_timeout").text(0, 0), "1234ms");
}

TEST(AsioPgRefused, ARefusingServerIsAnsweredAtOnceWithRetryAfterNotAfterTheWindow) {
  // Nothing listens on port 1 (a stopped server): after refused connects the pool waits a
  // growing backoff step, and a call meanwhile is answered at once with the refusal and when
  // to come back, as pg::Database's pool answers, instead of retrying for its whole window.
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options_for("postgresql://postgres@127.0.0.1:1/postgres");
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    for (int i = 0; i < 3; ++i) {
      RequestContext request;  // a 6 s window each
      const auto started = std::chrono::steady_clock::now();
      Result<Rows> wrote = co_await client->async_write(
          request, "t.insert", "INSERT INTO nowhere VALUES (1)", {}, net::use_awaitable);
      const auto took = std::chrono::steady_clock::now() - started;
      EXPECT_FALSE(wrote.ok());
      EXPECT_EQ(wrote.status().fault().outcome, Outcome::kNotApplied);
      // The first rides out the short waits (a restart is back within about a second), as
      // pg::Database's loop does; the later ones find the pool backing off.
      EXPECT_LT(took, i == 0 ? std::chrono::seconds(5) : std::chrono::seconds(1))
          << wrote.status().to_string();
      if (i > 0) {
        EXPECT_EQ(wrote.status().stop_reason(), StopReason::kBreakerOpen)
            << wrote.status().to_string();
        EXPECT_GT(wrote.status().retry_after(), std::chrono::milliseconds(0));
      }
    }
  });
}

TEST(AsioPgOptions, OptionsThatCanNeverWorkAreRefusedByName) {
  net::io_context io;
  ClientOptions none;
  Result<std::shared_ptr<Client<>>> a = Client<>::open(io.get_executor(), none);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("conninfo"), std::string::npos);
  ClientOptions table = options_for("postgresql://127.0.0.1/x");
  table.idempotency_table = "keys; DROP TABLE payments";
  Result<std::shared_ptr<Client<>>> b = Client<>::open(io.get_executor(), table);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("idempotency_table"), std::string::npos);
  ClientOptions zero = options_for("postgresql://127.0.0.1/x");
  zero.max_connections = 0;
  EXPECT_FALSE(Client<>::open(io.get_executor(), zero).ok());
  ClientOptions factor = options_for("postgresql://127.0.0.1/x");
  factor.slow_copy_factor = 0.5;  // faster than the primary would count as slow
  Result<std::shared_ptr<Client<>>> c = Client<>::open(io.get_executor(), factor);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("slow_copy_factor"), std::string::npos);
  ClientOptions never = options_for("postgresql://127.0.0.1/x");
  never.silence_check = 0ms;  // a check that could never answer, each read looking again
  Result<std::shared_ptr<Client<>>> d = Client<>::open(io.get_executor(), never);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("silence_check"), std::string::npos);
  ClientOptions forever = options_for("postgresql://127.0.0.1/x");
  forever.standby_wait = holdfast::Duration::max();  // past any deadline's arithmetic
  Result<std::shared_ptr<Client<>>> e = Client<>::open(io.get_executor(), forever);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("standby_wait"), std::string::npos);
  ClientOptions off = options_for("postgresql://127.0.0.1/x");
  off.slow_copy_floor = 0ms;  // ejection off: allowed
  EXPECT_TRUE(Client<>::open(io.get_executor(), off).ok());
}

// The blocking drivers' answer to a frozen server, on the loop: no thread waits for it.
TEST_F(AsioPg, AFrozenServerHoldsNoThreadAndItsCallsEndWithinTheWindow) {
  PrivateServer frozen_server;
  if (frozen_server.url().empty()) GTEST_SKIP() << "could not start a private server";
  const std::string table = unique("asio_frozen");
  {
    Admin a(frozen_server.url());
    a.exec("CREATE TABLE " + table + " (id bigserial PRIMARY KEY, note text)");
  }
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> frozen_client =
        Client<>::open(io.get_executor(), options_for(frozen_server.url())).value();
    std::shared_ptr<Client<>> healthy_client =
        Client<>::open(io.get_executor(), options_for(url_)).value();
    Client<>& frozen = *frozen_client;
    Client<>& healthy = *healthy_client;
    // Warm: one connection open before the freeze.
    RequestContext warm;
    Result<Rows> w = co_await frozen.async_read(warm, "warm", "SELECT 1", {}, net::use_awaitable);
    EXPECT_TRUE(w.ok()) << w.status().to_string();

    Freeze freeze(frozen_server.postmaster_pid());
    EXPECT_TRUE(freeze.frozen());

    // A write (on the connection opened before the freeze: it is sent) and a read (on a new
    // connection: the frozen server never finishes its handshake) start on the frozen server,
    // each with a 1.5 s window. While they wait, the same single-threaded loop serves reads
    // from the healthy server.
    std::optional<Result<Rows>> read;
    std::optional<Result<Rows>> write;
    RequestContext read_request(1500ms);
    RequestContext write_request(1500ms);
    const auto started = std::chrono::steady_clock::now();
    const std::string insert = "INSERT INTO " + table + " (note) VALUES ($1)";
    const Param note[] = {Param("x")};
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          write = co_await frozen.async_write(write_request, "frozen.write", insert, note,
                                              net::use_awaitable);
        },
        net::detached);
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          read = co_await frozen.async_read(read_request, "frozen.read", "SELECT 1", {},
                                            net::use_awaitable);
        },
        net::detached);

    int healthy_reads = 0;
    while (!read.has_value() || !write.has_value()) {
      RequestContext r;
      Result<Rows> h =
          co_await healthy.async_read(r, "healthy", "SELECT 1", {}, net::use_awaitable);
      EXPECT_TRUE(h.ok()) << h.status().to_string();
      ++healthy_reads;
    }
    const double took = seconds_since(started);
    // The loop was never blocked: the healthy server was read all along, on the same thread.
    EXPECT_GT(healthy_reads, 10);
    EXPECT_LT(took, 1.5 + 0.35 + 0.5);  // the window, the cancel's grace, and slack

    EXPECT_FALSE(read->ok());
    EXPECT_FALSE(write->ok());
    // The write was sent and never answered: its outcome is unknown, so it is not repeated.
    EXPECT_EQ(write->status().fault().outcome, Outcome::kUnknown) << write->status().to_string();
    EXPECT_EQ(write->status().stop_reason(), StopReason::kNotSafeToRepeat)
        << write->status().to_string();
    freeze.thaw();
    Admin after(frozen_server.url());
    EXPECT_LE(after.count("SELECT count(*) FROM " + table), 1);  // never doubled
  });
}

// Silence (DESIGN.md section 10): a read on a connection to a frozen server hears nothing for
// silence_after, asks the server with a connection of its own, gets no answer either, and
// gives up at once instead of waiting out its window; a read that comes while the verdict
// holds is answered at once.
TEST_F(AsioPg, AReadOnAFrozenServerGivesUpOnceItIsFoundSilent) {
  PrivateServer frozen_server;
  if (frozen_server.url().empty()) GTEST_SKIP() << "could not start a private server";
  ClientOptions o = options_for(frozen_server.url());
  o.silence_after = 500ms;
  o.silence_check = 500ms;
  o.shield.reads = holdfast::RetryPolicy::no_retry();
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    co_await warm_up(*client);
    Freeze freeze(frozen_server.postmaster_pid());
    EXPECT_TRUE(freeze.frozen());
    RequestContext request;  // a 6 s window
    auto started = std::chrono::steady_clock::now();
    Result<Rows> r =
        co_await client->async_read(request, "frozen", "SELECT 1", {}, net::use_awaitable);
    const double took = seconds_since(started);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().to_string();
    EXPECT_LT(took, 0.5 + 0.5 + 0.6);  // silence_after, the check, and slack: not the 6 s window
    RequestContext next;
    started = std::chrono::steady_clock::now();
    Result<Rows> again =
        co_await client->async_read(next, "frozen", "SELECT 1", {}, net::use_awaitable);
    EXPECT_FALSE(again.ok());
    EXPECT_LT(seconds_since(started), 0.2);  // the verdict holds: answered at once
  });
}

// A long query on a server that answers the checks is slow, not silent: its wait asks whether
// the server is there each time it has heard nothing for silence_after (one check at a time,
// the rule of holdfast::Liveness, ADR 0058), every check is answered, and the query completes.
TEST_F(AsioPg, ALongQueryOnAServerThatAnswersTheChecksCompletes) {
  ClientOptions o = options_for(url_);
  o.silence_after = 400ms;
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    co_await warm_up(*client);
    RequestContext request;
    Result<Rows> slow =
        co_await client->async_read(request, "slow", "SELECT pg_sleep(2)", {}, net::use_awaitable);
    EXPECT_TRUE(slow.ok()) << slow.status().to_string();
    // Quiet for 400 ms, checked, quiet again...: about four checks in its 2 s, never one per
    // tick of the wait.
    EXPECT_GE(client->silence_checks(), 2u);
    EXPECT_LE(client->silence_checks(), 5u);
  });
}

// Once the primary is found silent, the Client's probe looks again every health_probe_every:
// until it answers, every call is answered at once (past the verdict's silence_check too: no
// call connects to the frozen server and waits), and when it answers the breaker the silence
// tripped closes at once instead of after its open period (seconds).
TEST_F(AsioPg, WhileTheServerIsSilentCallsAreAnsweredAtOnceAndItsProbeFindsItBack) {
  PrivateServer frozen_server;
  if (frozen_server.url().empty()) GTEST_SKIP() << "could not start a private server";
  const ClientOptions o = silence_options(frozen_server.url());
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    co_await warm_up(*client);
    Freeze freeze(frozen_server.postmaster_pid());
    EXPECT_TRUE(freeze.frozen());
    RequestContext first;
    Result<Rows> found =
        co_await client->async_read(first, "frozen", "SELECT 1", {}, net::use_awaitable);
    EXPECT_FALSE(found.ok());

    // 1.5 s of calls, three times the verdict's 500 ms: each answered at once, none sent.
    net::steady_timer pause(io);
    double slowest = 0;
    const auto silent_since = std::chrono::steady_clock::now();
    while (seconds_since(silent_since) < 1.5) {
      RequestContext r;
      const auto started = std::chrono::steady_clock::now();
      Result<Rows> read =
          co_await client->async_read(r, "frozen", "SELECT 1", {}, net::use_awaitable);
      Result<Rows> write =
          co_await client->async_write(r, "frozen.write", "SELECT 1", {}, net::use_awaitable);
      slowest = std::max(slowest, seconds_since(started));
      EXPECT_FALSE(read.ok());
      EXPECT_FALSE(write.ok());
      EXPECT_EQ(write.status().fault().outcome, Outcome::kNotApplied) << write.status().to_string();
      pause.expires_after(100ms);
      co_await pause.async_wait(net::use_awaitable);
    }
    EXPECT_LT(slowest, 0.2) << "a call waited on the silent server";

    // Thawed: the probe finds it back and the breaker closes; the calls are served again well
    // before the breaker's open period would have ended by itself.
    freeze.thaw();
    const double back = co_await seconds_until_served(
        io,
        [&](RequestContext& r) {
          return client->async_read(r, "back", "SELECT 1", {}, net::use_awaitable);
        },
        3.0);
    EXPECT_LT(back, 1.0) << "served only after the breaker's open period";
  });
}

// With several hosts the probe tries them all at once: a frozen primary does not hold up the
// standby promoted meanwhile, and the first write after the promotion goes to it.
TEST_F(AsioPg, WithSeveralHostsTheProbeFindsTheStandbyPromotedWhileThePrimaryIsFrozen) {
  PrivateServer servers(20, /*with_standby=*/true);
  if (servers.standby_url().empty()) GTEST_SKIP() << "could not start a private standby";
  const std::string a = servers.url();
  const std::string b = servers.standby_url();
  Admin(a).exec("CREATE TABLE probe_t (id serial PRIMARY KEY)");
  ASSERT_TRUE(caught_up(a, b));
  const ClientOptions o = silence_options(two_hosts(host_port(a), b));
  const std::string insert = "INSERT INTO probe_t DEFAULT VALUES";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    auto write = [&](RequestContext& r) {
      return client->async_write(r, "probe_t.create", insert, {}, net::use_awaitable);
    };
    co_await warm_up(*client);
    Freeze freeze(servers.postmaster_pid());
    EXPECT_TRUE(freeze.frozen());
    RequestContext first;
    Result<Rows> found = co_await write(first);
    EXPECT_FALSE(found.ok());
    // Found silent: answered at once from now on, past the verdict's 500 ms too.
    net::steady_timer pause(io);
    pause.expires_after(700ms);
    co_await pause.async_wait(net::use_awaitable);
    RequestContext later;
    const auto started = std::chrono::steady_clock::now();
    Result<Rows> refused = co_await write(later);
    EXPECT_FALSE(refused.ok());
    EXPECT_LT(seconds_since(started), 0.2) << "a call waited on the frozen primary";

    EXPECT_TRUE(promote(b));
    const double found_after = co_await seconds_until_served(io, write, 5.0);
    EXPECT_LT(found_after, 1.0) << "the promoted standby was found late";
    EXPECT_GE(Admin(b).count("SELECT count(*) FROM probe_t"), 1);
  });
}

// Two sibling Clients of one primary (one for reads, one for writes, each with its own
// Shield): the silence the reads found answers the next write at once, and the probe's answer
// serves both again.
TEST_F(AsioPg, SiblingClientsShareWhatTheyFoundOfASilentPrimary) {
  PrivateServer frozen_server;
  if (frozen_server.url().empty()) GTEST_SKIP() << "could not start a private server";
  const ClientOptions o = silence_options(frozen_server.url());
  ClientOptions w = o;
  w.shield_name = "writes";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> reads = Client<>::open(io.get_executor(), o).value();
    EXPECT_FALSE(Client<>::open(io.get_executor(), options_for(url_), reads).ok());
    std::shared_ptr<Client<>> writes = Client<>::open(io.get_executor(), w, reads).value();
    co_await warm_up(*reads);
    co_await warm_up(*writes);
    Freeze freeze(frozen_server.postmaster_pid());
    EXPECT_TRUE(freeze.frozen());
    RequestContext first;
    Result<Rows> found =
        co_await reads->async_read(first, "frozen", "SELECT 1", {}, net::use_awaitable);
    EXPECT_FALSE(found.ok());
    // The writes' Client has an idle connection to the frozen server, yet is answered at once.
    RequestContext next;
    const auto started = std::chrono::steady_clock::now();
    Result<Rows> write =
        co_await writes->async_write(next, "frozen.write", "SELECT 1", {}, net::use_awaitable);
    EXPECT_FALSE(write.ok());
    EXPECT_EQ(write.status().fault().outcome, Outcome::kNotApplied) << write.status().to_string();
    EXPECT_LT(seconds_since(started), 0.2) << "the write found the silence again by itself";

    freeze.thaw();
    const double back = co_await seconds_until_served(
        io,
        [&](RequestContext& r) {
          return writes->async_write(r, "back", "SELECT 1", {}, net::use_awaitable);
        },
        3.0);
    EXPECT_LT(back, 1.0) << "the writes were served only after their breaker's open period";
  });
}

// Several hosts: libpq does not time a non-blocking connect, so the client tries one host at a
// time. A frozen first host (it completes the TCP handshake and never answers) costs the first
// read host_connect_timeout, and later reads nothing: the host that answered goes first.
TEST_F(AsioPg, AFrozenFirstHostIsSkippedWithinItsConnectTime) {
  PrivateServer frozen_server;
  if (frozen_server.url().empty()) GTEST_SKIP() << "could not start a private server";
  Freeze freeze(frozen_server.postmaster_pid());
  ASSERT_TRUE(freeze.frozen());
  ClientOptions o = options_for(two_hosts(host_port(frozen_server.url()), url_));
  o.connect.host_connect_timeout = 1s;
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    RequestContext first_request;
    auto started = std::chrono::steady_clock::now();
    Result<Rows> first =
        co_await client->async_read(first_request, "first", "SELECT 1", {}, net::use_awaitable);
    const double first_took = seconds_since(started);
    EXPECT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_LT(first_took, 1.0 + 0.5);  // one host's connect time, and slack
    RequestContext second_request;
    started = std::chrono::steady_clock::now();
    Result<Rows> second =
        co_await client->async_read(second_request, "second", "SELECT 2", {}, net::use_awaitable);
    EXPECT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_LT(seconds_since(started), 0.5);  // the pool's connection, to the host that answered
  });
}

// A write reaches a standby first (a multi-host URL that lists it first, as after a
// failover): with target_session_attrs=read-write the standby refuses the session at connect,
// and the write goes to the host that takes writes.
TEST_F(AsioPg, AWriteFindsTheHostThatTakesWrites) {
  const std::string standby = standby_url();
  if (standby.empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_STANDBY_URL is not set";
  ClientOptions o =
      options_for(two_hosts(host_port(standby), url_) + "?target_session_attrs=read-write");
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    RequestContext request;
    const std::string insert = "INSERT INTO " + table_ + " (note) VALUES ($1)";
    const Param note[] = {Param("written")};
    Result<Rows> wrote =
        co_await client->async_write(request, "t.write", insert, note, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();
  });
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE note = 'written'"), 1);
}

// A standby whose connect hangs (a frozen host, or after a failover one that is no standby any
// more) costs one read its standby_wait; the reads of the next silence_check go to the primary
// at once, and then one read looks again.
TEST_F(AsioPg, AStandbyThatCannotBeConnectedIsNotWaitedForByEveryRead) {
  SilentListener frozen;
  ASSERT_GT(frozen.port(), 0);
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options_for(url_);
    o.standby.conninfo =
        "postgresql://postgres@127.0.0.1:" + std::to_string(frozen.port()) + "/postgres";
    o.standby_wait = 300ms;
    o.silence_check = 3s;
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    for (int i = 0; i < 6; ++i) {
      RequestContext request;
      const auto started = std::chrono::steady_clock::now();
      Result<Rows> r =
          co_await client->async_read(request, "t.one", "SELECT 1", {}, net::use_awaitable);
      const double took = seconds_since(started);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (i > 0) {
        EXPECT_LT(took, 0.25) << "read " << i << " waited for the standby again";
      }
    }
    EXPECT_EQ(client->standby_reads(), 0u);
    EXPECT_EQ(frozen.tried(), 1);  // one connect, not one per read
  });
}

}  // namespace
