// holdfast::asio::pg::Client against a real server: reads, writes and keyed writes on one
// event loop, and what a frozen server (SIGSTOP) does to them: the loop keeps serving other
// work, the read gives up within its window, and a write in flight is reported as of unknown
// outcome and never sent twice. Runs on Boost.Asio (HOLDFAST_ASIO_BOOST) or standalone Asio.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "holdfast/adapters/asio_pg.hpp"
#include "holdfast/pg/connection.hpp"
#include "pg_test_support.hpp"

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
namespace net = boost::asio;
#else
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
namespace net = asio;
#endif

namespace {

using holdfast::Code;
using holdfast::KeyedResult;
using holdfast::Operation;
using holdfast::Outcome;
using holdfast::RequestContext;
using holdfast::Result;
using holdfast::StopReason;
using holdfast::asio::pg::Client;
using holdfast::asio::pg::ClientOptions;
using holdfast::pg::Param;
using holdfast::pg::Rows;
using namespace holdfast::pgtest;
using namespace std::chrono_literals;

ClientOptions options_for(const std::string& url) {
  ClientOptions o;
  o.connect.conninfo = url;
  o.max_connections = 4;
  return o;
}

// Runs `body` as a coroutine on a fresh io_context with one thread until it is done.
template <class Body>
void run_on_loop(Body body) {
  net::io_context io;
  bool finished = false;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await body(io);
        finished = true;
      },
      net::detached);
  io.run();
  EXPECT_TRUE(finished);
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
    // prepared), on the one connection the Client keeps.
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
        EXPECT_EQ(n->text(0, 0), pooling == holdfast::pg::Pooling::kSession ? "2" : "0");
      }
      EXPECT_EQ(client->open_connections(), 1u);
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
    RequestContext warm;
    Result<Rows> w = co_await client->async_read(warm, "warm", "SELECT 1", {}, net::use_awaitable);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
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

// "postgresql://u@127.0.0.1:A/db" with `first` (a host:port) before its one host.
std::string with_host_first(const std::string& url, const std::string& first) {
  const std::size_t at = url.find('@');
  return url.substr(0, at + 1) + first + "," + url.substr(at + 1);
}

// The host:port of "postgresql://u@HOST:PORT/db".
std::string host_port(const std::string& url) {
  const std::size_t at = url.find('@') + 1;
  return url.substr(at, url.find('/', at) - at);
}

// With several hosts, the primary's pool skips a standby (as target_session_attrs=read-write
// would): a standby reached while the primary is away may lack the request's own writes.
TEST(AsioPgStandby, WithSeveralHostsThePrimarysReadsNeverGoToAStandby) {
  const std::string primary = server_url();
  const std::string standby = standby_url();
  if (primary.empty() || standby.empty()) GTEST_SKIP() << "no primary and standby to test on";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    // The standby first: its host is skipped and the primary answers.
    ClientOptions both = options_for(with_host_first(primary, host_port(standby)));
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), both).value();
    RequestContext request;
    Result<Rows> where = co_await client->async_read(
        request, "t.recovery", "SELECT pg_catalog.pg_is_in_recovery()", {}, net::use_awaitable);
    EXPECT_TRUE(where.ok()) << where.status().to_string();
    if (where.ok()) {
      EXPECT_EQ(where->text(0, 0), "f");
    }
    // Only the standby answers: the read is refused, naming it, rather than answered there.
    ClientOptions only = options_for(with_host_first(standby, "127.0.0.1:1"));
    std::shared_ptr<Client<>> lone = Client<>::open(io.get_executor(), only).value();
    RequestContext short_request(1s, holdfast::Clock::system());
    Result<Rows> refused =
        co_await lone->async_read(short_request, "t.recovery", "SELECT 1", {}, net::use_awaitable);
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.status().to_string().find("is a standby"), std::string::npos)
        << refused.status().to_string();
  });
}

// Reads on a hot standby with read-your-writes: a request's write keeps its commit position
// in the request, and its reads go to the standby only once the standby has replayed it.
// With the standby's replay paused, the request's own read is answered by the primary (and
// sees its write); another request's read is still answered by the standby.
TEST(AsioPgStandby, ARequestReadsItsOwnWritesAndOthersReadTheStandby) {
  PrivateServer servers(20, /*with_standby=*/true);
  if (servers.url().empty() || servers.standby_url().empty()) {
    GTEST_SKIP() << "could not start a private primary and standby";
  }
  const std::string table = unique("asio_standby");
  Admin primary(servers.url());
  Admin standby(servers.standby_url());
  primary.exec("CREATE TABLE " + table + " (id bigserial PRIMARY KEY, note text)");
  ASSERT_TRUE(eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = '" + table + "'") == 1;
  }));
  ClientOptions o = options_for(servers.url());
  o.standby.conninfo = servers.standby_url();
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    const std::string insert = "INSERT INTO " + table + " (note) VALUES ($1)";
    const std::string count = "SELECT count(*) FROM " + table;

    // Replay going: another request's read is the standby's.
    RequestContext other;
    Result<Rows> r0 = co_await client->async_read(other, "count", count, {}, net::use_awaitable);
    EXPECT_TRUE(r0.ok()) << r0.status().to_string();
    EXPECT_EQ(client->standby_reads(), 1u);

    ReplayPause pause(standby);
    EXPECT_TRUE(pause.paused());
    RequestContext mine;
    const Param note[] = {Param("mine")};
    Result<Rows> wrote =
        co_await client->async_write(mine, "insert", insert, note, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();
    EXPECT_NE(mine.position().value, 0u);  // the commit's position, kept in the request

    Result<Rows> own = co_await client->async_read(mine, "count", count, {}, net::use_awaitable);
    EXPECT_TRUE(own.ok()) << own.status().to_string();
    if (own.ok()) {
      EXPECT_EQ(own->text(0, 0), "1");  // its own write, from the primary
    }
    EXPECT_EQ(client->standby_reads(), 1u);

    RequestContext later;
    Result<Rows> stale = co_await client->async_read(later, "count", count, {}, net::use_awaitable);
    EXPECT_TRUE(stale.ok()) << stale.status().to_string();
    EXPECT_EQ(client->standby_reads(), 2u);  // a request without writes may read the standby
    pause.resume();
  });
}

// Hedged reads: a standby that answers, but slowly (a statement that sleeps only in
// recovery), is not silent; once the standby's normal latency is learned, a read it has not
// answered by then also goes to the primary, whose answer wins, and the standby's try stops.
TEST(AsioPgStandby, ASlowStandbysReadIsHedgedToThePrimary) {
  PrivateServer servers(20, /*with_standby=*/true);
  if (servers.url().empty() || servers.standby_url().empty()) {
    GTEST_SKIP() << "could not start a private primary and standby";
  }
  ClientOptions o = options_for(servers.url());
  o.standby.conninfo = servers.standby_url();
  o.hedge_budget = 0.1;  // 20 reads earn 2 hedges
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    for (int i = 0; i < 20; ++i) {
      RequestContext warm;
      Result<Rows> r =
          co_await client->async_read(warm, "warm", "SELECT 1", {}, net::use_awaitable);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
    }
    EXPECT_EQ(client->hedged_reads(), 0u);
    const std::string slow_on_standby =
        "SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT 2 FROM pg_sleep(0.8)) ELSE 1 END";
    RequestContext request;
    const auto started = std::chrono::steady_clock::now();
    Result<Rows> r =
        co_await client->async_read(request, "slow", slow_on_standby, {}, net::use_awaitable);
    const double took = seconds_since(started);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) {
      EXPECT_EQ(r->text(0, 0), "1");  // the primary's answer
    }
    EXPECT_LT(took, 0.4);  // not the standby's 0.8 s
    EXPECT_EQ(client->hedged_reads(), 1u);
    EXPECT_EQ(client->hedges_won(), 1u);
  });
}

// A function that answers 'primary' on the primary and 'standby' on the standby, 0.8 s later
// there while a flag (written on the primary, replayed by the standby) is set: a standby
// made slow and fast again at will. With fail_primary the primary raises lock_not_available,
// which a read retries.
class SlowableStandby {
 public:
  explicit SlowableStandby(const PrivateServer& servers)
      : primary_(servers.url()),
        standby_(servers.standby_url()),
        flag_(unique("asio_slow_flag")),
        who_(unique("asio_who")) {
    primary_.exec("CREATE TABLE " + flag_ + " (slow boolean NOT NULL)");
    primary_.exec("INSERT INTO " + flag_ + " VALUES (false)");
    primary_.exec("CREATE FUNCTION " + who_ +
                  "(fail_primary boolean) RETURNS text LANGUAGE plpgsql AS $$ BEGIN "
                  "IF NOT pg_is_in_recovery() THEN "
                  "IF fail_primary THEN RAISE EXCEPTION 'refused' USING ERRCODE = '55P03'; END IF; "
                  "RETURN 'primary'; END IF; "
                  "IF (SELECT slow FROM " +
                  flag_ + ") THEN PERFORM pg_sleep(0.8); END IF; RETURN 'standby'; END $$");
    ready_ = seen_by_standby(false);
  }
  [[nodiscard]] bool ready() const { return ready_; }
  // Makes the standby slow (or fast again), once it has replayed the change.
  bool set_slow(bool slow) {
    primary_.exec("UPDATE " + flag_ + " SET slow = " + (slow ? "true" : "false"));
    return seen_by_standby(slow);
  }
  [[nodiscard]] std::string read(bool fail_primary = false) const {
    return "SELECT " + who_ + (fail_primary ? "(true)" : "(false)");
  }

 private:
  bool seen_by_standby(bool slow) {
    return eventually([&] {
      return standby_.count("SELECT count(*) FROM pg_proc WHERE proname = '" + who_ + "'") == 1 &&
             standby_.count("SELECT count(*) FROM " + flag_ +
                            " WHERE slow = " + (slow ? "true" : "false")) == 1;
    });
  }
  Admin primary_;
  Admin standby_;
  std::string flag_;
  std::string who_;
  bool ready_ = false;
};

// A private primary and standby whose standby can be made slow, and a Client's options for
// them that probe an ejected standby every `probe_every`.
class AsioPgSlowStandby : public ::testing::Test {
 protected:
  void SetUp() override {
    if (servers_.url().empty() || servers_.standby_url().empty()) {
      GTEST_SKIP() << "could not start a private primary and standby";
    }
    standby_.emplace(servers_);
    ASSERT_TRUE(standby_->ready());
  }
  [[nodiscard]] ClientOptions options(holdfast::Duration probe_every) const {
    ClientOptions o = options_for(servers_.url());
    o.standby.conninfo = servers_.standby_url();
    o.standby_wait = 3s;  // a slow answer is waited for, not cut short
    o.slow_copy_probe_every = probe_every;
    return o;
  }

  PrivateServer servers_{20, /*with_standby=*/true};
  std::optional<SlowableStandby> standby_;
};

// Reads that teach the Client the standby's normal latency, then slow reads until the standby
// is found slow: three slow answers (or tries given up at the slow threshold) in a row.
net::awaitable<void> eject(Client<>& client, SlowableStandby& s) {
  for (int i = 0; i < 20; ++i) {
    RequestContext request(5s);
    Result<Rows> r = co_await client.async_read(request, "who", s.read(), {}, net::use_awaitable);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
  }
  EXPECT_GT(client.standby_reads(), 0u);
  EXPECT_FALSE(client.standby_slow());
  EXPECT_TRUE(s.set_slow(true));
  for (int i = 0; i < 6 && !client.standby_slow(); ++i) {
    RequestContext request(5s);
    Result<Rows> r = co_await client.async_read(request, "who", s.read(), {}, net::use_awaitable);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
  }
  EXPECT_TRUE(client.standby_slow());
  EXPECT_EQ(client.standby_ejections(), 1u);
}

// Outlier ejection (ADR 0041, the blocking driver's rule and code): a standby that answers,
// but far slower than the primary, is found slow within a few reads and used less: reads go to
// the primary and no longer wait for it. Once it is fast again, probes bring it back.
TEST_F(AsioPgSlowStandby, AStandbyFarSlowerThanThePrimaryIsUsedLessUntilItIsFastAgain) {
  SlowableStandby& standby = *standby_;
  const ClientOptions o = options(50ms);  // probes come often enough for a short test
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    co_await eject(*client, standby);

    // Used less: the primary answers without waiting for the standby's 0.8 s (a probe among
    // these waits for it at most the slow threshold, then is hedged).
    const std::uint64_t standby_answers = client->standby_reads();
    for (int i = 0; i < 5; ++i) {
      RequestContext request(5s);
      const auto started = std::chrono::steady_clock::now();
      Result<Rows> r =
          co_await client->async_read(request, "who", standby.read(), {}, net::use_awaitable);
      const double took = seconds_since(started);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (r.ok()) {
        EXPECT_EQ(r->text(0, 0), "primary") << "read " << i;
      }
      EXPECT_LT(took, 0.4) << "read " << i;
    }
    EXPECT_EQ(client->standby_reads(), standby_answers);

    // Fast again: two fast probes in a row, and the standby answers reads again.
    EXPECT_TRUE(standby.set_slow(false));
    net::steady_timer pause(io);
    bool back = false;
    for (int i = 0; i < 200 && !back; ++i) {
      RequestContext request(5s);
      Result<Rows> r =
          co_await client->async_read(request, "who", standby.read(), {}, net::use_awaitable);
      back = r.ok() && r->text(0, 0) == "standby" && !client->standby_slow();
      pause.expires_after(10ms);
      co_await pause.async_wait(net::use_awaitable);
    }
    EXPECT_TRUE(back);
    EXPECT_EQ(client->standby_ejections(), 1u);
  });
}

// After the primary failed a read, its retry goes back to a standby found slow: a slow answer
// beats none. Other reads still go to the primary. (No probe during the test: one would also
// reach the standby.)
TEST_F(AsioPgSlowStandby, AReadThePrimaryFailedGoesBackToASlowStandby) {
  SlowableStandby& standby = *standby_;
  const ClientOptions o = options(60s);
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    co_await eject(*client, standby);
    RequestContext failing(5s);
    Result<Rows> r =
        co_await client->async_read(failing, "who", standby.read(true), {}, net::use_awaitable);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) {
      EXPECT_EQ(r->text(0, 0), "standby");
    }
    EXPECT_TRUE(client->standby_slow());
    RequestContext other(5s);
    Result<Rows> o2 =
        co_await client->async_read(other, "who", standby.read(), {}, net::use_awaitable);
    EXPECT_TRUE(o2.ok()) << o2.status().to_string();
    if (o2.ok()) {
      EXPECT_EQ(o2->text(0, 0), "primary");
    }
  });
}

}  // namespace
