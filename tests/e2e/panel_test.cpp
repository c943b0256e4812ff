// The demo panel over HTTP on loopback, against a real SQLite file and real lock storms.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "holdfast/core/shield.hpp"
#include "panel_fixture.hpp"
#include "retention_checks.hpp"

namespace holdfast::panel {
namespace {

class PanelTest : public PanelFixture {
 protected:
  // A payment with `key` (and `extra` headers) made during a write lock that outlasts the
  // window: refused with 503, "applied":"no", within `within`, and not applied.
  void expect_refused_during_write_lock(const std::string& key, const http_client::Headers& extra,
                                        std::chrono::milliseconds within) {
    auto lock = storm(StormKind::kWrite);
    http_client::Headers h = cookie_;
    h.emplace("Idempotency-Key", key);
    h.insert(extra.begin(), extra.end());
    const auto start = Steady::now();
    auto r = http_->Post("/payments", h, http_client::Params{{"amount_cents", "900"}});
    const auto took = Steady::now() - start;
    lock->end();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    EXPECT_NE(r->body.find("\"applied\":\"no\""), std::string::npos) << r->body;
    EXPECT_LE(took, within);
    auto n = store_->database().query_one<std::int64_t>(
        "SELECT count(*) FROM idempotency_keys WHERE key LIKE '%:payments:" + key + "'");
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n->value_or(-1), 0);
  }
};

TEST_F(PanelTest, TheScheduleRenders) {
  auto r = schedule();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("Schedule for " + today()), std::string::npos);
  EXPECT_NE(r->body.find("Riverside Court Club"), std::string::npos);
  EXPECT_NE(r->body.find("data-game="), std::string::npos);
  auto api = http_->Get("/api/schedule?date=" + today(), cookie_);
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 200);
  EXPECT_NE(api->body.find("\"games\":[{"), std::string::npos);
}

TEST_F(PanelTest, WithoutASessionThePageSendsYouToLogin) {
  http_client::Client anon("127.0.0.1", server_->port());
  auto r = anon.Get("/dashboard/schedule");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(r->get_header_value("Location"), "/login");
}

TEST_F(PanelTest, ASignInLinkWorksOnceAndOnlyRedirectsOnThisServer) {
  auto user = store_->user_id_by_email("Ada.Nowak@club.example");
  ASSERT_TRUE(user.ok() && user->has_value());
  const std::string link = server_->issue_sign_in_link(**user, "/api/schedule?date=" + today());
  http_client::Client browser("127.0.0.1", server_->port());
  auto first = browser.Get(link);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 303);
  EXPECT_EQ(first->get_header_value("Location"), "/api/schedule?date=" + today());
  const std::string set = first->get_header_value("Set-Cookie");
  EXPECT_NE(set.find("HttpOnly"), std::string::npos);
  auto page = browser.Get("/api/schedule?date=" + today(),
                          http_client::Headers{{"Cookie", set.substr(0, set.find(';'))}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);

  auto again = browser.Get(link);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 403) << "a link works once";
  EXPECT_FALSE(again->has_header("Set-Cookie"));
  auto forged = browser.Get("/login/link?token=0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403);
  // Somewhere else is not a place a link sends you.
  for (const char* next : {"//evil.example/", "https://evil.example/", "dashboard"}) {
    auto r = browser.Get(server_->issue_sign_in_link(**user, next));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->get_header_value("Location"), "/dashboard/schedule") << next;
  }
}

TEST_F(PanelTest, DuringAThreeSecondWriteLockThePageStillShowsTheSchedule) {
  auto lock = storm(StormKind::kWrite);
  const auto start = Steady::now();
  for (int i = 0; i < 5; ++i) {
    auto r = schedule();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));  // WAL readers are not blocked
  }
  while (Steady::now() - start < seconds(3))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  lock->end();
}

// A batch job holds the write lock: writes fail and open the write breaker, while WAL reads
// go on — the pages must not be shed as stale or 503 by the writes' breaker.
TEST_F(PanelTest, WhileAWriteLockOpensTheWriteBreakerPagesAreStillServedFresh) {
  auto lock = storm(StormKind::kWrite);
  auto user = store_->user_id_by_email("Ada.Nowak@club.example");
  ASSERT_TRUE(user.ok() && user->has_value());
  for (int i = 0; i < 8 && store_->write_shield()->breaker().state() == BreakerState::kClosed;
       ++i) {
    RequestScope scope(std::chrono::milliseconds(300));
    auto paid = store_->pay(**user, 500, "cash", "", "2026-01-01T00:00:00Z");
    EXPECT_FALSE(paid.ok());
  }
  ASSERT_NE(store_->write_shield()->breaker().state(), BreakerState::kClosed);
  for (int i = 0; i < 5; ++i) {
    auto r = schedule();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));
  }
  EXPECT_EQ(store_->read_shield()->breaker().state(), BreakerState::kClosed);
  lock->end();
}

TEST_F(PanelTest, DuringAThreeSecondReadLockThePageStillShowsTheSchedule) {
  auto lock = storm(StormKind::kRead);
  std::thread release([&] {
    std::this_thread::sleep_for(seconds(3));
    lock->end();
  });
  auto r = schedule();  // waits inside its 6 s window for the lock to go
  release.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("Schedule for"), std::string::npos);
}

// The schedule on the async lane (ADR 0029, the panel's default): the same page, and it
// waits out a short read lock within its window, its waits holding no thread.
TEST_F(PanelTest, OnTheAsyncLaneThePageRendersAndWaitsOutAThreeSecondReadLock) {
  const std::uint64_t before = server_->http_server()->counters().served_async.load();
  auto first = schedule();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_NE(first->body.find("Schedule for"), std::string::npos);
  auto lock = storm(StormKind::kRead);
  std::thread release([&] {
    std::this_thread::sleep_for(seconds(3));
    lock->end();
  });
  auto r = schedule();
  release.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("Schedule for"), std::string::npos);
  EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));
  auto json = http_->Get("/api/schedule?date=" + today(), cookie_);
  ASSERT_TRUE(json);
  EXPECT_EQ(json->status, 200);
  EXPECT_EQ(server_->http_server()->counters().served_async.load() - before, 3u);
}

// A read lock a little longer than busy_timeout (5 s) and shorter than the window (6 s):
// the first attempt gives up at 5 s, and the Shield's retry gets the fresh page when the
// lock goes. (A one-attempt failure that carried a StopReason would have been final.)
TEST_F(PanelTest, OnTheAsyncLaneALockLongerThanTheBusyTimeoutIsRiddenOutByARetry) {
  const std::uint64_t before = server_->http_server()->counters().served_async.load();
  auto lock = storm(StormKind::kRead);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5400));
    lock->end();
  });
  auto r = schedule();
  release.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("X-Holdfast-Stale")) << "a fresh page, not the last good copy";
  EXPECT_EQ(server_->http_server()->counters().served_async.load() - before, 1u);
}

TEST_F(PanelTest, DuringATwentySecondReadLockItAnswers503WithRetryAfterWithinTheWindow) {
  serve_stale_ = false;  // this test's server was built with stale pages on: rebuild without
  TearDown();
  SetUp();
  auto lock = storm(StormKind::kRead);
  const auto start = Steady::now();
  auto r = schedule();
  const auto took = Steady::now() - start;
  lock->end();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  EXPECT_NE(r->body.find("id=\"digest\""), std::string::npos);
  EXPECT_LE(took, seconds(7));  // the 6 s window plus 1 s
}

TEST_F(PanelTest, DuringATwentySecondReadLockItServesTheLastGoodScheduleWithABanner) {
  ASSERT_EQ(schedule()->status, 200);  // a good copy to fall back on
  auto lock = storm(StormKind::kRead);
  const auto start = Steady::now();
  auto r = schedule();
  const auto took = Steady::now() - start;
  lock->end();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->has_header("X-Holdfast-Stale"));
  EXPECT_NE(r->body.find("id=\"stale-banner\""), std::string::npos);
  EXPECT_LE(took, seconds(7));
}

TEST_F(PanelTest, DuringAReadLockTheLastGoodScheduleGoesOnlyToSessionsTheDatabaseConfirmed) {
  ASSERT_EQ(schedule()->status, 200);  // a good copy, and this session confirmed
  auto lock = storm(StormKind::kRead);
  // While the database cannot check a cookie, a made-up one must not pass for a session.
  // (Both at once: each waits out its window.)
  http_client::Result forged;
  std::thread attacker([&] {
    http_client::Client other("127.0.0.1", server_->port());
    other.set_read_timeout(seconds(30));
    forged = other.Get("/api/schedule?date=" + today(),
                       http_client::Headers{{"Cookie", "session=made-up-by-an-attacker"}});
  });
  auto mine = http_->Get("/api/schedule?date=" + today(), cookie_);
  attacker.join();
  lock->end();
  ASSERT_TRUE(forged);
  ASSERT_TRUE(mine);
  EXPECT_EQ(forged->status, 503) << forged->body;
  EXPECT_FALSE(forged->has_header("X-Holdfast-Stale"));
  EXPECT_EQ(forged->body.find("games"), std::string::npos) << forged->body;
  EXPECT_EQ(mine->status, 200);
  EXPECT_TRUE(mine->has_header("X-Holdfast-Stale"));
}

TEST_F(PanelTest, StaleCopiesAreBoundedWhateverDatesClientsAskForAndTheLatestIsKept) {
  // Every date a client asks for leaves a copy; a client walking the calendar must not
  // grow them without end.
  int asked = 0;
  for (int month = 1; month <= 12 && asked < 100; ++month) {
    for (int day = 1; day <= 28 && asked < 100; ++day, ++asked) {
      char date[16];
      std::snprintf(date, sizeof(date), "2031-%02d-%02d", month, day);
      auto r = http_->Get(std::string("/api/schedule?date=") + date, cookie_);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << date;
    }
  }
  EXPECT_EQ(server_->stale_copies(), PanelServer::kStaleCopies);
  // The page read last still has its copy to answer from.
  ASSERT_EQ(schedule()->status, 200);
  EXPECT_EQ(server_->stale_copies(), PanelServer::kStaleCopies);
  auto lock = storm(StormKind::kRead);
  auto r = schedule();
  lock->end();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->has_header("X-Holdfast-Stale"));
}

TEST_F(PanelTest, DuringATwentySecondWriteLockAPaymentIsRefusedWithinTheWindowAndNotApplied) {
  // The 6 s window plus 1 s, busy waits included.
  expect_refused_during_write_lock("during-lock", {}, std::chrono::milliseconds(7000));
}

TEST_F(PanelTest, BehindAProxyThatWaitsLessThanTheWindowAPaymentIsAnsweredBeforeItGivesUp) {
  // Envoy says how long it waits; the panel stops retrying then, so its 503 (not applied,
  // with Retry-After) reaches the client instead of the proxy's own timeout: its 0.8 s plus
  // 1 s, as the window's.
  expect_refused_during_write_lock("behind-a-proxy", {{"x-envoy-expected-rq-timeout-ms", "800"}},
                                   std::chrono::milliseconds(1800));
}

TEST_F(PanelTest, AnUpstreamTimeoutThatIsNotWholeMillisecondsIsRefusedByName) {
  for (const char* bad : {"soon", "-5", "0", "1.5", "99999999999999999999"}) {
    http_client::Headers h = cookie_;
    h.emplace("x-envoy-expected-rq-timeout-ms", bad);
    auto r = http_->Get("/dashboard/schedule", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_NE(r->body.find("x-envoy-expected-rq-timeout-ms"), std::string::npos) << bad;
  }
}

TEST_F(PanelTest, TheNaiveBaselineStillRetriesWhatTheDriverGaveUpOn) {
  // The baselines call the library with a single-attempt policy and retry in their own loop;
  // the driver's "gave up" mark must not stop that loop (the drill compares their retries).
  ClubStore::Options so;
  so.path = path_;
  so.strategy = Strategy::kNaive;
  so.busy_timeout = std::chrono::milliseconds(50);
  auto naive = ClubStore::open(so);
  ASSERT_TRUE(naive.ok()) << naive.status().to_string();
  auto lock = storm(StormKind::kWrite);
  const std::uint64_t before = (*naive)->attempts();
  Status s = (*naive)->record_report("/x", "0123456789", "note", "2026-12-01T12:00:00.000Z");
  lock->end();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ((*naive)->attempts() - before, 4u) << "one attempt and the naive loop's 3 more";
}

TEST_F(PanelTest, TwoPaymentsWithTheSameIdempotencyKeyAreAppliedOnce) {
  http_client::Headers h = cookie_;
  h.emplace("Idempotency-Key", "order-42");
  const http_client::Params form{{"amount_cents", "1250"}, {"method", "card"}};
  auto first = http_->Post("/payments", h, form);
  auto second = http_->Post("/payments", h, form);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->status, 201);
  EXPECT_EQ(second->status, 200);
  EXPECT_NE(second->body.find("\"replayed\":true"), std::string::npos);
  auto n = store_->database().query_one<std::int64_t>(
      "SELECT count(*) FROM idempotency_keys WHERE key LIKE '%:payments:order-42'");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->value_or(0), 1);
}

TEST_F(PanelTest, BadInputGets400WithAClearMessage) {
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
  auto bad_game = http_->Post("/signups", cookie_, http_client::Params{{"game_id", "abc"}});
  ASSERT_TRUE(bad_game);
  EXPECT_EQ(bad_game->status, 400);
}

TEST_F(PanelTest, MetricsAndHealthAnswer) {
  ASSERT_EQ(schedule()->status, 200);
  auto m = http_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("holdfast_panel_database_attempts_total{strategy=\"holdfast\"}"),
            std::string::npos);
  // Both Shields, under one HELP/TYPE per family (a repeated TYPE line is invalid).
  EXPECT_NE(m->body.find("holdfast_attempts_total{db=\"club.reads\"}"), std::string::npos);
  EXPECT_NE(m->body.find("holdfast_attempts_total{db=\"club.writes\"}"), std::string::npos);
  const std::string type = "# TYPE holdfast_attempts_total counter";
  const std::size_t first = m->body.find(type);
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(m->body.find(type, first + 1), std::string::npos);
  // The HTTP server's own: the sign-in and the page ran on the async lane.
  EXPECT_NE(
      m->body.find("holdfast_panel_http_served_total{strategy=\"holdfast\",lane=\"async\"} 2"),
      std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("holdfast_panel_http_shed_total{strategy=\"holdfast\"} 0"),
            std::string::npos);
  auto h = http_->Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->body, "ok\n");
}

// An environment variable for the length of a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// `holdfast panel` (and the drill's holdfast) take the Shields' options from the policy
// file HOLDFAST_POLICY names; a file with a mistake stops the store from opening, saying
// where the mistake is; the baselines have no Shield to give it to.
TEST(PanelPolicy, HoldfastPolicyGivesTheShieldsTheirOptionsAndABadFileIsRefused) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("holdfast-policy-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string policy = (dir / "policy.json").string();
  std::ofstream(policy) << R"({"reads": {"max_attempts": 3, "window": "2s"},
                               "breaker": {"open_initial": "400ms", "open_max": "8s"}})";
  ClubStore::Options o;
  o.path = (dir / "club.db").string();
  {
    const ScopedEnv env("HOLDFAST_POLICY", policy);
    Result<std::unique_ptr<ClubStore>> store = ClubStore::open(o);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    ASSERT_NE((*store)->read_shield(), nullptr);
    EXPECT_EQ((*store)->read_shield()->reads().max_attempts(), 3);
    EXPECT_EQ((*store)->read_shield()->reads().window(), std::chrono::seconds(2));
    EXPECT_EQ((*store)->write_shield()->breaker().options().open_initial,
              std::chrono::milliseconds(400));
    EXPECT_TRUE((*store)->ensure_demo_data("2026-12-01").ok());

    ClubStore::Options baseline = o;
    baseline.strategy = Strategy::kNaive;
    Result<std::unique_ptr<ClubStore>> naive = ClubStore::open(baseline);
    ASSERT_TRUE(naive.ok()) << naive.status().to_string();
    EXPECT_EQ((*naive)->read_shield(), nullptr);
  }
  std::ofstream(policy) << R"({"reads": {"max_attempt": 3}})";
  {
    const ScopedEnv env("HOLDFAST_POLICY", policy);
    Result<std::unique_ptr<ClubStore>> store = ClubStore::open(o);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
    const std::string message(store.status().message());
    EXPECT_NE(message.find("HOLDFAST_POLICY"), std::string::npos) << message;
    EXPECT_NE(message.find("/reads/max_attempt"), std::string::npos) << message;
  }
  std::filesystem::remove_all(dir);
}

TEST_F(PanelTest, TwentyFiveSignInsOfOneUserLeaveTheNewestTwentyAndExpiredSessionsAreDeleted) {
  retention::twenty_five_sign_ins_leave_the_newest_twenty(*store_);
}

TEST_F(PanelTest, IdempotencyKeysOlderThanADayArePrunedAndNewerOnesKept) {
  retention::idempotency_keys_older_than_a_day_are_pruned_and_newer_ones_kept(*store_);
}

}  // namespace
}  // namespace holdfast::panel
