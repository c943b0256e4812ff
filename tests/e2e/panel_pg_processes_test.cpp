// Read-your-writes across panel processes (issue 14): two `holdfast panel --pg ...
// --pg-replica ...` processes on one database, its real streaming standby as their replica,
// replay paused there for real (pg_wal_replay_pause()). A payment made through process A
// comes back with the hf_wal cookie; process B, which remembers nothing of it, must then
// read the client's page from the primary, while a client without the cookie may still get
// the standby's older page.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "club_store.hpp"
#include "drill_pg_process.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/log/logger.hpp"
#include "holdfast/pg/lsn.hpp"
#include "http_client.hpp"
#include "pg_scratch_database.hpp"
#include "pg_test_support.hpp"
#include "server.hpp"

namespace holdfast::panel {
namespace {

namespace fs = std::filesystem;
using pgtest::Admin;
using pgtest::ReplayPause;
using std::chrono::seconds;

std::string today() {
  return std::string(utc_stamp(WallClock::system().now()).view().substr(0, 10));
}

// `holdfast panel` on `url` with `replica` as its standby, on a free port; stopped (SIGTERM,
// by its pid) when destroyed.
class PanelProcess {
 public:
  PanelProcess(const std::string& url, const std::string& replica, const fs::path& output)
      : PanelProcess(url, std::vector<std::string>{replica}, output) {}
  PanelProcess(const std::string& url, const std::vector<std::string>& replicas,
               const fs::path& output) {
    std::vector<std::string> args = {HOLDFAST_EXE, "panel", "--pg", url, "--port", "0"};
    for (const std::string& replica : replicas) {
      args.push_back("--pg-replica");
      args.push_back(replica);
    }
    Result<drill::ChildProcess> p = drill::ChildProcess::spawn(args, {}, output.string());
    if (!p.ok()) {
      ADD_FAILURE() << p.status().to_string();
      return;
    }
    process_ = std::move(*p);
    Result<int> port =
        drill::wait_for_port(process_, output.string(), drill::kPanelReady, seconds(60));
    if (port.ok()) {
      port_ = *port;
    } else {
      ADD_FAILURE() << port.status().to_string();
    }
  }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] int pid() const { return process_.pid(); }
  // Its threads now (/proc/PID/task).
  [[nodiscard]] long threads() const {
    const fs::path tasks = fs::path("/proc") / std::to_string(process_.pid()) / "task";
    std::error_code ec;
    long n = 0;
    for (auto it = fs::directory_iterator(tasks, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      ++n;
    }
    return n;
  }

 private:
  drill::ChildProcess process_;
  int port_ = 0;
};

// Whether the standby replays, within 30 s (its receiver may be reconnecting after another
// test terminated backends: wal_retrieve_retry_interval is 5 s), everything the primary has
// committed by now. The flush position, not the insert position: WAL inserted after the last commit
// (a hint bit's page image, say) may sit in a partly filled page that nothing flushes while the
// server is idle, and a standby never receives what was not flushed.
testing::AssertionResult standby_caught_up(Admin& primary, Admin& standby) {
  const std::string now(primary.exec("SELECT pg_current_wal_flush_lsn()::text").text(0, 0));
  if (pgtest::eventually(
          [&] {
            return standby.exec("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", {now})
                       .text(0, 0) == "t";
          },
          std::chrono::milliseconds(30'000))) {
    return testing::AssertionSuccess();
  }
  return testing::AssertionFailure()
         << "the standby did not replay " << now << " within 30 s; standby: "
         << standby
                .exec(
                    "SELECT coalesce(pg_last_wal_receive_lsn()::text, '-') || ' received, ' || "
                    "coalesce(pg_last_wal_replay_lsn()::text, '-') || ' replayed, ' || "
                    "pg_get_wal_replay_pause_state() || ', receiver ' || coalesce((SELECT "
                    "status FROM pg_stat_wal_receiver), 'none')")
                .text(0, 0);
}

// The whole Set-Cookie line `r` sets for cookie `name`, or "".
std::string set_cookie_line(const http_client::Response& r, const std::string& name) {
  const auto [from, to] = r.headers.equal_range("Set-Cookie");
  for (auto it = from; it != to; ++it) {
    if (it->second.rfind(name + "=", 0) == 0) return it->second;
  }
  return {};
}

// "name=value" of a Set-Cookie line.
std::string cookie_pair(const std::string& line) {
  return line.substr(0, line.find(';'));
}

// A sign-in's session cookie ("name=value") and CSRF token.
struct SignedIn {
  std::string session;
  std::string csrf;
};

// Signs in as the demo user through `http`; empty (and a failure) when the sign-in was not
// the 303 it should be.
SignedIn sign_in(http_client::Client& http) {
  auto login = http.Post(
      "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
  if (!login || login->status != 303) {
    ADD_FAILURE() << "sign-in: " << (login ? login->body : std::string("no answer"));
    return {};
  }
  return {cookie_pair(set_cookie_line(*login, "session")), login->get_header_value("X-CSRF-Token")};
}

// "Today's payments" on a fresh schedule page loaded with `cookie`; -1 when the answer is
// not a fresh page.
long long payments_on_page(http_client::Client& http, const std::string& cookie) {
  auto r = http.Get("/dashboard/schedule?date=" + today(), {{"Cookie", cookie}});
  if (!r) {
    ADD_FAILURE() << "no answer";
    return -1;
  }
  EXPECT_EQ(r->status, 200) << r->body.substr(0, 300);
  EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));
  static constexpr std::string_view kMark = "today's payments: ";
  const std::size_t at = r->body.find(kMark);
  if (r->status != 200 || at == std::string::npos) return -1;
  return std::atoll(r->body.c_str() + at + kMark.size());
}

TEST(PanelPgProcesses, TheWritePositionCookieMakesAnotherProcessReadTheClientsOwnPayment) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  ScratchDatabase db;
  Admin primary(pgtest::server_url());
  Admin standby(pgtest::standby_url());
  ASSERT_TRUE(standby_caught_up(primary, standby));  // the database exists there too
  const std::string replica = url_for_database(pgtest::standby_url(), db.name());
  const fs::path dir = fs::temp_directory_path() / pgtest::unique("holdfast-e2e-wal-cookie");
  fs::create_directories(dir);
  PanelProcess a(db.url(), replica, dir / "a.log");  // creates the club
  ASSERT_GT(a.port(), 0);
  PanelProcess b(db.url(), replica, dir / "b.log");
  ASSERT_GT(b.port(), 0);
  http_client::Client via_a("127.0.0.1", a.port());
  http_client::Client via_b("127.0.0.1", b.port());
  via_a.set_read_timeout(seconds(30));
  via_b.set_read_timeout(seconds(30));

  auto login = via_a.Post(
      "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
  ASSERT_TRUE(login);
  ASSERT_EQ(login->status, 303) << login->body;
  const std::string session = cookie_pair(set_cookie_line(*login, "session"));
  const std::string signed_in = set_cookie_line(*login, "hf_wal");
  ASSERT_FALSE(signed_in.empty());  // the sign-in wrote: its position comes with it
  for (const char* attribute : {"; Path=/", "; HttpOnly", "; SameSite=Lax", "; Max-Age=300"}) {
    EXPECT_NE(signed_in.find(attribute), std::string::npos) << signed_in;
  }
  EXPECT_EQ(signed_in.find("Secure"), std::string::npos);  // no --secure-cookies
  ASSERT_TRUE(standby_caught_up(primary, standby));
  const long long before = payments_on_page(via_b, session);
  ASSERT_GE(before, 0);

  ReplayPause pause(standby);
  ASSERT_TRUE(pause.paused());
  auto paid = via_a.Post("/payments",
                         {{"Cookie", session + "; " + cookie_pair(signed_in)},
                          {"X-CSRF-Token", login->get_header_value("X-CSRF-Token")}},
                         http_client::Params{{"amount_cents", "1250"}, {"method", "card"}});
  ASSERT_TRUE(paid);
  ASSERT_EQ(paid->status, 201) << paid->body;
  const std::string wal = cookie_pair(set_cookie_line(*paid, "hf_wal"));
  ASSERT_FALSE(wal.empty());
  Result<pg::Lsn> position = pg::Lsn::parse(wal.substr(wal.find('=') + 1));
  ASSERT_TRUE(position.ok()) << wal;
  EXPECT_EQ(standby.exec("SELECT pg_last_wal_replay_lsn() < $1::pg_lsn", {position->to_string()})
                .text(0, 0),
            "t");  // the standby has not replayed the payment

  // B never saw the payment: only the cookie tells it to read this client's page from the
  // primary.
  EXPECT_EQ(payments_on_page(via_b, session + "; " + wal), before + 1);
  // A client without it (fresh, or whose cookie expired) may get the standby's older page,
  // or the primary's once B has seen the standby lag for max_replica_lag (1 s): a loaded
  // machine may take that long. Either way it gets the page.
  const auto older_or_newer = [&](long long n) { return n == before || n == before + 1; };
  EXPECT_PRED1(older_or_newer, payments_on_page(via_b, session));
  // A cookie that is no position is ignored: the page, from wherever B likes.
  for (const std::string& junk :
       {std::string("hf_wal=zz/12"), std::string("hf_wal=1/2/3"), std::string("hf_wal=-1/0"),
        std::string("hf_wal=") + std::string(200, 'F'), std::string("hf_wal=0/0")}) {
    SCOPED_TRACE(junk);
    EXPECT_PRED1(older_or_newer, payments_on_page(via_b, session + "; " + junk));
  }

  pause.resume();
  EXPECT_TRUE(pgtest::eventually([&] { return payments_on_page(via_b, session) == before + 1; },
                                 std::chrono::milliseconds(10'000)));
  // The standby's breaker is in /metrics with the reads' and writes' (the drill reads it).
  auto metrics = via_b.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("holdfast_breaker_state{db=\"club.reads-replica-1\""),
            std::string::npos)
      << metrics->body.substr(0, 2000);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Several standbys are one list of hosts for the lane's Client (pg::any_of()): with the
// first one down, the pages are read from the other, on the event loop (no blocking jobs).
TEST(PanelPgProcesses, WithTwoStandbysTheFirstOneDownThePagesAreReadFromTheOther) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  ScratchDatabase db;
  Admin primary(pgtest::server_url());
  Admin standby(pgtest::standby_url());
  ASSERT_TRUE(standby_caught_up(primary, standby));
  const std::string replica = url_for_database(pgtest::standby_url(), db.name());
  // The same standby URL on a port nobody listens on (9: discard, refused at once).
  const std::size_t colon = replica.find(':', replica.find("@"));
  ASSERT_NE(colon, std::string::npos) << replica;
  const std::string down =
      replica.substr(0, colon) + ":9" + replica.substr(replica.find('/', colon));
  const fs::path dir = fs::temp_directory_path() / pgtest::unique("holdfast-e2e-two-standbys");
  fs::create_directories(dir);
  PanelProcess panel(db.url(), {down, replica}, dir / "panel.log");
  ASSERT_GT(panel.port(), 0);
  http_client::Client via("127.0.0.1", panel.port());
  via.set_read_timeout(seconds(30));
  const std::string session = sign_in(via).session;
  ASSERT_FALSE(session.empty());
  ASSERT_TRUE(standby_caught_up(primary, standby));
  Admin standby_db(replica);
  const auto served_by_standby = [&] {
    return standby_db.count(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()");
  };
  const long long before = served_by_standby();
  for (int i = 0; i < 10; ++i)
    EXPECT_GE(payments_on_page(via, session), 0);
  // Statistics reach pg_stat_database within a second or so (PostgreSQL 15's stats flush).
  long long after = served_by_standby();
  for (int i = 0; i < 30 && after < before + 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    standby_db.exec("SELECT pg_stat_clear_snapshot()");
    after = served_by_standby();
  }
  EXPECT_GE(after, before + 10) << "the standby did not serve the pages' reads";
  const std::string log = drill::read_text((dir / "panel.log").string());
  EXPECT_EQ(log.find("served on the workers"), std::string::npos) << log;
  // On the event loop like a panel with one standby: no pool of threads for blocking reads
  // (which took 4 read connections x 3 copies + the writes' before).
  PanelProcess one(db.url(), replica, dir / "one.log");
  ASSERT_GT(one.port(), 0);
  http_client::Client via_one("127.0.0.1", one.port());
  via_one.set_read_timeout(seconds(30));
  for (int i = 0; i < 10; ++i)
    EXPECT_GE(payments_on_page(via_one, session), 0);
  EXPECT_LE(panel.threads(), one.threads() + 3)
      << "two standbys: " << panel.threads() << " threads, one standby: " << one.threads();
}

// Issue 45, item 3: with --pg-replica the standby answers the payment's session read, so its
// write is the only work in flight on the primary when the primary freezes. It must be
// answered once the silence is found (about 1 s), not after its whole 6 s window. A private
// primary and standby: the freeze (SIGSTOP of the postmaster and its backends) is real.
TEST(PanelPgProcesses, WithAStandbyAPaymentInFlightWhenThePrimaryFreezesIsAnsweredWithinASecond) {
  HOLDFAST_REQUIRE_PG_SERVER();
  pgtest::PrivateServer servers(30, /*with_standby=*/true);
  ASSERT_FALSE(servers.standby_url().empty()) << "the private standby did not start";
  const fs::path dir = fs::temp_directory_path() / pgtest::unique("holdfast-e2e-freeze");
  fs::create_directories(dir);
  PanelProcess panel(servers.url(), servers.standby_url(), dir / "panel.log");
  ASSERT_GT(panel.port(), 0);
  http_client::Client http("127.0.0.1", panel.port());
  http.set_read_timeout(seconds(30));
  const SignedIn signed_in = sign_in(http);
  const std::string& session = signed_in.session;
  ASSERT_FALSE(session.empty());
  Admin primary(servers.url());
  Admin standby(servers.standby_url());
  ASSERT_TRUE(standby_caught_up(primary, standby));  // the session is there too

  // The payment waits on a lock, so that it is surely in flight when the primary freezes.
  Admin locker(servers.url());
  locker.exec("BEGIN");
  locker.exec("LOCK TABLE payments IN ACCESS EXCLUSIVE MODE");
  std::optional<http_client::Result> paid;
  std::chrono::steady_clock::time_point answered;
  std::thread payer([&] {
    paid = http.Post("/payments", {{"Cookie", session}, {"X-CSRF-Token", signed_in.csrf}},
                     http_client::Params{{"amount_cents", "1250"}, {"method", "card"}});
    answered = std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto frozen_at = std::chrono::steady_clock::now();
  std::optional<pgtest::Freeze> freeze;
  freeze.emplace(servers.postmaster_pid());
  payer.join();
  ASSERT_TRUE(freeze->frozen());
  freeze->thaw();
  ASSERT_TRUE(paid.has_value() && *paid);
  const double waited = std::chrono::duration<double>(answered - frozen_at).count();
  EXPECT_NE((*paid)->status, 500) << (*paid)->body.substr(0, 300);
  EXPECT_NE((*paid)->status, 201) << "paid on a frozen server?";
  RecordProperty("waited_s", std::to_string(waited));
  EXPECT_LT(waited, 1.5) << "status " << (*paid)->status << ": " << (*paid)->body.substr(0, 300);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The threads of `pid` waiting in a blocking socket call now (their wchan: poll, select or a
// socket wait; an event loop's epoll is not one), as "name/wchan", but for the library's
// cancel requests (hf-pg-cancel): scripts/freeze-threads.sh's count.
std::vector<std::string> blocked_in_a_socket_call(int pid) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path tasks = fs::path("/proc") / std::to_string(pid) / "task";
  for (auto it = fs::directory_iterator(tasks, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string wchan;
    std::string name;
    std::ifstream(it->path() / "wchan") >> wchan;
    std::getline(std::ifstream(it->path() / "comm"), name);
    static const std::regex kSocketWait("poll|select|wait_woken|sk_wait|tcp_|inet_");
    if (wchan.find("epoll") != std::string::npos || !std::regex_search(wchan, kSocketWait))
      continue;
    if (name != "hf-pg-cancel") out.push_back(name + "/" + wchan);
  }
  return out;
}

// Issue 43: while the primary is frozen, every wait of the panel's is on its event loop but
// the cancel requests' (libpq 15's cancel blocks): the log writer's batches too
// (asio::pg::LogStore), and the panel starts no thread. A short version of
// scripts/freeze-threads.sh: one client loading pages during a 4 s freeze.
TEST(PanelPgProcesses, WhileThePrimaryIsFrozenOnlyTheCancelRequestsWaitInASocketCall) {
  HOLDFAST_REQUIRE_PG_SERVER();
  pgtest::PrivateServer server(30);
  ASSERT_FALSE(server.url().empty()) << "the private server did not start";
  const fs::path dir = fs::temp_directory_path() / pgtest::unique("holdfast-e2e-freeze-threads");
  fs::create_directories(dir);
  PanelProcess panel(server.url(), std::vector<std::string>{}, dir / "panel.log");
  ASSERT_GT(panel.port(), 0);
  http_client::Client http("127.0.0.1", panel.port());
  http.set_read_timeout(seconds(30));
  const SignedIn signed_in = sign_in(http);
  ASSERT_FALSE(signed_in.session.empty());
  for (int i = 0; i < 20; ++i) {  // warm: connections open, the cancel threads started
    (void)http.Get("/dashboard/schedule?date=" + today(), {{"Cookie", signed_in.session}});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long before = panel.threads();

  std::atomic<bool> frozen_done{false};
  int pages = 0;
  std::thread client([&] {
    http_client::Client loader("127.0.0.1", panel.port());
    loader.set_read_timeout(seconds(30));
    while (!frozen_done.load()) {
      // Each page on the frozen server logs what it could not read (the log writer's work).
      (void)loader.Get("/dashboard/schedule?date=" + today(), {{"Cookie", signed_in.session}});
      ++pages;
    }
  });
  long most_threads = 0;
  std::set<std::string> blocked;  // "name/wchan" of each thread seen blocked
  {
    pgtest::Freeze freeze(server.postmaster_pid());
    ASSERT_TRUE(freeze.frozen());
    const auto until = std::chrono::steady_clock::now() + seconds(4);
    while (std::chrono::steady_clock::now() < until) {
      most_threads = std::max(most_threads, panel.threads());
      for (std::string& b : blocked_in_a_socket_call(panel.pid()))
        blocked.insert(std::move(b));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  frozen_done = true;
  client.join();
  EXPECT_GT(pages, 0);
  EXPECT_LE(most_threads, before);
  EXPECT_TRUE(blocked.empty()) << "blocked in a socket call: " << ::testing::PrintToString(blocked);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Like the session cookie, the position is marked Secure with --secure-cookies.
TEST(PanelPgWritePosition, WithSecureCookiesTheWritePositionCookieIsSecureToo) {
  HOLDFAST_REQUIRE_PG_SERVER();
  ScratchDatabase db;
  ClubStore::Options so;
  so.pg_url = db.url();
  auto store = ClubStore::open(so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE((*store)->ensure_demo_data(today()).ok());
  Logger::Options lo;
  lo.console = false;
  Logger logger(lo);
  PanelServer::Options po;
  po.store = store->get();
  po.logger = &logger;
  po.secure_cookies = true;
  PanelServer server(po);
  ASSERT_TRUE(server.start().ok());
  http_client::Client http("127.0.0.1", server.port());
  auto login = http.Post(
      "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
  ASSERT_TRUE(login);
  ASSERT_EQ(login->status, 303) << login->body;
  const std::string wal = set_cookie_line(*login, "hf_wal");
  EXPECT_NE(wal.find("; Secure"), std::string::npos) << wal;
  EXPECT_NE(set_cookie_line(*login, "session").find("; Secure"), std::string::npos);
  server.stop();
}

// SQLite has no standby: the store carries no position and ignores one.
TEST(PanelWritePosition, TheSqliteStoreHasNoPositionToCarry) {
  const fs::path dir = fs::temp_directory_path() / pgtest::unique("holdfast-e2e-wal-sqlite");
  fs::create_directories(dir);
  ClubStore::Options so;
  so.path = (dir / "club.db").string();
  auto store = ClubStore::open(so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE((*store)->ensure_demo_data(today()).ok());
  {
    RequestScope scope(seconds(6));
    (*store)->require_position("16/B374D848");
    (*store)->require_position("garbage");
    auto paid = (*store)->pay(1, 500, "card", "", "2026-12-01T10:00:00.000Z");
    ASSERT_TRUE(paid.ok()) << paid.status().to_string();
    EXPECT_EQ((*store)->write_position(), "");
  }
  store->reset();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace holdfast::panel
