// The read path of holdfast::pg::Database against real faults: a lock held by another
// session, statement timeouts from the window, terminated backends, too many connections,
// and the READ ONLY safety net.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg/pool.hpp"
#include "holdfast/pg/sql.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

// Records every retry the Database's primary Shield makes.
struct RetryLog {
  std::mutex mutex;
  std::vector<std::string> sqlstates;
  void add(const RetryEvent& e) {
    std::lock_guard<std::mutex> lock(mutex);
    sqlstates.emplace_back(e.status.sqlstate());
  }
  bool saw(std::string_view state) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& s : sqlstates) {
      if (s == state) return true;
    }
    return false;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return sqlstates.size();
  }
};

DatabaseOptions options_for(const std::string& url, const std::string& app, RetryLog* log) {
  DatabaseOptions o;
  o.url = url;
  o.application_name = app;
  if (log != nullptr) {
    const auto hook = [log](const RetryEvent& e) { log->add(e); };
    o.shield.reads.on_retry(hook);
    o.shield.writes.on_retry(hook);
  }
  return o;
}

class PgReadPath : public testing::Test {
 protected:
  void SetUp() override {
    if (server_url().empty()) return;
    admin_ = std::make_unique<Admin>(server_url());
    table_ = unique("hf_read");
    admin_->exec("CREATE TABLE " + table_ + " (id int PRIMARY KEY, v text)");
    admin_->exec("INSERT INTO " + table_ + " VALUES (1, 'one'), (2, 'two')");
  }
  void TearDown() override {
    if (admin_) admin_->exec("DROP TABLE IF EXISTS " + table_);
  }
  std::unique_ptr<Admin> admin_;
  std::string table_;
};

TEST_F(PgReadPath, ReadsRunOnReadOnlySessionsAndReturnRows) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options_for(server_url(), unique("hf_reader"), nullptr));
  auto rows = db.read("SELECT v FROM " + table_ + " WHERE id = $1", {2});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_EQ(rows->text(0, 0), "two");
  auto ro = db.read("SHOW transaction_read_only");
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(ro->text(0, 0), "on");

  auto stmt = db.prepare("SELECT v FROM " + table_ + " WHERE id = $1");
  ASSERT_TRUE(stmt.ok());
  for (int id : {1, 2, 1}) {
    auto r = db.read(*stmt, {id});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text(0, 0), id == 1 ? "one" : "two");
  }
}

TEST_F(PgReadPath, AWriteIsRefusedOnTheReadPathBeforeAnythingIsSent) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options_for(server_url(), unique("hf_reader"), nullptr));
  auto r = db.read("DELETE FROM " + table_);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a read"), std::string_view::npos);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_), 2);
  EXPECT_EQ(db.read_pool().stats().connects, 0u);
}

TEST_F(PgReadPath, AReadRefusedWith25006IsSentOnceMoreAsAWriteAndAppliedOnce) {
  HOLDFAST_REQUIRE_PG_SERVER();
  // A function the lexical classifier cannot see into: it writes.
  const std::string fn = unique("hf_sneaky");
  admin_->exec("CREATE FUNCTION " + fn + "() RETURNS int LANGUAGE sql AS $$ INSERT INTO " + table_ +
               " VALUES (99, 'sneaky') RETURNING id $$");
  RetryLog log;
  Database db(options_for(server_url(), unique("hf_reader"), &log));
  ASSERT_EQ(classify_sql("SELECT " + fn + "()").kind, SqlKind::kRead);

  RetryStats stats;
  ReadOptions options;
  options.stats = &stats;
  auto r = db.read("SELECT " + fn + "()", {}, options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->text(0, 0), "99");
  // The READ ONLY transaction refused it (nothing applied), the write path applied it.
  EXPECT_EQ(stats.attempts, 2);
  EXPECT_EQ(stats.stop, StopReason::kNone);
  EXPECT_EQ(db.shield().metrics().snapshot().retries, 1u);
  EXPECT_EQ(db.read_pool().stats().connects, 1u);
  EXPECT_EQ(db.write_pool().stats().connects, 1u);
  EXPECT_EQ(log.size(), 0u);  // no backoff: the second attempt goes at once
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE id = 99"), 1);

  // A plain read with stats: one attempt.
  ASSERT_TRUE(db.read("SELECT 1", {}, options).ok());
  EXPECT_EQ(stats.attempts, 1);
  admin_->exec("DROP FUNCTION " + fn + "()");
}

TEST_F(PgReadPath, AReadThatFailsAgainOnTheWritePathReportsTheWritesFailure) {
  HOLDFAST_REQUIRE_PG_SERVER();
  // It writes, and the row it writes is there already: 23505 on the write path.
  const std::string fn = unique("hf_sneaky");
  admin_->exec("CREATE FUNCTION " + fn + "() RETURNS int LANGUAGE sql AS $$ INSERT INTO " + table_ +
               " VALUES (1, 'again') RETURNING id $$");
  Database db(options_for(server_url(), unique("hf_reader"), nullptr));
  RetryStats stats;
  ReadOptions options;
  options.stats = &stats;
  auto r = db.read("SELECT " + fn + "()", {}, options);
  EXPECT_EQ(r.status().sqlstate(), "23505") << r.status().to_string();
  EXPECT_EQ(stats.attempts, 2);
  EXPECT_EQ(stats.stop, StopReason::kPermanent);
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_), 2);
  admin_->exec("DROP FUNCTION " + fn + "()");
}

TEST_F(PgReadPath, NoSessionSettingCanTurnTheReadPathReadWrite) {
  HOLDFAST_REQUIRE_PG_SERVER();
  // Read-only comes from each read's own transaction (SET LOCAL), not from the session, so
  // switching the session's default off inside a read changes nothing for the next read,
  // and switching the transaction itself to read-write is refused.
  const std::string unlock = unique("hf_unlock");
  const std::string escape = unique("hf_escape");
  const std::string sneaky = unique("hf_sneaky");
  admin_->exec("CREATE FUNCTION " + unlock +
               "() RETURNS text LANGUAGE sql AS "
               "$$ SELECT set_config('default_transaction_read_only', 'off', false) $$");
  admin_->exec("CREATE FUNCTION " + escape +
               "() RETURNS text LANGUAGE sql AS "
               "$$ SELECT set_config('transaction_read_only', 'off', true) $$");
  admin_->exec("CREATE FUNCTION " + sneaky + "() RETURNS int LANGUAGE sql AS $$ INSERT INTO " +
               table_ + " VALUES (98, 'sneaky') RETURNING id $$");
  DatabaseOptions o = options_for(server_url(), unique("hf_reader"), nullptr);
  o.read_connections = 1;
  Database db(o);
  ASSERT_TRUE(db.read("SELECT " + unlock + "()").ok());
  auto ro = db.read("SHOW transaction_read_only");
  ASSERT_TRUE(ro.ok()) << ro.status().to_string();
  EXPECT_EQ(ro->text(0, 0), "on");
  EXPECT_EQ(db.read("SELECT " + escape + "()").status().sqlstate(), "25001");

  RetryStats stats;
  ReadOptions options;
  options.stats = &stats;
  auto r = db.read("SELECT " + sneaky + "()", {}, options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(stats.attempts, 2) << "the read path applied the write";
  EXPECT_EQ(admin_->count("SELECT count(*) FROM " + table_ + " WHERE id = 98"), 1);
  EXPECT_EQ(db.read_pool().stats().connects, 1u);
  admin_->exec("DROP FUNCTION " + unlock + "()");
  admin_->exec("DROP FUNCTION " + escape + "()");
  admin_->exec("DROP FUNCTION " + sneaky + "()");
}

TEST_F(PgReadPath, AReadWaitsOutALockWithinItsWindow) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE " + table_ + " IN ACCESS EXCLUSIVE MODE");
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    holder.exec("COMMIT");
  });
  RetryLog log;
  DatabaseOptions o = options_for(server_url(), unique("hf_reader"), &log);
  o.settings = {{"lock_timeout", "100ms"}};
  Database db(o);
  RequestScope scope;
  auto rows = db.read("SELECT count(*) FROM " + table_);
  release.join();
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_EQ(*rows->int64(0, 0), 2);
  EXPECT_TRUE(log.saw("55P03"));
}

TEST_F(PgReadPath, AReadRunsOnTheRetryPolicyItIsGiven) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE " + table_ + " IN ACCESS EXCLUSIVE MODE");
  RetryLog database_log;
  DatabaseOptions o = options_for(server_url(), unique("hf_reader"), &database_log);
  o.settings = {{"lock_timeout", "50ms"}};
  Database db(o);

  // One attempt only.
  RetryPolicy single = RetryPolicy::no_retry();
  RetryStats stats;
  ReadOptions options;
  options.operation = Operation::read("custom.read");
  options.policy = &single;
  options.stats = &stats;
  {
    RequestScope scope;
    auto r = db.read("SELECT count(*) FROM " + table_, {}, options);
    EXPECT_EQ(r.status().sqlstate(), "55P03") << r.status().to_string();
  }
  EXPECT_EQ(stats.attempts, 1);
  EXPECT_EQ(stats.stop, StopReason::kAttemptsExhausted);

  // Three attempts 20 ms apart, named by the read's operation.
  std::vector<std::pair<std::string, Duration>> retries;
  RetryPolicy quick;
  quick.max_attempts(3)
      .backoff(Backoff::steps({std::chrono::milliseconds(20)}, Jitter::none()))
      .on_retry([&](const RetryEvent& e) { retries.emplace_back(std::string(e.label), e.delay); });
  options.policy = &quick;
  {
    RequestScope scope;
    auto r = db.read("SELECT count(*) FROM " + table_, {}, options);
    EXPECT_EQ(r.status().sqlstate(), "55P03") << r.status().to_string();
  }
  holder.exec("ROLLBACK");
  EXPECT_EQ(stats.attempts, 3);
  ASSERT_EQ(retries.size(), 2u);
  for (const auto& [label, delay] : retries) {
    EXPECT_EQ(label, "custom.read");
    EXPECT_EQ(delay, std::chrono::milliseconds(20));
  }
  EXPECT_EQ(database_log.size(), 0u) << "the Database's own read policy was used";
}

TEST_F(PgReadPath, AReadGivesUpWhenTheLockOutlastsTheWindow) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE " + table_ + " IN ACCESS EXCLUSIVE MODE");
  DatabaseOptions o = options_for(server_url(), unique("hf_reader"), nullptr);
  o.settings = {{"lock_timeout", "100ms"}};
  Database db(o);
  const auto start = std::chrono::steady_clock::now();
  Result<Rows> rows = Status();
  {
    RequestScope scope(std::chrono::milliseconds(800));
    rows = db.read("SELECT count(*) FROM " + table_);
  }
  const double took = pgtest::seconds_since(start);
  holder.exec("ROLLBACK");
  ASSERT_FALSE(rows.ok());
  // The last attempt may meet the statement_timeout (the window's end) before the
  // lock_timeout: either says the lock outlasted the window.
  EXPECT_TRUE(rows.status().sqlstate() == "55P03" || rows.status().sqlstate() == "57014")
      << rows.status().to_string();
  EXPECT_TRUE(rows.status().stop_reason() == StopReason::kWindowSpent ||
              rows.status().stop_reason() == StopReason::kAttemptsExhausted)
      << rows.status().to_string();
  // The window opens when the first statement starts: 0.8 s, plus slack.
  EXPECT_LT(took, 1.6);
}

// Without a lock_timeout the statement itself waits for the lock until the window's
// statement_timeout: the request spends one window in all, not one on the first attempt
// and another on the retries (the window opens when the first statement starts).
TEST_F(PgReadPath, AStatementStuckBehindALockSpendsOneWindowNotTwo) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Admin holder(server_url());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE " + table_ + " IN ACCESS EXCLUSIVE MODE");
  DatabaseOptions o = options_for(server_url(), unique("hf_reader"), nullptr);
  Database db(o);
  const auto start = std::chrono::steady_clock::now();
  Result<Rows> rows = Status();
  {
    RequestScope scope(std::chrono::seconds(1));
    rows = db.read("SELECT count(*) FROM " + table_);
  }
  const double took = pgtest::seconds_since(start);
  holder.exec("ROLLBACK");
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().sqlstate(), "57014") << rows.status().to_string();
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 1.6) << "a second window after the first attempt's";
}

TEST_F(PgReadPath, TheRemainingWindowBecomesTheStatementTimeout) {
  HOLDFAST_REQUIRE_PG_SERVER();
  Database db(options_for(server_url(), unique("hf_reader"), nullptr));
  {
    RequestScope scope(std::chrono::seconds(2));
    scope.window().open(Clock::system().now());
    auto shown = db.read("SELECT current_setting('statement_timeout')");
    ASSERT_TRUE(shown.ok()) << shown.status().to_string();
    const std::string_view v = shown->text(0, 0);
    ASSERT_TRUE(v.size() > 2 && v.substr(v.size() - 2) == "ms") << v;
    const int ms = std::stoi(std::string(v.substr(0, v.size() - 2)));
    EXPECT_GT(ms, 1500);
    EXPECT_LE(ms, 2000);
  }
  {
    RequestScope scope(std::chrono::milliseconds(600));
    scope.window().open(Clock::system().now());
    const auto start = std::chrono::steady_clock::now();
    auto slow = db.read("SELECT pg_sleep(5)");
    EXPECT_LT(pgtest::seconds_since(start), 1.2);
    EXPECT_EQ(slow.status().sqlstate(), "57014") << slow.status().to_string();
    EXPECT_EQ(slow.status().code(), Code::kDeadlineExceeded);
  }
}

TEST_F(PgReadPath, ABackendTerminatedMidReadIsRetriedOnANewConnection) {
  HOLDFAST_REQUIRE_PG_SERVER();
  const std::string app = unique("hf_reader");
  RetryLog log;
  Database db(options_for(server_url(), app, &log));
  std::thread killer([&] {
    pgtest::eventually([&] {
      return admin_->count(
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                 "AND wait_event = 'PgSleep'",
                 {app}) == 1;
    });
    admin_->terminate(app);
  });
  RequestScope scope;
  auto rows = db.read("SELECT v, pg_sleep(0.3) FROM " + table_ + " WHERE id = 1");
  killer.join();
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_EQ(rows->text(0, 0), "one");
  EXPECT_TRUE(log.saw("57P01"));
}

TEST_F(PgReadPath, AnIdleConnectionTerminatedBetweenReadsCostsNoRetry) {
  HOLDFAST_REQUIRE_PG_SERVER();
  const std::string app = unique("hf_reader");
  RetryLog log;
  Database db(options_for(server_url(), app, &log));
  ASSERT_TRUE(db.read("SELECT 1").ok());
  ASSERT_EQ(admin_->terminate(app), 1);
  ASSERT_TRUE(admin_->wait_gone(app));
  auto rows = db.read("SELECT v FROM " + table_ + " WHERE id = 2");
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(db.read_pool().stats().discarded, 1u);
}

TEST_F(PgReadPath, TooManyConnectionsIsRetriedUntilASlotFrees) {
  HOLDFAST_REQUIRE_PG_SERVER();
  const std::string role = unique("hf_limited");
  admin_->exec("CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 1");
  admin_->exec("GRANT SELECT ON " + table_ + " TO " + role);
  auto holder = Connection::open(pgtest::url_as(server_url(), role));
  ASSERT_TRUE(holder.ok()) << holder.status().to_string();
  RetryLog log;
  // The slot frees once the read has met 53300 and waits to retry (at least 100 ms): not
  // at a fixed time, which a slow machine's retries could straddle.
  std::thread release([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!log.saw("53300") && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    holder->close();
  });
  Database db(options_for(pgtest::url_as(server_url(), role), unique("hf_reader"), &log));
  Result<Rows> rows = Status();
  {
    RequestScope scope;
    rows = db.read("SELECT count(*) FROM " + table_);
  }
  release.join();
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_TRUE(log.saw("53300"));
  admin_->exec("REVOKE ALL ON " + table_ + " FROM " + role);
  admin_->exec("DROP ROLE " + role);
}

}  // namespace
}  // namespace holdfast::pg
