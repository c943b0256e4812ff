// holdfast::asio::pg::Client notices confirmed writes a failover lost (ADR 0036), as
// pg::Database does, on real servers: a private primary A and its streaming standby B, B
// promoted while A still takes writes (a split), keyed payments confirmed on A that B never
// gets, then A stops and the Client's multi-host URL "A,B" moves to B. The Client's watch must
// name exactly the payments confirmed after the split.
#include <set>

#include "asio_pg_test_support.hpp"

namespace {

using namespace holdfast::asio_pg_test;
using holdfast::pg::LostWritesReport;
using Tx = Client<>::Transaction;

class AsioPgLostWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_URL is not set";
    servers.emplace(20, /*with_standby=*/true);
    ASSERT_FALSE(servers->standby_url().empty()) << "the private standby did not start";
    a = servers->url();
    b = servers->standby_url();
    Admin(a).exec("CREATE TABLE lost_t (id serial PRIMARY KEY, what text)");
  }

  // Pays once for each of `keys` (a keyed transaction each, in a request of its own).
  static net::awaitable<void> pay(Client<>& client, std::vector<std::string> keys) {
    holdfast::pg::TransactionOptions t;
    t.operation = Operation::transaction(true, "t.pay");
    for (const std::string& key : keys) {
      RequestContext request;
      Result<KeyedResult> paid = co_await client.async_once(
          request, key,
          [&](Tx& tx) -> net::awaitable<Result<std::string>> {
            const Param what[] = {Param(key)};
            Result<Rows> r = co_await tx.query("INSERT INTO lost_t (what) VALUES ($1)", what);
            if (!r.ok()) co_return r.status();
            co_return std::string("paid");
          },
          t, net::use_awaitable);
      EXPECT_TRUE(paid.ok() && !paid->replayed) << key << ": " << paid.status().to_string();
    }
  }

  std::optional<PrivateServer> servers;
  std::string a;
  std::string b;
};

TEST_F(AsioPgLostWrites, PaymentsConfirmedOnTheOldPrimaryAfterASplitAreReportedByKey) {
  net::io_context io;
  ClientOptions o = options_for(two_hosts(host_port(a), b));
  o.connect.host_connect_timeout = std::chrono::seconds(2);
  o.idempotency_table = "lost_keys";
  std::shared_ptr<Client<>> client = Client<>::open(io.get_executor(), o).value();
  // Runs `step` on the Client's loop until it is done (the watch's checks run on a thread of
  // their own, so the loop may stop between steps).
  auto on_loop = [&](net::awaitable<void> step) {
    net::co_spawn(io, std::move(step), net::detached);
    io.restart();
    io.run();
  };
  on_loop([&]() -> net::awaitable<void> {
    RequestContext request;
    Result<Rows> made =
        co_await client->async_create_idempotency_table(request, net::use_awaitable);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
  }());
  on_loop(pay(*client, {"before-1", "before-2"}));
  ASSERT_TRUE(caught_up(a, b));

  // The split: B becomes a primary of its own while A goes on confirming payments.
  ASSERT_TRUE(promote(b));
  const std::vector<std::string> lost = {"after-1", "after-2", "after-3"};
  on_loop(pay(*client, lost));
  EXPECT_EQ(Admin(a).count("SELECT count(*) FROM lost_keys"), 5);
  EXPECT_EQ(Admin(b).count("SELECT count(*) FROM lost_keys"), 2);  // B never got them
  EXPECT_EQ(client->lost_writes().changes, 0u);

  // A goes; the Client's next payment finds B, the writer now, and the watch checks B.
  ASSERT_TRUE(servers->down());
  on_loop(pay(*client, {"on-b-1"}));
  ASSERT_TRUE(eventually([&] { return client->lost_writes().checks >= 1; },
                         std::chrono::milliseconds(20000)));
  const LostWritesReport seen = client->lost_writes();
  EXPECT_EQ(seen.changes, 1u);
  EXPECT_EQ(seen.missing_total, 3u);
  const std::set<std::string> named(seen.last_missing.begin(), seen.last_missing.end());
  EXPECT_EQ(named, std::set<std::string>(lost.begin(), lost.end()));
  EXPECT_EQ(client->shield().metrics().snapshot().confirmed_writes_missing, 3u);
}

}  // namespace
