// holdfast::asio::pg::Client through a real failover (ADR 0050): the standby promoted, the old
// primary rebuilt as its standby. A request's read-your-writes position from before the
// failover is of the old timeline; once the Client's writes have shown the new one, that
// position is not compared with the rebuilt standby's replay position (far past it in number,
// on another history): the primary answers it. Runs on Boost.Asio (HOLDFAST_ASIO_BOOST) or
// standalone Asio.
#include "asio_pg_test_support.hpp"

namespace {

using namespace holdfast::asio_pg_test;

TEST(AsioPgPromoted, AReadWithAPositionOfTheOldTimelineGoesToThePrimary) {
  PrivateServer servers(20, /*with_standby=*/true);
  if (servers.url().empty() || servers.standby_url().empty()) {
    GTEST_SKIP() << "could not start a private primary and standby";
  }
  const std::string first = servers.url();           // the primary, until the failover
  const std::string second = servers.standby_url();  // the standby, promoted below
  const std::string table = unique("asio_promoted");
  Admin(first).exec("CREATE TABLE " + table + " (id int)");
  ASSERT_TRUE(caught_up(first, second));

  // Writes: whichever host takes them. Reads: whichever host is a standby.
  ClientOptions o = options_for(two_hosts(host_port(first), second));
  o.standby.conninfo =
      url_with(two_hosts(host_port(second), first), "target_session_attrs=standby");
  o.hedge_budget = 0;  // who answers is the routing's choice alone
  const std::string insert = "INSERT INTO " + table + " VALUES (1)";
  const std::string who = "SELECT pg_catalog.pg_is_in_recovery()";

  holdfast::WritePosition before;  // a write's position on the first primary's timeline
  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    RequestContext request;
    Result<Rows> wrote =
        co_await client->async_write(request, "insert", insert, {}, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();
    before = request.position();
  });
  ASSERT_NE(before.timeline, 0u) << "the write's position carries no timeline";
  ASSERT_TRUE(caught_up(first, second));

  // The failover: the primary goes for good, the standby is promoted, and the old primary's
  // folder becomes the new primary's standby.
  ASSERT_TRUE(servers.down());
  ASSERT_EQ(Admin(second).exec("SELECT pg_promote()").text(0, 0), "t");
  ASSERT_TRUE(servers.promoted());
  ASSERT_TRUE(servers.rebuild_standby());
  ASSERT_EQ(host_port(servers.standby_url()), host_port(first));

  run_on_loop([&](net::io_context& io) -> net::awaitable<void> {
    std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
    // Which copy answered a read of `request`: "t" the standby, "f" the primary.
    auto answered_by = [&](RequestContext& request) -> net::awaitable<std::string> {
      Result<Rows> r = co_await client->async_read(request, "who", who, {}, net::use_awaitable);
      co_return r.ok() ? std::string(r->text(0, 0)) : "error: " + r.status().to_string();
    };
    // A write on the new primary shows the Client the new timeline.
    RequestContext after;
    Result<Rows> wrote =
        co_await client->async_write(after, "insert", insert, {}, net::use_awaitable);
    EXPECT_TRUE(wrote.ok()) << wrote.status().to_string();
    EXPECT_EQ(after.position().timeline, before.timeline + 1) << "the promotion's new timeline";

    // The rebuilt standby answers a request without writes, once it streams.
    net::steady_timer pause(io);
    bool streaming = false;
    for (int i = 0; i < 200 && !streaming; ++i) {
      RequestContext fresh;
      streaming = co_await answered_by(fresh) == "t";
      pause.expires_after(50ms);
      co_await pause.async_wait(net::use_awaitable);
    }
    EXPECT_TRUE(streaming) << "the rebuilt standby never answered a read";

    // The same number without its timeline has been replayed there: the standby answers it.
    RequestContext same_number;
    same_number.set_position(holdfast::WritePosition{before.value, 0, false});
    EXPECT_EQ(co_await answered_by(same_number), "t");
    // With the old timeline it is not compared: the primary answers, every time.
    for (int i = 0; i < 3; ++i) {
      RequestContext old_cookie;
      old_cookie.set_position(before);
      EXPECT_EQ(co_await answered_by(old_cookie), "f") << "read " << i;
    }
    EXPECT_GE(client->standby_reads(), 2u);
  });
  EXPECT_EQ(Admin(servers.url()).count("SELECT count(*) FROM " + table), 2)
      << "the write before the failover survived it";
}

}  // namespace
