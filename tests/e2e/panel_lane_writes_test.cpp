// The panel's writes on HttpServer's async lane (ADR 0030), against a real SQLite file and a
// real write lock held by another connection.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "panel_fixture.hpp"
#include "raw_http.hpp"

namespace holdfast::panel {
namespace {

using PanelLaneWritesTest = PanelFixture;
using std::chrono::milliseconds;

// Eight payments and a sign-out wait on the lane for a write lock another connection holds.
// A wait for a lock is a timer wait there, so they hold none of the lane's four threads and
// the schedule, served on the same lane, answers while they wait. The lock is held until
// the page has answered, or for 4 s at most: less than busy_timeout (5 s), so writes that
// held the lane's threads in SQLite's busy handler would keep the page waiting past it.
// Once the lock goes, each payment lands exactly once and the session is ended.
TEST_F(PanelLaneWritesTest, WritesWaitingForTheWriteLockHoldNoLaneThreadAndLandOnceAfterIt) {
  auto signed_in = http_->Post(
      "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
  ASSERT_TRUE(signed_in);
  ASSERT_EQ(signed_in->status, 303);
  const std::string set = signed_in->get_header_value("Set-Cookie");
  const http_client::Headers second{{"Cookie", set.substr(0, set.find(';'))},
                                    {"X-CSRF-Token", signed_in->get_header_value("X-CSRF-Token")}};
  auto payments_before =
      store_->database().query_one<std::int64_t>("SELECT count(*) FROM payments");
  ASSERT_TRUE(payments_before.ok());
  const std::uint64_t async_before = server_->http_server()->counters().served_async.load();

  auto lock = storm(StormKind::kWrite);
  constexpr int kPayments = 8;
  std::vector<http_client::Result> paid(kPayments);
  std::vector<std::thread> clients;
  for (int i = 0; i < kPayments; ++i) {
    clients.emplace_back([&, i] {
      http_client::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(seconds(30));
      http_client::Headers h = cookie_;
      h.emplace("Idempotency-Key", "lane-" + std::to_string(i));
      paid[i] = c.Post("/payments", h, http_client::Params{{"amount_cents", "100"}});
    });
  }
  http_client::Result signed_out;
  clients.emplace_back([&] {
    http_client::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(seconds(30));
    signed_out = c.Post("/logout", second, http_client::Params{});
  });
  // Time for the writes to reach the lock. Should some not have, the test proves less; it
  // cannot fail for it.
  std::this_thread::sleep_for(milliseconds(300));

  std::atomic<bool> answered{false};
  http_client::Result page;
  std::thread reader([&] {
    http_client::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(seconds(30));
    page = c.Get("/dashboard/schedule?date=" + today(), cookie_);
    answered = true;
  });
  const auto give_up = Steady::now() + seconds(4);
  while (!answered && Steady::now() < give_up)
    std::this_thread::sleep_for(milliseconds(10));
  const bool answered_while_locked = answered.load();
  lock->end();
  reader.join();
  for (std::thread& t : clients)
    t.join();

  EXPECT_TRUE(answered_while_locked) << "the page waited behind the writes' lock waits";
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_FALSE(page->has_header("X-Holdfast-Stale"));
  for (int i = 0; i < kPayments; ++i) {
    ASSERT_TRUE(paid[i]) << "payment " << i;
    EXPECT_EQ(paid[i]->status, 201) << "payment " << i << ": " << paid[i]->body;
  }
  auto payments_after = store_->database().query_one<std::int64_t>("SELECT count(*) FROM payments");
  ASSERT_TRUE(payments_after.ok());
  EXPECT_EQ(payments_after->value_or(0) - payments_before->value_or(0), kPayments);
  auto keys = store_->database().query_one<std::int64_t>(
      "SELECT count(*) FROM idempotency_keys WHERE key LIKE '%:payments:lane-%'");
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->value_or(0), kPayments);
  ASSERT_TRUE(signed_out);
  EXPECT_EQ(signed_out->status, 303);
  auto after_sign_out = http_->Get("/api/schedule?date=" + today(), second);
  ASSERT_TRUE(after_sign_out);
  EXPECT_EQ(after_sign_out->status, 401) << "the session the sign-out ended still works";
  EXPECT_GE(server_->http_server()->counters().served_async.load() - async_before,
            std::uint64_t{kPayments} + 3)
      << "the payments, the sign-out, the page and the last read ran on the lane";
}

// The same writes with the lane off (on the workers) answer the same: 201, then 200 with
// "replayed" for a repeat of the key, and a sign-up for a full or past game refused alike.
TEST_F(PanelLaneWritesTest, OnTheLaneAPaymentAndASignUpAnswerAsOnTheWorkers) {
  const std::uint64_t before = server_->http_server()->counters().served_async.load();
  http_client::Headers h = cookie_;
  h.emplace("Idempotency-Key", "same-answers");
  const http_client::Params form{{"amount_cents", "700"}, {"method", "cash"}};
  auto first = http_->Post("/payments", h, form);
  auto repeat = http_->Post("/payments", h, form);
  auto other = http_->Post("/payments", h, http_client::Params{{"amount_cents", "701"}});
  auto no_game = http_->Post("/signups", cookie_, http_client::Params{{"game_id", "999999"}});
  ASSERT_TRUE(first && repeat && other && no_game);
  const std::uint64_t on_lane = server_->http_server()->counters().served_async.load() - before;

  async_lane_ = false;
  TearDown();
  SetUp();
  http_client::Headers w = cookie_;
  w.emplace("Idempotency-Key", "same-answers");
  auto first_w = http_->Post("/payments", w, form);
  auto repeat_w = http_->Post("/payments", w, form);
  auto other_w = http_->Post("/payments", w, http_client::Params{{"amount_cents", "701"}});
  auto no_game_w = http_->Post("/signups", cookie_, http_client::Params{{"game_id", "999999"}});
  ASSERT_TRUE(first_w && repeat_w && other_w && no_game_w);

  EXPECT_EQ(on_lane, 4u);
  EXPECT_EQ(server_->http_server()->counters().served_async.load(), 0u);
  EXPECT_EQ(first->status, 201);
  EXPECT_EQ(first->status, first_w->status);
  EXPECT_EQ(repeat->status, 200);
  EXPECT_NE(repeat->body.find("\"replayed\":true"), std::string::npos) << repeat->body;
  EXPECT_EQ(repeat->status, repeat_w->status);
  EXPECT_EQ(other->status, 422);
  EXPECT_EQ(other->status, other_w->status);
  EXPECT_EQ(other->body, other_w->body);
  EXPECT_EQ(no_game->status, 404);
  EXPECT_EQ(no_game->status, no_game_w->status);
  EXPECT_EQ(no_game->body, no_game_w->body);
}

// Eight sign-ins at once from eight addresses, for eight users (so that neither throttle
// stops them), on a panel that allows one password check at a time and none to wait: the
// first is checked, and the ones that come while it runs are answered 503 + Retry-After at
// once, without waiting for a place. Each place is given back: a sign-in afterwards
// succeeds. (The gate's queue and its order: panel_hardening_test.cpp.)
TEST_F(PanelLaneWritesTest, PastMaxPasswordChecksASignInIsTurnedAwayAtOnceWith503) {
  PanelServer::Options po;
  po.store = store_.get();
  po.logger = logging_.logger.get();
  po.max_password_checks = 1;
  po.password_check_queue = 0;
  PanelServer one_at_a_time(po);
  ASSERT_TRUE(one_at_a_time.start().ok());
  const int port = one_at_a_time.port();
  const auto sign_in = [port](const std::string& first, const std::string& source) {
    const std::string body = "email=" + first + ".Nowak%40club.example&password=demo";
    return rawhttp::request_from(port, source.c_str(),
                                 "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                 "application/x-www-form-urlencoded\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body);
  };
  const std::vector<std::string> users = {"Bartek", "Chi",  "Dorota", "Emil",
                                          "Fang",   "Igor", "Jana",   "Khanh"};
  std::vector<std::string> answers(users.size());
  std::atomic<bool> go{false};
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < users.size(); ++i) {
    clients.emplace_back([&, i] {
      while (!go)
        std::this_thread::yield();
      answers[i] = sign_in(users[i], "127.0.0." + std::to_string(10 + i));
    });
  }
  go = true;
  for (std::thread& t : clients)
    t.join();
  int signed_in = 0;
  int turned_away = 0;
  for (const std::string& a : answers) {
    if (a.rfind("HTTP/1.1 303", 0) == 0) ++signed_in;
    if (a.rfind("HTTP/1.1 503", 0) == 0) {
      ++turned_away;
      EXPECT_NE(a.find("Retry-After: 1"), std::string::npos) << a;
      EXPECT_NE(a.find("busy signing others in"), std::string::npos) << a;
    }
  }
  EXPECT_GE(signed_in, 1);
  EXPECT_GE(turned_away, 1) << "every sign-in was checked: the limit of one did not hold";
  EXPECT_EQ(signed_in + turned_away, static_cast<int>(users.size()));
  const std::string later = sign_in("Lena", "127.0.0.30");
  EXPECT_EQ(later.rfind("HTTP/1.1 303", 0), 0u) << "a place was not given back: " << later;
}

}  // namespace
}  // namespace holdfast::panel
