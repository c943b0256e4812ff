// Several hosts (DESIGN.md §9, "Failover"): a host that accepts connections and never
// answers is skipped, and a write refused by a primary that turned read-only goes to the
// host that takes writes. Real servers; the silent host is a socket that accepts and says
// nothing, as a frozen postmaster's kernel does.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "holdfast/postgres.hpp"
#include "pg_test_support.hpp"

namespace holdfast {
namespace {

using pgtest::Admin;
using pgtest::host_port;
using pgtest::PrivateServer;
using pgtest::two_hosts;
using std::chrono::seconds;

TEST(PgHosts, AHostThatAcceptsAndSaysNothingIsSkippedAndThenAvoided) {
  HOLDFAST_REQUIRE_PG_SERVER();
  pgtest::SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  pg::ConnectOptions o;
  o.conninfo = two_hosts("127.0.0.1:" + std::to_string(silent.port()), pgtest::server_url());
  o.connect_timeout = seconds(5);
  o.host_connect_timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  auto first = pg::Connection::open(o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE(first->query("SELECT 1").ok());
  EXPECT_LT(pgtest::seconds_since(start), 5.0);  // it did not wait out the whole timeout
  EXPECT_EQ(silent.tried(), 1);
  // The host that answered is tried first from now on: the silent one is not tried again.
  auto second = pg::Connection::open(o);
  EXPECT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(silent.tried(), 1);
}

TEST(PgHosts, AWriteRefusedByAPrimaryThatTurnedReadOnlyGoesToTheHostThatTakesWrites) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer old_primary;
  ASSERT_FALSE(old_primary.url().empty());
  const std::string table = pgtest::unique("failover_pay");
  const std::string create = "CREATE TABLE " + table + " (id int PRIMARY KEY, note text)";
  Admin on_old(old_primary.url());
  Admin on_new(pgtest::server_url());
  on_old.exec(create);
  on_new.exec(create);

  pg::DatabaseOptions o;
  o.url = two_hosts(host_port(old_primary.url()), pgtest::server_url());
  o.write_connections = 2;
  pg::Database db(o);
  {
    RequestScope scope(seconds(6));
    ASSERT_TRUE(db.write("INSERT INTO " + table + " VALUES (1, 'before')").ok());
  }
  EXPECT_EQ(on_old.count("SELECT count(*) FROM " + table), 1);

  // The old primary is demoted (read-only for every new transaction, its sessions kept).
  on_old.exec("ALTER SYSTEM SET default_transaction_read_only = on");
  on_old.exec("SELECT pg_reload_conf()");
  ASSERT_TRUE(pgtest::eventually([&] {
    return on_old.exec("SELECT current_setting('default_transaction_read_only')").text(0, 0) ==
           "on";
  }));
  Result<pg::Rows> w = Status();
  {
    RequestScope scope(seconds(6));
    w = db.write("INSERT INTO " + table + " VALUES (2, 'after')");
  }
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  // Applied once, on the host that takes writes; nothing on the read-only one.
  EXPECT_EQ(on_new.count("SELECT count(*) FROM " + table + " WHERE id = 2"), 1);
  EXPECT_EQ(on_old.count("SELECT count(*) FROM " + table + " WHERE id = 2"), 0);
  on_old.exec("ALTER SYSTEM RESET default_transaction_read_only");
  on_old.exec("SELECT pg_reload_conf()");
  on_new.exec("DROP TABLE " + table);
}

TEST(PgHosts, OnOneHostARefusalForReadOnlyIsAnsweredForWhatItIsAndNotRetried) {
  // One server that stays read-only: a configuration, not a failover. The write is
  // answered at once with 25006, once.
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server;
  ASSERT_FALSE(server.url().empty());
  Admin admin(server.url());
  admin.exec("CREATE TABLE ro (id int)");
  admin.exec("ALTER SYSTEM SET default_transaction_read_only = on");
  admin.exec("SELECT pg_reload_conf()");
  pg::DatabaseOptions o;
  o.url = server.url();
  pg::Database db(o);
  Result<pg::Rows> w = Status();
  {
    RequestScope scope(seconds(6));
    w = db.write("INSERT INTO ro VALUES (1)");
  }
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().sqlstate(), "25006") << w.status().to_string();
  EXPECT_EQ(db.shield().metrics().snapshot().retries, 0u);
}

}  // namespace
}  // namespace holdfast
