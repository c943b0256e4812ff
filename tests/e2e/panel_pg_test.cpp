// The demo panel on PostgreSQL over HTTP on loopback: a fresh database per test on the
// server of scripts/pg-test-server.sh (HOLDFAST_TEST_PG_URL; skipped without it), and real
// faults: backends terminated under the panel, a table locked while a page loads.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "club_store.hpp"
#include "demo_data.hpp"
#include "hardening_checks.hpp"
#include "holdfast/log/logger.hpp"
#include "holdfast/pg/url.hpp"
#include "http_client.hpp"
#include "pg_scratch_database.hpp"
#include "pg_test_support.hpp"
#include "retention_checks.hpp"
#include "server.hpp"

namespace holdfast::panel {
namespace {

using nlohmann::json;
using pgtest::Admin;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

std::string today() {
  return std::string(utc_stamp(WallClock::system().now()).view().substr(0, 10));
}

// Each test runs twice: with the database routes on the async lane (each try a blocking
// job, ADR 0032) and on the workers (the driver's own loop).
class PanelPgTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    HOLDFAST_REQUIRE_PG_SERVER();
    db_ = std::make_unique<ScratchDatabase>();
    ClubStore::Options so;
    so.pg_url = db_->url();
    so.strategy = Strategy::kHoldfast;
    auto store = ClubStore::open(so);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(*store);
    const Status made = store_->ensure_demo_data(today());
    ASSERT_TRUE(made.ok()) << made.to_string();
    Logger::Options lo;
    lo.console = false;
    logger_ = std::make_unique<Logger>(lo);
    start_panel(/*serve_stale=*/true);
  }
  void TearDown() override {
    expect_served_where_asked();
    http_.reset();
    server_.reset();
    store_.reset();
    db_.reset();
  }
  // The routes ran where the parameter asked (every test signs in, on the lane when it is
  // on; a baseline's store has no lane).
  void expect_served_where_asked() const {
    if (server_ == nullptr || server_->http_server() == nullptr) return;
    const std::uint64_t on_lane = server_->http_server()->counters().served_async.load();
    if (GetParam() && store_->async_access() != nullptr) {
      EXPECT_GT(on_lane, 0u);
    } else {
      EXPECT_EQ(on_lane, 0u);
    }
  }

  // (Re)starts the panel over the store, signs in, and keeps the session cookie.
  void start_panel(bool serve_stale) {
    http_.reset();
    server_.reset();
    PanelServer::Options po;
    po.store = store_.get();
    po.logger = logger_.get();
    po.serve_stale = serve_stale;
    po.async_lane = GetParam();
    server_ = std::make_unique<PanelServer>(po);
    ASSERT_TRUE(server_->start().ok());
    http_ = std::make_unique<http_client::Client>("127.0.0.1", server_->port());
    http_->set_read_timeout(seconds(30));
    auto r = http_->Post(
        "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 303) << r->body;
    const std::string set = r->get_header_value("Set-Cookie");
    EXPECT_NE(set.find("HttpOnly"), std::string::npos);
    cookie_ = {{"Cookie", set.substr(0, set.find(';'))},
               {"X-CSRF-Token", r->get_header_value("X-CSRF-Token")}};
  }

  http_client::Result schedule() {
    return http_->Get("/dashboard/schedule?date=" + today(), cookie_);
  }
  // Asserts that `r` is the schedule, fresh from the database.
  static void expect_fresh_schedule(const http_client::Result& r) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body.substr(0, 300);
    EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));
    EXPECT_NE(r->body.find("Schedule for " + today()), std::string::npos);
    EXPECT_NE(r->body.find("data-game="), std::string::npos);
  }

  std::unique_ptr<ScratchDatabase> db_;
  std::unique_ptr<ClubStore> store_;
  std::unique_ptr<Logger> logger_;
  std::unique_ptr<PanelServer> server_;
  std::unique_ptr<http_client::Client> http_;
  http_client::Headers cookie_;
};

TEST_P(PanelPgTest, TheScheduleRendersWithTheDemoData) {
  auto page = schedule();
  expect_fresh_schedule(page);
  EXPECT_NE(page->body.find("Riverside Court Club"), std::string::npos);

  auto api = http_->Get("/api/schedule?date=" + today(), cookie_);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->status, 200);
  const json j = json::parse(api->body);
  EXPECT_EQ(j["date"], today());
  EXPECT_EQ(j["club"], "Riverside Court Club");
  ASSERT_EQ(j["games"].size(), 24U);  // 4 courts, 6 games a day each
  EXPECT_EQ(j["games"][0]["starts_at"], today() + "T08:00");
  EXPECT_EQ(j["games"][0]["ends_at"], today() + "T09:30");
  EXPECT_EQ(j["games"][0]["court"], "Court 1");

  const std::string anniversary = add_days(today(), 3);
  auto holiday = http_->Get("/api/schedule?date=" + anniversary, cookie_);
  ASSERT_TRUE(holiday);
  EXPECT_EQ(json::parse(holiday->body)["holidays"], json::array({"Club anniversary"}));
}

TEST_P(PanelPgTest, ItShowsTheSameClubAsTheSqliteStore) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("holdfast-e2e-pg-" + std::to_string(::getpid()) + "-same-club");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ClubStore::Options so;
  so.path = (dir / "club.db").string();
  auto sqlite = ClubStore::open(so);
  ASSERT_TRUE(sqlite.ok()) << sqlite.status().to_string();
  ASSERT_TRUE((*sqlite)->ensure_demo_data(today()).ok());
  for (int offset : {-14, -1, 0, 3, 28}) {
    SCOPED_TRACE(offset);
    const std::string day = add_days(today(), offset);
    auto pg_games = store_->games_on(day);
    auto lite_games = (*sqlite)->games_on(day);
    ASSERT_TRUE(pg_games.ok() && lite_games.ok());
    ASSERT_EQ(pg_games->size(), lite_games->size());
    ASSERT_FALSE(pg_games->empty());
    for (std::size_t i = 0; i < pg_games->size(); ++i) {
      const Game& p = (*pg_games)[i];
      const Game& l = (*lite_games)[i];
      EXPECT_GT(p.id, 0);
      EXPECT_EQ(
          std::tie(p.court, p.activity, p.color, p.starts_at, p.ends_at, p.capacity, p.signed_up),
          std::tie(l.court, l.activity, l.color, l.starts_at, l.ends_at, l.capacity, l.signed_up));
    }
    auto pg_ctx = store_->context_on(day);
    auto lite_ctx = (*sqlite)->context_on(day);
    ASSERT_TRUE(pg_ctx.ok() && lite_ctx.ok());
    EXPECT_EQ(std::tie(pg_ctx->club_name, pg_ctx->currency, pg_ctx->courts, pg_ctx->holidays,
                       pg_ctx->payments_today, pg_ctx->cash_today_cents),
              std::tie(lite_ctx->club_name, lite_ctx->currency, lite_ctx->courts,
                       lite_ctx->holidays, lite_ctx->payments_today, lite_ctx->cash_today_cents));
  }
  sqlite->reset();
  std::filesystem::remove_all(dir);
}

TEST_P(PanelPgTest, TwoPaymentsWithTheSameIdempotencyKeyAreAppliedOnce) {
  Admin club(db_->url());
  const long long before = club.count("SELECT count(*) FROM payments");
  http_client::Headers h = cookie_;
  h.emplace("Idempotency-Key", "order-42");
  const http_client::Params form{{"amount_cents", "1250"}, {"method", "card"}};
  auto first = http_->Post("/payments", h, form);
  auto second = http_->Post("/payments", h, form);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->status, 201) << first->body;
  EXPECT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(json::parse(second->body)["replayed"], true);
  EXPECT_EQ(json::parse(first->body)["payment_id"], json::parse(second->body)["payment_id"]);
  EXPECT_EQ(club.count("SELECT count(*) FROM payments"), before + 1);
  // Keys are stored as "<user>:<route>:<key>".
  EXPECT_EQ(
      club.count("SELECT count(*) FROM idempotency_keys WHERE key LIKE '%:payments:order-42'"), 1);

  // A sign-up likewise; without a key a repeat is refused (already signed up).
  const long long game = club.count(
      "SELECT min(id) FROM games g WHERE capacity > "
      "(SELECT count(*) FROM signups s WHERE s.game_id = g.id) "
      "AND NOT EXISTS (SELECT 1 FROM signups s WHERE "
      "s.game_id = g.id AND s.user_id = 1) AND starts_at > now() AT TIME ZONE 'UTC'");
  ASSERT_GT(game, 0);
  http_client::Headers k = cookie_;
  k.emplace("Idempotency-Key", "join-7");
  const http_client::Params join{{"game_id", std::to_string(game)}};
  auto a = http_->Post("/signups", k, join);
  auto b = http_->Post("/signups", k, join);
  auto c = http_->Post("/signups", cookie_, join);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->status, 201) << a->body;
  EXPECT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(c->status, 409) << c->body;
  EXPECT_EQ(club.count("SELECT count(*) FROM signups WHERE game_id = $1 AND user_id = 1", {game}),
            1);
}

TEST_P(PanelPgTest, BadInputGets400WithAClearMessage) {
  auto bad_date = http_->Get("/dashboard/schedule?date=2026-02-30", cookie_);
  ASSERT_TRUE(bad_date);
  EXPECT_EQ(bad_date->status, 400);
  EXPECT_NE(bad_date->body.find("YYYY-MM-DD"), std::string::npos);
  auto bad_amount = http_->Post("/payments", cookie_, http_client::Params{{"amount_cents", "-5"}});
  ASSERT_TRUE(bad_amount);
  EXPECT_EQ(bad_amount->status, 400);
  EXPECT_NE(bad_amount->body.find("amount_cents"), std::string::npos);
  auto bad_method = http_->Post("/payments", cookie_,
                                http_client::Params{{"amount_cents", "100"}, {"method", "gold"}});
  ASSERT_TRUE(bad_method);
  EXPECT_EQ(bad_method->status, 400);
  EXPECT_NE(bad_method->body.find("method"), std::string::npos);
  auto bad_game = http_->Post("/signups", cookie_, http_client::Params{{"game_id", "abc"}});
  ASSERT_TRUE(bad_game);
  EXPECT_EQ(bad_game->status, 400);
  auto no_game = http_->Post("/signups", cookie_, http_client::Params{{"game_id", "99999999"}});
  ASSERT_TRUE(no_game);
  EXPECT_EQ(no_game->status, 404);
}

TEST_P(PanelPgTest, WhenThePanelsBackendsAreTerminatedTheNextPagesStillRender) {
  start_panel(/*serve_stale=*/false);  // a failure must show, not hide behind a stale copy
  expect_fresh_schedule(schedule());
  EXPECT_GT(db_->terminate_backends(), 0);  // the pools' idle connections
  expect_fresh_schedule(schedule());        // replaced at hand-out, or the read retried

  // Terminations every 100 ms for 2 s while pages load: statements cut off mid-flight are
  // retried on new connections within the page's window.
  std::atomic<bool> done{false};
  std::atomic<long long> terminated{0};
  std::thread killer([&] {
    Admin admin(pgtest::server_url());
    while (!done.load()) {
      terminated += admin.count(
          "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
          {db_->name()});
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  const auto start = Steady::now();
  int pages = 0;
  while (Steady::now() - start < seconds(2)) {
    expect_fresh_schedule(schedule());
    ++pages;
  }
  done = true;
  killer.join();
  EXPECT_GT(terminated.load(), 0);
  EXPECT_GT(pages, 0);
}

TEST_P(PanelPgTest, WhileTheGamesTableIsLockedForTwoSecondsThePageWaitsAndShowsTheSchedule) {
  start_panel(/*serve_stale=*/false);
  expect_fresh_schedule(schedule());  // connections open, a good copy would exist if allowed
  Admin locker(db_->url());
  locker.exec("BEGIN");
  locker.exec("LOCK TABLE games IN ACCESS EXCLUSIVE MODE");
  std::thread release([&] {
    std::this_thread::sleep_for(seconds(2));
    locker.exec("COMMIT");
  });
  const auto start = Steady::now();
  auto r = schedule();
  const auto took = Steady::now() - start;
  release.join();
  expect_fresh_schedule(r);
  EXPECT_GE(took, milliseconds(1500));  // it really waited for the lock
  EXPECT_LE(took, seconds(7));          // within the 6 s window plus 1 s
}

TEST_P(PanelPgTest, WhileTheGamesTableStaysLockedThePageAnswers503WithinTheWindow) {
  start_panel(/*serve_stale=*/false);
  Admin locker(db_->url());
  locker.exec("BEGIN");
  locker.exec("LOCK TABLE games IN ACCESS EXCLUSIVE MODE");
  const auto start = Steady::now();
  auto r = schedule();
  const auto took = Steady::now() - start;
  locker.exec("COMMIT");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body.substr(0, 300);
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  EXPECT_NE(r->body.find("id=\"digest\""), std::string::npos);
  EXPECT_LE(took, seconds(7));
  expect_fresh_schedule(schedule());  // and all is well once the lock is gone
}

TEST_P(PanelPgTest, ABaselineRunsOnPostgresqlTooAndCountsItsAttempts) {
  ClubStore::Options so;
  so.pg_url = db_->url();
  so.strategy = Strategy::kNone;
  auto none = ClubStore::open(so);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ((*none)->read_shield(), nullptr);
  EXPECT_EQ((*none)->sqlite_database(), nullptr);
  EXPECT_EQ((*none)->backend(), "postgresql");
  ASSERT_TRUE((*none)->ensure_demo_data(today()).ok());  // finds the club
  http_.reset();
  server_.reset();  // it uses the holdfast store
  store_ = std::move(*none);
  start_panel(/*serve_stale=*/false);
  const std::uint64_t before = store_->attempts();
  expect_fresh_schedule(schedule());
  // The session read, the session refresh, the games and the context.
  EXPECT_EQ(store_->attempts() - before, 4U);
}

TEST_P(PanelPgTest, EachDatabaseCallOfAPageIsCountedOnceWhereverTheRoutesRun) {
  // The drill's attempts per call (1.00: nothing was tried twice) must mean the same on
  // the lane, where a call's steps and retries are jobs of their own, as on the workers.
  expect_fresh_schedule(schedule());
  const std::uint64_t calls = store_->calls();
  const std::uint64_t attempts = store_->attempts();
  expect_fresh_schedule(schedule());
  // The session, the games and the context, each tried once.
  EXPECT_GE(store_->calls() - calls, 3u);
  EXPECT_EQ(store_->calls() - calls, store_->attempts() - attempts);
}

TEST(PanelPgStart, SeveralPanelsStartingOnOneDatabaseCreateTheClubOnce) {
  HOLDFAST_REQUIRE_PG_SERVER();
  ScratchDatabase db;
  std::vector<std::thread> panels;
  std::vector<Status> results(3);
  for (std::size_t i = 0; i < results.size(); ++i) {
    panels.emplace_back([&, i] {
      ClubStore::Options so;
      so.pg_url = db.url();
      auto store = ClubStore::open(so);
      results[i] = store.ok() ? (*store)->ensure_demo_data(today()) : store.status();
    });
  }
  for (auto& t : panels)
    t.join();
  for (const Status& s : results)
    EXPECT_TRUE(s.ok()) << s.to_string();
  Admin club(db.url());
  EXPECT_EQ(club.count("SELECT count(*) FROM courts"), 4);
  EXPECT_EQ(club.count("SELECT count(*) FROM games"),
            static_cast<long long>(make_demo_data(today()).games.size()));
  EXPECT_EQ(club.count("SELECT count(*) FROM users"), 60);
}

// Needs no server: nothing listens on port 1.
TEST(PanelPgStart, AnUnreachableServerOrABadUrlIsAClearStatusNamingTheUrlWithoutThePassword) {
  ClubStore::Options so;
  so.pg_url = "postgresql://panel:s3cretpw@127.0.0.1:1/club";
  auto down = ClubStore::open(so);
  ASSERT_FALSE(down.ok());
  const std::string text = down.status().to_string();
  EXPECT_NE(text.find("postgresql://panel:***@127.0.0.1:1/club"), std::string::npos) << text;
  EXPECT_EQ(text.find("s3cretpw"), std::string::npos) << text;

  so.pg_url = "postgresql://panel:s3cretpw@[::1/club";  // libpq quotes the URL back
  auto bad = ClubStore::open(so);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().to_string().find("s3cretpw"), std::string::npos)
      << bad.status().to_string();

  EXPECT_EQ(pg::redact_password("host=db port=5432 password='a b\\'c' user=app"),
            "host=db port=5432 password='***' user=app");
  EXPECT_EQ(pg::redact_password("postgresql://app@db/club?sslmode=disable&password=xyz"),
            "postgresql://app@db/club?sslmode=disable&password=***");
  EXPECT_EQ(pg::redact_password("postgresql://app@db:5432/club"), "postgresql://app@db:5432/club");
}

TEST_P(PanelPgTest, IdempotencyKeysAreScopedToUserAndRouteAndCarryTheRequestFingerprint) {
  Admin club(db_->url());
  const long long game = club.count(
      "SELECT min(id) FROM games g WHERE capacity > "
      "(SELECT count(*) FROM signups s WHERE s.game_id = g.id) + 2 AND NOT EXISTS "
      "(SELECT 1 FROM signups s WHERE s.game_id = g.id AND s.user_id IN (1, 2)) "
      "AND starts_at > now() AT TIME ZONE 'UTC'");
  ASSERT_GT(game, 0);
  hardening::expect_keys_scoped_and_fingerprinted(
      *http_, [&] { return club.count("SELECT count(*) FROM payments"); }, game);
}

TEST_P(PanelPgTest, KeysWithControlBytesOrOver255BytesAreRefusedWith400) {
  Admin club(db_->url());
  hardening::expect_nul_key_refused(*store_);
  hardening::expect_bad_keys_refused(*http_,
                                     [&] { return club.count("SELECT count(*) FROM payments"); });
}

TEST_P(PanelPgTest, TextThatIsNotUtf8IsRefusedWith400NotA500From22021) {
  Admin club(db_->url());
  hardening::expect_invalid_utf8_refused(
      *http_, [&] { return club.count("SELECT count(*) FROM payments"); });
}

TEST_P(PanelPgTest, ANulByteIsRefusedWith400NotCutByTheDriver) {
  hardening::expect_nul_bytes_refused(*http_);
}

TEST_P(PanelPgTest, AnUnknownEmailCostsOneArgon2idVerificationAsAWrongPasswordDoes) {
  hardening::expect_unknown_email_costs_what_a_wrong_password_costs(*http_);
}

TEST_P(PanelPgTest, ASignUpForAGameThatHasStartedIsRefusedWith409) {
  Admin club(db_->url());
  hardening::expect_past_game_refused(
      *http_, club.count("SELECT max(id) FROM games WHERE starts_at <= now() AT TIME ZONE 'UTC'"),
      [&] { return club.count("SELECT count(*) FROM signups"); });
}

TEST_P(PanelPgTest, ALegacyPasswordHashIsReplacedByArgon2idAtTheNextSignIn) {
  Admin club(db_->url());
  hardening::expect_legacy_hash_upgraded(
      *http_,
      [&](const std::string& email, const std::string& hash) {
        club.exec("UPDATE users SET password_hash = $1 WHERE email = $2", {hash, email});
      },
      [&](const std::string& email) {
        return std::string(
            club.exec("SELECT password_hash FROM users WHERE email = $1", {email}).text(0, 0));
      });
}

TEST_P(PanelPgTest, LogoutEndsTheSessionAndNeedsTheCsrfToken) {
  Admin club(db_->url());
  hardening::expect_logout_ends_the_session(
      *http_, [&] { return club.count("SELECT count(*) FROM sessions"); });
}

// Every entry a Logger sends it, as console lines, for the tests that read the log.
class CapturedLog final : public Sink {
 public:
  [[nodiscard]] bool accepts(Level) const noexcept override { return true; }
  void write(const LogEntry& entry) override {
    std::string line;
    format_console_line(entry, line);
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(std::move(line));
  }
  // The first line holding every one of `parts`, or "".
  std::string find(std::initializer_list<std::string_view> parts) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& line : lines_) {
      bool all = true;
      for (std::string_view p : parts)
        all = all && line.find(p) != std::string::npos;
      if (all) return line;
    }
    return {};
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Neither SQL text nor the engine's message: what a refusal's answer must not carry.
void expect_no_engine_text(const std::string& body) {
  for (const char* leak : {"SELECT", "INSERT", "permission denied", "read-only transaction",
                           "games", "payments", "42501", "25006", "postgres"}) {
    EXPECT_EQ(body.find(leak), std::string::npos) << leak << " in: " << body.substr(0, 400);
  }
}

// The panel connected as a role of its own (the test server's user is a superuser, whom no
// REVOKE restricts), with the grants an application role has on the club's tables.
class PanelPgRoleTest : public PanelPgTest {
 protected:
  void SetUp() override {
    PanelPgTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    role_ = pgtest::unique("panel_app");
    Admin server(pgtest::server_url());
    server.exec("CREATE ROLE " + role_ + " LOGIN");
    Admin club(db_->url());
    club.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + role_);
    club.exec("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO " + role_);
    http_.reset();
    server_.reset();
    ClubStore::Options so;
    so.pg_url = pgtest::url_as(db_->url(), role_);
    so.strategy = Strategy::kHoldfast;
    auto store = ClubStore::open(so);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(*store);
    Logger::Options lo;
    lo.console = false;
    logger_ = std::make_unique<Logger>(lo);
    logger_->add_sink(captured_);
    start_panel(/*serve_stale=*/true);
  }
  void TearDown() override {
    expect_served_where_asked();
    http_.reset();
    server_.reset();
    store_.reset();
    db_.reset();  // its privileges go with the database
    if (!role_.empty()) Admin(pgtest::server_url()).exec("DROP ROLE IF EXISTS " + role_);
  }

  std::string role_;
  std::shared_ptr<CapturedLog> captured_ = std::make_shared<CapturedLog>();
};

TEST_P(PanelPgRoleTest, APermissionRefusedOnAReadWithNoCopyToShowIsAServerErrorNeverSignedOut) {
  // No schedule was read yet: there is no last good copy to show.
  Admin club(db_->url());
  const long long sessions = club.count("SELECT count(*) FROM sessions");
  club.exec("REVOKE SELECT ON games FROM " + role_);

  for (int i = 0; i < 3; ++i) {
    auto page = schedule();
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 500) << page->body.substr(0, 300);
    EXPECT_FALSE(page->has_header("Location")) << page->get_header_value("Location");
    EXPECT_FALSE(page->has_header("Set-Cookie"));
    EXPECT_NE(page->body.find("not permitted"), std::string::npos) << page->body;
    EXPECT_NE(page->body.find("id=\"digest\""), std::string::npos) << page->body;
    expect_no_engine_text(page->body);
  }
  auto api = http_->Get("/api/schedule?date=" + today(), cookie_);
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 500) << api->body;
  const json j = json::parse(api->body, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(j.value("refused", ""), "not_permitted");
  EXPECT_NE(j.value("error", "").find("not permitted"), std::string::npos);
  const std::string digest = j.value("digest", "");
  ASSERT_FALSE(digest.empty());
  expect_no_engine_text(api->body);
  // The log line under that digest is an ERROR naming the SQLSTATE.
  const std::string line = captured_->find({digest, "ERROR", "42501"});
  EXPECT_FALSE(line.empty()) << "no ERROR line with digest " << digest << " and 42501";

  // Nobody was signed out, and nobody signed in again: the table did not grow.
  EXPECT_EQ(club.count("SELECT count(*) FROM sessions"), sessions);
  club.exec("GRANT SELECT ON games TO " + role_);
  expect_fresh_schedule(schedule());  // the same cookie: the session lived on
}

TEST_P(PanelPgRoleTest, APermissionRefusedOnAReadAnswersTheLastGoodCopyAsStaleAndSaysWhy) {
  expect_fresh_schedule(schedule());  // the day's last good copy
  Admin club(db_->url());
  club.exec("REVOKE SELECT ON games FROM " + role_);
  for (int i = 0; i < 3; ++i) {
    auto page = schedule();
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200) << page->body.substr(0, 300);
    EXPECT_TRUE(page->has_header("X-Holdfast-Stale"));
    EXPECT_NE(page->body.find("Schedule for " + today()), std::string::npos);
    EXPECT_NE(page->body.find("data-game="), std::string::npos);
  }
  auto api = http_->Get("/api/schedule?date=" + today(), cookie_);
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 200) << api->body.substr(0, 300);
  const json j = json::parse(api->body, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.contains("stale_as_of")) << api->body.substr(0, 300);
  // The log says why the copy was shown: an ERROR with the refusal's SQLSTATE.
  EXPECT_FALSE(captured_->find({"ERROR", "last good copy", "not permitted", "42501"}).empty());
  // Another day, never read: nothing to show, so the refusal is answered for what it is.
  auto other = http_->Get("/api/schedule?date=2001-01-01", cookie_);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 500) << other->body;
  EXPECT_NE(other->body.find("not_permitted"), std::string::npos) << other->body;
  club.exec("GRANT SELECT ON games TO " + role_);
  expect_fresh_schedule(schedule());
}

TEST_P(PanelPgTest, TheStatusPageSaysWhetherAChangeOfWriterLostConfirmedWrites) {
  auto page = http_->Get("/status", cookie_);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200) << page->body.substr(0, 300);
  EXPECT_NE(page->body.find("id=\"lost-writes\" data-missing=\"0\" data-split-brains=\"0\""),
            std::string::npos)
      << page->body;
}

TEST_P(PanelPgRoleTest, APermissionTheDatabaseRefusesOnAWriteSaysSoAndNothingIsApplied) {
  Admin club(db_->url());
  club.exec("REVOKE INSERT ON payments FROM " + role_);
  const long long before = club.count("SELECT count(*) FROM payments");
  auto paid = http_->Post("/payments", cookie_, http_client::Params{{"amount_cents", "700"}});
  ASSERT_TRUE(paid);
  EXPECT_EQ(paid->status, 500) << paid->body;
  const json j = json::parse(paid->body, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(j.value("refused", ""), "not_permitted");
  EXPECT_EQ(j.value("error", ""), "the database refused the write: not permitted");
  EXPECT_EQ(j.value("applied", ""), "no");
  EXPECT_FALSE(j.value("digest", "").empty());
  EXPECT_FALSE(captured_->find({j.value("digest", "(no digest)"), "ERROR", "42501"}).empty());
  expect_no_engine_text(paid->body);
  EXPECT_EQ(club.count("SELECT count(*) FROM payments"), before);
}

TEST_P(PanelPgRoleTest, AReadOnlyServerRefusesAPaymentWith503AndRetryAfter) {
  Admin server(pgtest::server_url());
  // Restores the server's setting however the test ends (every other test shares it).
  struct ReadOnlyServer {
    explicit ReadOnlyServer(Admin& a) : admin(a) {
      admin.exec("ALTER SYSTEM SET default_transaction_read_only = on");
      admin.exec("SELECT pg_reload_conf()");
    }
    ~ReadOnlyServer() {
      admin.exec("SET default_transaction_read_only = off");  // this session may write
      admin.exec("ALTER SYSTEM RESET default_transaction_read_only");
      admin.exec("SELECT pg_reload_conf()");
      Admin fresh(pgtest::server_url());
      EXPECT_TRUE(pgtest::eventually([&] {
        return fresh.exec("SHOW default_transaction_read_only").text(0, 0) == "off";
      })) << "the test server stayed read-only";
    }
    Admin& admin;
  };
  Admin club(db_->url());
  const long long before = club.count("SELECT count(*) FROM payments");
  Admin watcher(db_->url());  // a session opened before: it sees the reload when the panel's do
  {
    const ReadOnlyServer read_only(server);
    ASSERT_TRUE(pgtest::eventually(
        [&] { return watcher.exec("SHOW default_transaction_read_only").text(0, 0) == "on"; }));
    http_client::Headers h = cookie_;
    h.emplace("Idempotency-Key", "read-only-1");
    auto paid = http_->Post("/payments", h, http_client::Params{{"amount_cents", "900"}});
    ASSERT_TRUE(paid);
    EXPECT_EQ(paid->status, 503) << paid->body;
    EXPECT_EQ(paid->get_header_value("Retry-After"), std::to_string(kReadOnlyRetryAfterSeconds));
    const json j = json::parse(paid->body, nullptr, /*allow_exceptions=*/false);
    EXPECT_EQ(j.value("refused", ""), "read_only");
    EXPECT_EQ(j.value("error", ""), "the database refused the write: it is read-only");
    EXPECT_EQ(j.value("applied", ""), "no");
    EXPECT_EQ(j.value("retry_after_s", 0), kReadOnlyRetryAfterSeconds);
    EXPECT_FALSE(j.value("digest", "").empty());
    EXPECT_FALSE(captured_->find({j.value("digest", "(no digest)"), "ERROR", "25006"}).empty());
    expect_no_engine_text(paid->body);
    // Reads still work: the schedule is served, nobody is signed out.
    expect_fresh_schedule(schedule());
  }
  EXPECT_EQ(club.count("SELECT count(*) FROM payments"), before);
}

TEST_P(PanelPgTest, TwentyFiveSignInsOfOneUserLeaveTheNewestTwentyAndExpiredSessionsAreDeleted) {
  retention::twenty_five_sign_ins_leave_the_newest_twenty(*store_);
}

TEST_P(PanelPgTest, IdempotencyKeysOlderThanADayArePrunedAndNewerOnesKept) {
  retention::idempotency_keys_older_than_a_day_are_pruned_and_newer_ones_kept(*store_);
}

const auto kWhere = [](const ::testing::TestParamInfo<bool>& p) {
  return std::string(p.param ? "OnTheLane" : "OnTheWorkers");
};
INSTANTIATE_TEST_SUITE_P(Routes, PanelPgTest, ::testing::Bool(), kWhere);
INSTANTIATE_TEST_SUITE_P(Routes, PanelPgRoleTest, ::testing::Bool(), kWhere);

}  // namespace
}  // namespace holdfast::panel
