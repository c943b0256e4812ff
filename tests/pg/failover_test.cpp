// Several hosts (DESIGN.md §9, "Failover"): a host that accepts connections and never
// answers is skipped, a host a check found silent while another took over is left by every
// pool of the process, and a write refused by a primary that turned read-only goes to the
// host that takes writes. Real servers; the silent host is a socket that accepts and says
// nothing, as a frozen postmaster's kernel does, or a primary frozen with SIGSTOP.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"
#include "pg_test_support.hpp"

namespace holdfast {
namespace {

using pgtest::Admin;
using pgtest::host_port;
using pgtest::PrivateServer;
using pgtest::two_hosts;
using std::chrono::milliseconds;
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

TEST(PgHosts, AfterAFailoverAPoolThatSawNothingLeavesTheFrozenOldPrimaryAtOnce) {
  // Two Databases on the same two hosts, as the panel has (one reads, one writes). The
  // primary freezes and its standby is promoted. The writes' check finds the promoted host
  // answering and the old one silent; the reads' idle session still reaches the frozen host,
  // and its own check would have found the promoted host first and called the server fine.
  // Its next read must not wait out its window there (ADR 0027).
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer servers(20, /*with_standby=*/true);
  ASSERT_FALSE(servers.standby_url().empty()) << "the private standby did not start";
  const std::string first = servers.url();
  const std::string second = servers.standby_url();
  Admin(first).exec("CREATE TABLE frozen_t (id int PRIMARY KEY, note text)");
  Admin(first).exec("INSERT INTO frozen_t VALUES (1, 'before')");

  pg::DatabaseOptions o;
  o.url = two_hosts(host_port(first), second);
  o.read_connections = 2;
  o.write_connections = 2;
  pg::Database reads(o);
  pg::Database writes(o);
  auto read = [&reads]() {
    RequestScope scope(seconds(6));
    return reads.read("SELECT note FROM frozen_t WHERE id = 1");
  };
  ASSERT_TRUE(read().ok());  // leaves a session to the primary, idle in the reads' pool
  {
    RequestScope scope(seconds(6));
    ASSERT_TRUE(writes.write("UPDATE frozen_t SET note = 'warm' WHERE id = 1").ok());
  }
  // Replicated before the freeze: the promoted server has the row.
  ASSERT_TRUE(pgtest::eventually([&] {
    return Admin(second).count("SELECT count(*) FROM frozen_t WHERE note = 'warm'") == 1;
  }));

  pgtest::Freeze freeze(servers.postmaster_pid());
  ASSERT_TRUE(freeze.frozen());
  ASSERT_EQ(Admin(second).exec("SELECT pg_promote()").text(0, 0), "t");
  // A write meets the frozen primary on its pooled session and waits there (its outcome
  // could still become known); meanwhile its server's check finds the promoted host.
  std::thread in_flight([&writes] {
    RequestScope scope(seconds(6));
    (void)writes.write("UPDATE frozen_t SET note = 'lost' WHERE id = 1");
  });
  // The next writes go to the promoted server.
  EXPECT_TRUE(pgtest::eventually(
      [&] {
        RequestScope scope(seconds(6));
        return writes.write("UPDATE frozen_t SET note = 'after' WHERE id = 1").ok();
      },
      milliseconds(8000)));

  // The reads' pool heard nothing of it, yet its next read leaves the frozen host at once.
  const auto start = std::chrono::steady_clock::now();
  Result<pg::Rows> r = read();
  const double took = pgtest::seconds_since(start);
  in_flight.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->text(0, 0), "after");
  EXPECT_LT(took, 3.0) << "the read waited on the frozen old primary";
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
  // Two more, for transaction() below, each with a session to the old primary.
  auto pay = [&](pg::Database& on, int id, bool rerunnable, pg::TransactionReport* report) {
    RequestScope scope(seconds(6));
    pg::TransactionOptions t;
    t.operation = Operation::transaction(rerunnable, "failover.pay");
    t.report = report;
    return on.transaction(
        [&](pg::Transaction& tx) {
          return tx.query("INSERT INTO " + table + " VALUES ($1, 'tx')", {std::to_string(id)})
              .status();
        },
        t);
  };
  pg::DatabaseOptions once_options = o;  // URLs of their own: no host learnt from `db`
  once_options.url = pgtest::url_with(o.url, "application_name=hf_tx_once");
  once_options.write_connections = 1;
  pg::DatabaseOptions rerun_options = once_options;
  rerun_options.url = pgtest::url_with(o.url, "application_name=hf_tx_rerun");
  pg::Database tx_once(once_options);
  pg::Database tx_rerun(rerun_options);
  ASSERT_TRUE(pay(tx_once, 101, false, nullptr).ok());
  ASSERT_TRUE(pay(tx_rerun, 102, true, nullptr).ok());
  EXPECT_EQ(on_old.count("SELECT count(*) FROM " + table), 3);

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

  // The same inside transaction(), on sessions opened before the demotion (libpq's
  // read-write check keeps new ones off the read-only host). A transaction that may not run
  // twice is answered with the refusal, applied nowhere, and the next one goes to the
  // writer; a re-runnable one runs again there within its window.
  pg::TransactionReport once;
  Status refused = pay(tx_once, 3, /*rerunnable=*/false, &once);
  EXPECT_EQ(refused.sqlstate(), "25006") << refused.to_string();
  EXPECT_EQ(refused.fault().outcome, Outcome::kNotApplied) << refused.to_string();
  EXPECT_EQ(once.runs, 1);
  EXPECT_TRUE(pay(tx_once, 3, false, nullptr).ok());
  pg::TransactionReport rerun;
  Status paid = pay(tx_rerun, 4, /*rerunnable=*/true, &rerun);
  EXPECT_TRUE(paid.ok()) << paid.to_string();
  EXPECT_EQ(rerun.runs, 2);
  for (int id : {3, 4}) {
    const std::string where = " WHERE id = " + std::to_string(id);
    EXPECT_EQ(on_new.count("SELECT count(*) FROM " + table + where), 1) << id;
    EXPECT_EQ(on_old.count("SELECT count(*) FROM " + table + where), 0) << id;
  }
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
