// holdfast::pg::Connection against a real server: typed parameters and results, the
// one-statement rule, notices, and real faults (terminated backends, timeouts, refused and
// rejected connections).
#include <gtest/gtest.h>

#include <thread>

#include "holdfast/core/classify.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

Connection open_as(const std::string& app) {
  ConnectOptions options;
  options.conninfo = server_url();
  options.application_name = app;
  auto c = Connection::open(options);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : Connection();
}

TEST(PgConnection, TypedParametersAndResults) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Connection conn = open_as(unique("hf_typed"));
  const std::string text = "court 7";
  auto rows = conn.query(
      "SELECT $1::int + 1 AS next, $2::text AS name, $3::float8 * 2 AS twice, NOT $4 AS flip, "
      "$5::text IS NULL AS nothing, $6::bigint AS big, $7 AS inferred",
      {41, text, 1.25, true, nullptr, 9'000'000'000LL, std::string_view("plain")});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 1);
  EXPECT_EQ(rows->columns(), 7);
  EXPECT_EQ(rows->column("name"), 1);
  EXPECT_EQ(*rows->int32(0, 0), 42);
  EXPECT_EQ(*rows->string(0, 1), "court 7");
  EXPECT_DOUBLE_EQ(*rows->float64(0, 2), 2.5);
  EXPECT_EQ(*rows->boolean(0, 3), false);
  EXPECT_EQ(*rows->boolean(0, 4), true);
  EXPECT_EQ(*rows->int64(0, 5), 9'000'000'000LL);
  EXPECT_EQ(rows->text(0, 6), "plain");
  EXPECT_EQ(rows->command(), "SELECT 1");
}

TEST(PgConnection, TypedAccessorsNameWhatIsWrong) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Connection conn = open_as(unique("hf_typed"));
  auto rows = conn.query("SELECT NULL::int AS missing, 'abc' AS word, 99999999999 AS huge");
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_TRUE(rows->is_null(0, 0));
  EXPECT_EQ(rows->int64(0, 0).status().code(), Code::kFailedPrecondition);
  EXPECT_NE(rows->int64(0, 0).status().message().find("missing"), std::string_view::npos);
  EXPECT_EQ(rows->int64(0, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(rows->int32(0, 2).status().code(), Code::kOutOfRange);
  EXPECT_EQ(rows->int64(3, 0).status().code(), Code::kOutOfRange);
}

TEST(PgConnection, AStringWithSeveralStatementsIsRefusedAndNothingRuns) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string table = unique("hf_multi");
  admin.exec("CREATE TABLE " + table + " (a int)");
  Connection conn = open_as(unique("hf_multi"));
  auto r = conn.query("INSERT INTO " + table + " VALUES (1); INSERT INTO " + table + " VALUES (2)");
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("more than one statement"), std::string_view::npos)
      << r.status().to_string();
  EXPECT_EQ(admin.count("SELECT count(*) FROM " + table), 0);
  EXPECT_TRUE(conn.is_open());
  admin.exec("DROP TABLE " + table);
}

TEST(PgConnection, NoticesAreCapturedNotPrinted) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Connection conn = open_as(unique("hf_notice"));
  testing::internal::CaptureStderr();
  auto r = conn.query("DO $$ BEGIN RAISE NOTICE 'court % is free', 7; END $$");
  const std::string printed = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(printed, "");
  const std::vector<Notice> notices = conn.take_notices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].severity, "NOTICE");
  EXPECT_EQ(notices[0].message, "court 7 is free");
  EXPECT_EQ(notices[0].routine, "exec_stmt_raise");  // the server's function: never translated
  EXPECT_EQ(conn.notices_received(), 1u);
  EXPECT_TRUE(conn.take_notices().empty());
}

// The WARNING of a COMMIT whose wait for a synchronous standby ended (ADR 0053) is known by
// the server's function whatever the language of its message, and by its English message
// from a server that does not name the function; another warning, or a notice, is not it.
TEST(PgConnection, TheWarningOfACommitLeftUnconfirmedIsKnownInAnyLanguage) {
  const auto notice = [](std::string severity, std::string sqlstate, std::string message,
                         std::string routine) {
    Notice n;
    n.severity = std::move(severity);
    n.sqlstate = std::move(sqlstate);
    n.message = std::move(message);
    n.routine = std::move(routine);
    return n;
  };
  // lc_messages = 'pl_PL': a cancel, and a termination of the backend.
  EXPECT_TRUE(is_standby_wait_cancelled(notice("WARNING", "01000",
                                               "anulowanie oczekiwania na replikację synchroniczną",
                                               "SyncRepWaitForLSN")));
  EXPECT_TRUE(is_standby_wait_cancelled(
      notice("WARNING", "57P01", "przerwano oczekiwanie na replikację", "SyncRepWaitForLSN")));
  EXPECT_TRUE(is_standby_wait_cancelled(notice(
      "WARNING", "01000", "canceling wait for synchronous replication due to user request", "")));
  EXPECT_TRUE(is_standby_wait_cancelled(
      notice("WARNING", "57P01",
             "canceling the wait for synchronous replication and terminating connection due to "
             "administrator command",
             "")));
  EXPECT_FALSE(
      is_standby_wait_cancelled(notice("WARNING", "01000", "court 7 is free", "exec_stmt_raise")));
  EXPECT_FALSE(
      is_standby_wait_cancelled(notice("NOTICE", "00000", "anything", "SyncRepWaitForLSN")));
}

TEST(PgConnection, ATerminatedIdleBackendReportsItsFatalOnTheNextStatement) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string app = unique("hf_victim");
  Connection conn = open_as(app);
  ASSERT_TRUE(conn.query("SELECT 1").ok());
  ASSERT_EQ(admin.terminate(app), 1);
  ASSERT_TRUE(admin.wait_gone(app));

  auto r = conn.query("SELECT 1");
  ASSERT_FALSE(r.ok());
  // The FATAL the server sent is read, not lost behind "server closed the connection".
  EXPECT_EQ(r.status().sqlstate(), "57P01") << r.status().to_string();
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().fault().scope, RetryScope::kReconnect);
  EXPECT_FALSE(conn.is_open());
}

TEST(PgConnection, CheckFindsATerminatedIdleConnectionWithoutARoundTrip) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string app = unique("hf_check");
  Connection conn = open_as(app);
  EXPECT_TRUE(conn.check());
  ASSERT_EQ(admin.terminate(app), 1);
  ASSERT_TRUE(admin.wait_gone(app));
  EXPECT_FALSE(conn.check());
  // The FATAL that arrived while idle was kept as a notice.
  bool fatal = false;
  for (const Notice& n : conn.take_notices())
    fatal |= n.severity == "FATAL" && n.sqlstate == "57P01";
  EXPECT_TRUE(fatal);
}

TEST(PgConnection, ABackendTerminatedMidStatementIsALostConnectionWithUnknownOutcome) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string app = unique("hf_active");
  Connection conn = open_as(app);
  std::thread killer([&] {
    pgtest::eventually([&] {
      return admin.count(
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                 "AND wait_event = 'PgSleep'",
                 {app}) == 1;
    });
    admin.terminate(app);
  });
  auto r = conn.query("SELECT pg_sleep(10)");
  killer.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlstate(), "57P01") << r.status().to_string();
  EXPECT_EQ(r.status().fault().outcome, Outcome::kUnknown);
  EXPECT_FALSE(conn.is_open());
}

TEST(PgConnection, StatementTimeoutIs57014AndLeavesTheConnectionUsable) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Connection conn = open_as(unique("hf_stmt_timeout"));
  ASSERT_TRUE(conn.set_statement_timeout(std::chrono::milliseconds(100)).ok());
  EXPECT_EQ(conn.statement_timeout(), std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  auto r = conn.query("SELECT pg_sleep(2)");
  EXPECT_LT(pgtest::seconds_since(start), 1.5);
  EXPECT_EQ(r.status().sqlstate(), "57014");
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded);
  EXPECT_EQ(r.status().fault().outcome, Outcome::kNotApplied);
  EXPECT_TRUE(conn.query("SELECT 1").ok());
}

TEST(PgConnection, EnsureStatementTimeoutSkipsSmallChanges) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Connection conn = open_as(unique("hf_ensure"));
  ASSERT_TRUE(conn.ensure_statement_timeout(std::chrono::milliseconds(6000)).ok());
  ASSERT_TRUE(conn.ensure_statement_timeout(std::chrono::milliseconds(5800)).ok());
  auto shown = conn.query("SHOW statement_timeout");
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(shown->text(0, 0), "6s");  // 5800 ms is within 10% of 6 s: no SET was sent
  ASSERT_TRUE(conn.ensure_statement_timeout(std::chrono::milliseconds(1500)).ok());
  shown = conn.query("SHOW statement_timeout");
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(shown->text(0, 0), "1500ms");
}

TEST(PgConnection, LockTimeoutIs55P03) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string table = unique("hf_lock");
  admin.exec("CREATE TABLE " + table + " (a int)");
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE");

  ConnectOptions options;
  options.conninfo = server_url();
  options.settings = {{"lock_timeout", "100ms"}};
  auto conn = Connection::open(options);
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  auto r = conn->query("SELECT count(*) FROM " + table);
  EXPECT_EQ(r.status().sqlstate(), "55P03") << r.status().to_string();
  EXPECT_EQ(r.status().fault().scope, RetryScope::kStatement);
  EXPECT_TRUE(r.status().fault().overload);
  holder.exec("ROLLBACK");
  admin.exec("DROP TABLE " + table);
}

TEST(PgConnection, TheClientDeadlineCancelsAStatementTheServerWouldNotStop) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Connection conn = open_as(unique("hf_deadline"));
  ASSERT_TRUE(conn.query("SELECT set_config('statement_timeout', '0', false)").ok());
  conn.set_deadline(Clock::system().now() + std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  auto r = conn.query("SELECT pg_sleep(5)");
  EXPECT_LT(pgtest::seconds_since(start), 2.0);
  EXPECT_EQ(r.status().sqlstate(), "57014") << r.status().to_string();
  EXPECT_TRUE(conn.is_open());
}

TEST(PgConnection, ARefusedConnectionIsClassifiedWithoutASqlstate) {
  HOLDFAST_REQUIRE_PG_SERVER();
  // Port 1 on loopback: nothing listens there.
  auto c = Connection::open("postgresql://postgres@127.0.0.1:1/postgres");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), classify_pg_connect_failure().code);
  EXPECT_EQ(c.status().fault(), classify_pg_connect_failure().fault);
  EXPECT_EQ(c.status().sqlstate(), "");
  EXPECT_EQ(c.status().backend(), Backend::kPostgres);
}

TEST(PgConnection, AConnectionTheServerRejectsCarriesItsSqlstate) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin admin(server_url());
  const std::string role = unique("hf_limited");
  admin.exec("CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 1");
  auto first = Connection::open(pgtest::url_as(server_url(), role));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = Connection::open(pgtest::url_as(server_url(), role));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().sqlstate(), "53300") << second.status().to_string();
  EXPECT_EQ(second.status().fault().scope, RetryScope::kReconnect);
  EXPECT_EQ(second.status().fault().outcome, Outcome::kNotApplied);

  auto missing = Connection::open(server_url() + "_no_such_database");
  EXPECT_EQ(missing.status().sqlstate(), "3D000") << missing.status().to_string();
  EXPECT_FALSE(missing.status().fault().transient());

  first->close();
  admin.exec("DROP ROLE " + role);
}

TEST(PgConnection, ConnectsWithKeywordsToo) {
  HOLDFAST_REQUIRE_PG_SERVER();
  auto probe = Connection::open(server_url());
  ASSERT_TRUE(probe.ok());
  auto port_rows = probe->query("SELECT current_setting('port')");
  ASSERT_TRUE(port_rows.ok());
  const std::string conninfo =
      "host=127.0.0.1 user=postgres dbname=postgres port=" + std::string(port_rows->text(0, 0));
  auto c = Connection::open(conninfo);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->query("SELECT 1").ok());
  EXPECT_GT(c->backend_pid(), 0);
  EXPECT_TRUE(c->standard_conforming_strings());
}

}  // namespace
}  // namespace holdfast::pg
