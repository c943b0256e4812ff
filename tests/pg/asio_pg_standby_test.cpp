// holdfast::asio::pg::Client with hot standbys, against real servers: reads with read-your-writes,
// a multi-host primary URL that never reads a standby, reads spread over several standbys (one
// down, one frozen, one the primary: ADR 0056), a standby whose replay lags, hedged reads of a
// slow standby, and outlier ejection (ADR 0041). Runs on Boost.Asio (HOLDFAST_ASIO_BOOST) or
// standalone Asio.
#include "asio_pg_test_support.hpp"

namespace {

using namespace holdfast::asio_pg_test;

// Creates `table` with `columns` on the primary and waits until the standby has it too.
bool create_on_both(Admin& primary, Admin& standby, const std::string& table,
                    const std::string& columns) {
  primary.exec("CREATE TABLE " + table + " (" + columns + ")");
  return eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = '" + table + "'") == 1;
  });
}

// A Client's options for the private primary, with its standby.
ClientOptions with_standby(const PrivateServer& servers) {
  ClientOptions o = options_for(servers.url());
  o.standby.conninfo = servers.standby_url();
  return o;
}

// The test servers' primary and standby, for a test of a request's own writes: who answers is
// the routing's choice alone (no hedging), and the standby's lag is no reason to skip it.
ClientOptions own_writes_options() {
  ClientOptions o = options_for(server_url());
  o.standby.conninfo = standby_url();
  o.hedge_budget = 0;
  o.max_standby_lag = std::chrono::minutes(1);
  return o;
}

// A private primary with its standby, for tests whose second standby is the test server's;
// null when either is missing.
std::unique_ptr<PrivateServer> private_beside_the_test_standby() {
  if (server_url().empty() || standby_url().empty()) return nullptr;
  auto servers = std::make_unique<PrivateServer>(20, /*with_standby=*/true);
  if (servers->url().empty() || servers->standby_url().empty()) return nullptr;
  return servers;
}

// A Client's options for the private primary, with two standbys: its own and the test
// server's.
ClientOptions two_standbys(const PrivateServer& servers) {
  ClientOptions o = options_for(servers.url());
  o.standby.conninfo = two_hosts(host_port(servers.standby_url()), standby_url());
  return o;
}

// The test server's primary and standby, with a table of `columns` created on the primary and
// streamed to the standby (`ready`), and dropped at the end.
struct TestServersTable {
  TestServersTable(const std::string& prefix, const std::string& columns)
      : primary(server_url()), standby(standby_url()), table(unique(prefix)) {
    ready = create_on_both(primary, standby, table, columns);
  }
  ~TestServersTable() { primary.exec("DROP TABLE IF EXISTS " + table); }
  TestServersTable(const TestServersTable&) = delete;
  TestServersTable& operator=(const TestServersTable&) = delete;
  Admin primary;
  Admin standby;
  const std::string table;
  bool ready = false;
};

// With several hosts, the primary's pool skips a standby (as target_session_attrs=read-write
// would): a standby reached while the primary is away may lack the request's own writes.
TEST(AsioPgStandby, WithSeveralHostsThePrimarysReadsNeverGoToAStandby) {
  const std::string primary = server_url();
  const std::string standby = standby_url();
  if (primary.empty() || standby.empty()) GTEST_SKIP() << "no primary and standby to test on";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    // The standby first: its host is skipped and the primary answers.
    ClientOptions both = options_for(two_hosts(host_port(standby), primary));
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), both).value();
    RequestContext request;
    Result<Rows> where = co_await client->async_read(
        request, "t.recovery", "SELECT pg_catalog.pg_is_in_recovery()", {}, net::use_awaitable);
    EXPECT_TRUE(where.ok()) << where.status().to_string();
    if (where.ok()) {
      EXPECT_EQ(where->text(0, 0), "f");
    }
    // Only the standby answers: the read is refused, naming it, rather than answered there.
    ClientOptions only = options_for(two_hosts("127.0.0.1:1", standby));
    std::shared_ptr<Client<>> lone = Client<>::open(io.get_executor(), only).value();
    RequestContext short_request(1s, holdfast::Clock::system());
    Result<Rows> refused =
        co_await lone->async_read(short_request, "t.recovery", "SELECT 1", {}, net::use_awaitable);
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.status().to_string().find("is a standby"), std::string::npos)
        << refused.status().to_string();
  });
}

// A standby read is prepared on its connection as a primary read is: its statement_timeout
// setting, the standby's head and the read itself, each parsed once; and so is a write with
// its setting and its commit position's query.
TEST(AsioPgStandby, StandbyReadsAndWritesArePreparedStatementsOfTheirConnection) {
  const std::string primary = server_url();
  const std::string standby = standby_url();
  if (primary.empty() || standby.empty()) GTEST_SKIP() << "no primary and standby to test on";
  const std::string prepared_here =
      "SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE name LIKE 'holdfast_loop_%'";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options_for(primary);
    o.standby.conninfo = standby;
    o.max_connections = 1;
    o.standby_connections = 1;
    o.hedge_budget = 0;  // only the standby answers the reads
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    for (const char* expected : {"3", "3"}) {
      RequestContext request;
      Result<Rows> n =
          co_await client->async_read(request, "t.prepared", prepared_here, {}, net::use_awaitable);
      EXPECT_TRUE(n.ok()) << n.status().to_string();
      if (n.ok()) {
        EXPECT_EQ(n->text(0, 0), expected);
      }
    }
    EXPECT_EQ(client->standby_reads(), 2u);
    // The write sees its setting and itself (the position's query comes after it), then the
    // position's query too.
    for (const char* expected : {"2", "3"}) {
      RequestContext request;
      Result<Rows> n = co_await client->async_write(request, "t.prepared", prepared_here, {},
                                                    net::use_awaitable);
      EXPECT_TRUE(n.ok()) << n.status().to_string();
      if (n.ok()) {
        EXPECT_EQ(n->text(0, 0), expected);
      }
    }
  });
}

// Several standbys (the hosts of ClientOptions::standby) share the reads in turn, each with
// connections of its own. The test's one standby is listed twice: two standbys to the Client.
TEST(AsioPgStandby, ReadsAreSpreadOverSeveralStandbysInTurn) {
  const std::string primary = server_url();
  const std::string standby = standby_url();
  if (primary.empty() || standby.empty()) GTEST_SKIP() << "no primary and standby to test on";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options_for(primary);
    o.standby.conninfo = two_hosts(host_port(standby), standby);
    o.hedge_budget = 0;  // only the standbys answer the reads
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    EXPECT_EQ(client->standbys(), 2u);
    for (int i = 0; i < 20; ++i) {
      RequestContext request;
      Result<Rows> where = co_await client->async_read(
          request, "t.recovery", "SELECT pg_catalog.pg_is_in_recovery()", {}, net::use_awaitable);
      EXPECT_TRUE(where.ok()) << where.status().to_string();
      if (where.ok()) {
        EXPECT_EQ(where->text(0, 0), "t");
      }
    }
    EXPECT_EQ(client->standby_reads(), 20u);
    EXPECT_EQ(client->standby_reads(0), 10u);
    EXPECT_EQ(client->standby_reads(1), 10u);
  });
}

// A standby that is down is skipped once its connect failed: the other standbys answer the
// reads, the one that found it down included (the next standby takes it), and none fails;
// without hedging and with it (the default budget).
TEST(AsioPgStandby, AStandbyThatIsDownLeavesItsReadsToTheOthers) {
  const std::string primary = server_url();
  const std::string standby = standby_url();
  if (primary.empty() || standby.empty()) GTEST_SKIP() << "no primary and standby to test on";
  for (const double budget : {0.0, ClientOptions{}.hedge_budget}) {
    SCOPED_TRACE(budget);
    run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
      ClientOptions o = options_for(primary);
      o.standby.conninfo = two_hosts("127.0.0.1:1", standby);  // nothing listens on port 1
      o.hedge_budget = budget;
      o.silence_check = 10s;  // the down standby is not looked at again during the test
      std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
      for (int i = 0; i < 20; ++i) {
        RequestContext request;
        Result<Rows> r =
            co_await client->async_read(request, "t.one", "SELECT 1", {}, net::use_awaitable);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
      }
      EXPECT_EQ(client->standby_reads(0), 0u);
      EXPECT_EQ(client->standby_reads(1), 20u);
    });
  }
}

// A list of hosts whose roles change (a failover swaps them) holds the primary too: that host
// answers as a primary, so it is left alone (looked at again off the request path) and the
// real standby takes the reads, the one that found it out included.
TEST(AsioPgStandby, AHostOfTheStandbyListThatIsThePrimaryIsLeftAlone) {
  const std::string primary = server_url();
  const std::string standby = standby_url();
  if (primary.empty() || standby.empty()) GTEST_SKIP() << "no primary and standby to test on";
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    ClientOptions o = options_for(primary);
    o.standby.conninfo = two_hosts(host_port(primary), standby);
    o.hedge_budget = 0;
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    int on_standby = 0;
    for (int i = 0; i < 20; ++i) {
      RequestContext request;
      Result<Rows> where = co_await client->async_read(
          request, "t.recovery", "SELECT pg_catalog.pg_is_in_recovery()", {}, net::use_awaitable);
      EXPECT_TRUE(where.ok()) << where.status().to_string();
      if (where.ok() && where->text(0, 0) == "t") ++on_standby;
    }
    EXPECT_EQ(on_standby, 20);
    EXPECT_EQ(client->standby_reads(0), 0u);
    EXPECT_EQ(client->standby_reads(1), 20u);
  });
}

// One of two standbys frozen (SIGSTOP of its postmaster and backends): every read is still
// answered within its window, the frozen one is soon used less (ADR 0041), and the other
// standby answers most reads. The standbys are the private primary's (frozen) and the test
// server's; the reads carry no position, so either may answer them.
TEST(AsioPgStandby, WithOneOfTwoStandbysFrozenEveryReadIsAnsweredAndTheOtherTakesThem) {
  std::unique_ptr<PrivateServer> servers = private_beside_the_test_standby();
  if (servers == nullptr) GTEST_SKIP() << "no test standby, or no private primary and standby";
  ClientOptions o = two_standbys(*servers);
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    for (int i = 0; i < 4; ++i) {  // warm: both standbys have a connection
      RequestContext warm;
      Result<Rows> w =
          co_await client->async_read(warm, "warm", "SELECT 1", {}, net::use_awaitable);
      EXPECT_TRUE(w.ok()) << w.status().to_string();
    }
    EXPECT_GT(client->standby_reads(0), 0u);
    EXPECT_GT(client->standby_reads(1), 0u);
    Freeze freeze(servers->standby_postmaster_pid());
    EXPECT_TRUE(freeze.frozen());
    const std::uint64_t other_before = client->standby_reads(1);
    double slowest = 0;
    for (int i = 0; i < 30; ++i) {
      RequestContext request(2s, holdfast::Clock::system());
      const auto started = std::chrono::steady_clock::now();
      Result<Rows> r =
          co_await client->async_read(request, "t.one", "SELECT 1", {}, net::use_awaitable);
      slowest = std::max(slowest, seconds_since(started));
      EXPECT_TRUE(r.ok()) << r.status().to_string();
    }
    EXPECT_LT(slowest, 2.0 + 0.35);
    EXPECT_TRUE(client->standby_slow());  // the frozen one gets its probes only
    EXPECT_GE(client->standby_reads(1) - other_before, 20u);
    freeze.thaw();
  });
}

// One of two standbys frozen before the Client first reaches it: its connect times out and it
// is left alone (the other standby answers). Once thawed it gets reads again within about a
// second, not after the 5 s a standby long away waits between checks: the first checks off
// the request path come after silence_check, then twice as far apart each time.
TEST(AsioPgStandby, AStandbyBackFromAShortFreezeGetsReadsAgainSoon) {
  std::unique_ptr<PrivateServer> servers = private_beside_the_test_standby();
  if (servers == nullptr) GTEST_SKIP() << "no test standby, or no private primary and standby";
  ClientOptions o = two_standbys(*servers);
  o.hedge_budget = 0;
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    net::steady_timer pause(io);
    auto sleep = [&](std::chrono::milliseconds d) -> net::awaitable<void> {
      pause.expires_after(d);
      co_await pause.async_wait(net::use_awaitable);
    };
    {
      Freeze freeze(servers->standby_postmaster_pid());
      EXPECT_TRUE(freeze.frozen());
      for (int i = 0; i < 6; ++i) {  // each read answered; the frozen standby found away
        RequestContext request(2s, holdfast::Clock::system());
        Result<Rows> r =
            co_await client->async_read(request, "t.one", "SELECT 1", {}, net::use_awaitable);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        co_await sleep(100ms);
      }
      EXPECT_EQ(client->standby_reads(0), 0u);
    }
    const auto thawed = std::chrono::steady_clock::now();
    double back_after = -1;
    while (seconds_since(thawed) < 4.0) {
      RequestContext request(2s, holdfast::Clock::system());
      Result<Rows> r =
          co_await client->async_read(request, "t.one", "SELECT 1", {}, net::use_awaitable);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (client->standby_reads(0) > 0) {
        back_after = seconds_since(thawed);
        break;
      }
      co_await sleep(50ms);
    }
    EXPECT_GE(back_after, 0.0) << "the thawed standby got no read within 4 s";
    EXPECT_LT(back_after, 2.5);
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
  ASSERT_TRUE(create_on_both(primary, standby, table, "id bigserial PRIMARY KEY, note text"));
  const ClientOptions o = with_standby(servers);
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

// A write whose WAL ends exactly on a page boundary: pg_current_wal_insert_lsn() then points
// past the next page's header, where the standby's replay never stops, and the request's
// reads would stay on the primary until someone else writes. Its position is the boundary,
// and once replayed the standby answers the request's reads.
TEST(AsioPgStandby, AWriteWhoseWalEndsOnAPageBoundaryIsReadFromTheStandbyOnceReplayed) {
  if (server_url().empty() || standby_url().empty()) GTEST_SKIP() << "no primary and standby";
  TestServersTable t("asio_page_end", "id int");
  ASSERT_TRUE(t.ready);
  Admin& primary = t.primary;
  const ClientOptions o = own_writes_options();
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    const std::string insert = "INSERT INTO " + t.table + " VALUES (1)";
    net::steady_timer pause(io);
    RequestContext request;
    const auto write = [&]() -> net::awaitable<void> {
      request = RequestContext();
      Result<Rows> r =
          co_await client->async_write(request, "insert", insert, {}, net::use_awaitable);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
    };
    co_await write();  // the first may carry the page's full image; the next ones are alike
    const std::uint64_t page = wal_page_size(primary);
    std::uint64_t bytes = 0;  // one write's WAL, measured on a write within one page
    std::uint64_t inserted = 0;
    for (int i = 0; i < 30 && inserted % page != 24; ++i) {
      const bool filled = bytes != 0 && fill_wal_page_but(primary, bytes);
      const std::uint64_t before = wal_insert_position(primary);
      co_await write();
      inserted = wal_insert_position(primary);
      if (before / page == inserted / page) bytes = inserted - before;
      if (!filled) inserted = 0;
    }
    EXPECT_EQ(inserted % page, 24u) << "no write ended on a page boundary";
    EXPECT_EQ(request.position().value, inserted - 24)
        << "the request waits for a position no replay reaches";
    const auto started = std::chrono::steady_clock::now();
    while (client->standby_reads() == 0 && seconds_since(started) < 3.0) {
      Result<Rows> r = co_await client->async_read(
          request, "count", "SELECT count(*) FROM " + t.table, {}, net::use_awaitable);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (client->standby_reads() == 0) {
        pause.expires_after(20ms);
        co_await pause.async_wait(net::use_awaitable);
      }
    }
    EXPECT_EQ(client->standby_reads(), 1u) << "the request's reads never went to the standby";
  });
}

// When the primary cannot answer, a standby that was only behind the request's writes is
// asked once more, within the same attempt (the routing pg::Database's reads take: ADR
// 0057). Here the primary's connect hangs (a silent listener) until its connect_timeout,
// while the standby, paused behind the request's write, replays it: the standby answers,
// with the write, and no retry was needed.
TEST(AsioPgStandby, WhenThePrimaryCannotAnswerAStandbyThatWasBehindIsAskedAgain) {
  if (server_url().empty() || standby_url().empty()) GTEST_SKIP() << "no primary and standby";
  TestServersTable t("asio_again", "id int");
  ASSERT_TRUE(t.ready);
  Admin& primary = t.primary;
  const std::string& table = t.table;
  SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  ClientOptions o =
      options_for("postgresql://postgres@127.0.0.1:" + std::to_string(silent.port()) + "/postgres");
  o.connect.connect_timeout = 1500ms;  // ample time for the standby to replay meanwhile
  o.standby.conninfo = standby_url();
  o.hedge_budget = 0;  // who answers is the routing's choice alone
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    ReplayPause pause(t.standby);
    EXPECT_TRUE(pause.paused());
    primary.exec("INSERT INTO " + table + " VALUES (1)");
    const Result<holdfast::pg::Lsn> written =
        holdfast::pg::Lsn::parse(primary.exec(holdfast::pg::detail::kWalPositionSql).text(0, 0));
    EXPECT_TRUE(written.ok());
    RequestContext request(5s, holdfast::Clock::system());
    request.raise_position(written.ok() ? written->value : 1, 0);
    // Replay resumes while the read waits for the primary.
    std::thread resume([&] {
      std::this_thread::sleep_for(150ms);
      pause.resume();
    });
    Result<Rows> r = co_await client->async_read(
        request, "t.again", "SELECT count(*) FROM " + table, {}, net::use_awaitable);
    resume.join();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) {
      EXPECT_EQ(r->text(0, 0), "1");
    }
    EXPECT_EQ(client->standby_reads(), 1u);
    EXPECT_EQ(client->shield().metrics().snapshot().attempts, 1u) << "answered by a retry";
    EXPECT_GE(silent.tried(), 1);
  });
}

// A standby found behind a request's writes is held off the reads that need them (50 ms,
// doubling while its replay stays where it was), as pg::Database's replicas are (ADR 0057):
// while its replay is paused, 40 reads of a request that wrote are answered by the primary,
// and only a few of them ask the standby first. A read that needs nothing still goes to it.
TEST(AsioPgStandby, AStandbyFoundBehindTheRequestsWritesIsNotAskedByEveryRead) {
  if (server_url().empty() || standby_url().empty()) GTEST_SKIP() << "no primary and standby";
  TestServersTable t("asio_held", "id int");
  ASSERT_TRUE(t.ready);
  const ClientOptions o = own_writes_options();
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    const std::string count = "SELECT count(*) FROM " + t.table;
    ReplayPause pause(t.standby);
    EXPECT_TRUE(pause.paused());
    RequestContext mine(30s, holdfast::Clock::system());
    Result<Rows> wrote = co_await client->async_write(
        mine, "insert", "INSERT INTO " + t.table + " VALUES (1)", {}, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();
    for (int i = 0; i < 40; ++i) {
      Result<Rows> own = co_await client->async_read(mine, "count", count, {}, net::use_awaitable);
      EXPECT_TRUE(own.ok() && own->text(0, 0) == "1") << "read " << i;
    }
    // The first read found the standby behind; the holds (50 ms, 100 ms, 200 ms, ...) keep
    // all but a few of the others off it, however slowly this machine reads.
    EXPECT_GE(client->standby_behind_reads(), 1u);
    EXPECT_LE(client->standby_behind_reads(), 6u)
        << "every read that needs the write asked the standby again";
    EXPECT_EQ(client->standby_reads(), 0u);
    RequestContext other;
    Result<Rows> stale = co_await client->async_read(other, "count", count, {}, net::use_awaitable);
    EXPECT_TRUE(stale.ok() && stale->text(0, 0) == "0");
    EXPECT_EQ(client->standby_reads(), 1u);
    pause.resume();
  });
}

// A standby whose replay is paused while WAL keeps arriving serves ever older answers: once
// it has not replayed what it received for max_standby_lag, its reads go to the primary (and
// every one is answered meanwhile); once it replays again, they return to it.
TEST(AsioPgStandby, AStandbyWhoseReplayLagsBeyondTheBoundAnswersNoReads) {
  PrivateServer servers(20, /*with_standby=*/true);
  if (servers.url().empty() || servers.standby_url().empty()) {
    GTEST_SKIP() << "could not start a private primary and standby";
  }
  const std::string table = unique("asio_lagging");
  Admin primary(servers.url());
  Admin standby(servers.standby_url());
  ASSERT_TRUE(create_on_both(primary, standby, table, "id int"));
  ClientOptions o = with_standby(servers);
  o.max_standby_lag = 300ms;
  o.hedge_budget = 0;  // who answers is the routing's choice alone
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    const std::string who = "SELECT pg_catalog.pg_is_in_recovery()";
    net::steady_timer pause_a_little(io);
    // Which copy answered a read of a request without writes: "t" the standby, "f" the
    // primary, "error" none.
    auto answered_by = [&]() -> net::awaitable<std::string> {
      RequestContext request(2s, holdfast::Clock::system());
      Result<Rows> r = co_await client->async_read(request, "who", who, {}, net::use_awaitable);
      co_return r.ok() ? std::string(r->text(0, 0)) : "error: " + r.status().to_string();
    };
    EXPECT_EQ(co_await answered_by(), "t");

    ReplayPause pause(standby);
    EXPECT_TRUE(pause.paused());
    primary.exec("INSERT INTO " + table + " VALUES (1)");  // received, not replayed
    const auto paused_at = std::chrono::steady_clock::now();
    std::string last = "t";
    while (last == "t" && seconds_since(paused_at) < 5.0) {
      last = co_await answered_by();
      pause_a_little.expires_after(20ms);
      co_await pause_a_little.async_wait(net::use_awaitable);
    }
    EXPECT_EQ(last, "f") << "the lagging standby kept answering, or a read failed";
    EXPECT_GE(seconds_since(paused_at), 0.3);
    EXPECT_GE(client->standby_lagging_reads(), 1u);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(co_await answered_by(), "f") << "read " << i << " while the standby lags";
    }

    pause.resume();
    bool back = false;
    for (int i = 0; i < 250 && !back; ++i) {
      back = co_await answered_by() == "t";
      pause_a_little.expires_after(20ms);
      co_await pause_a_little.async_wait(net::use_awaitable);
    }
    EXPECT_TRUE(back) << "reads did not return to the standby once it replayed again";
  });
  primary.exec("DROP TABLE " + table);
}

// Hedged reads: a standby that answers, but slowly (a statement that sleeps only in
// recovery), is not silent; once the standby's normal latency is learned, a read it has not
// answered by then also goes to the primary, whose answer wins, and the standby's try stops.
TEST(AsioPgStandby, ASlowStandbysReadIsHedgedToThePrimary) {
  PrivateServer servers(20, /*with_standby=*/true);
  if (servers.url().empty() || servers.standby_url().empty()) {
    GTEST_SKIP() << "could not start a private primary and standby";
  }
  ClientOptions o = with_standby(servers);
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
