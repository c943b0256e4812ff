// Issue #16 item 6: the live /status page (apps/panel/routes_status.cpp, status_page.hpp),
// its answer counts (traffic_ring.hpp), and the Grafana dashboard in contrib/grafana/.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "holdfast/core/shield.hpp"
#include "panel_fixture.hpp"
#include "traffic_ring.hpp"

namespace holdfast::panel {
namespace {

using nlohmann::json;

// The panel of PanelFixture, rebuilt with its logs-table sink shown on /status.
class PanelStatusTest : public PanelFixture {
 protected:
  void SetUp() override {
    PanelFixture::SetUp();
    if (HasFatalFailure()) return;
    server_.reset();
    PanelServer::Options po;
    po.store = store_.get();
    po.logger = logging_.logger.get();
    po.log_sink = logging_.sink.get();
    server_ = std::make_unique<PanelServer>(po);
    ASSERT_TRUE(server_->start().ok());
    http_ = std::make_unique<http_client::Client>("127.0.0.1", server_->port());
    http_->set_read_timeout(seconds(30));
  }
  // The <tr> of the Shield named `name` on a status page, or "".
  static std::string row_of(const std::string& page, std::string_view name) {
    const std::size_t at = page.find("data-shield=\"" + std::string(name) + "\"");
    if (at == std::string::npos) return {};
    return page.substr(at, page.find("</tr>", at) - at);
  }
  std::string write_shield_name() const { return std::string(store_->write_shield()->name()); }
};

TEST_F(PanelStatusTest, SignedOutThePageRedirectsToSignInAndTheChartIsRefused401) {
  auto page = http_->Get("/status");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 303);
  EXPECT_EQ(page->get_header_value("Location"), "/login");
  EXPECT_EQ(page->body.find("data-shield"), std::string::npos);
  auto forged = http_->Get("/status", {{"Cookie", "session=not-a-session"}});
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 303);
  auto chart = http_->Get("/status.svg");
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->status, 401);
  EXPECT_EQ(chart->body.find("<svg"), std::string::npos);
}

TEST_F(PanelStatusTest, SignedInThePageShowsEachShieldsBreakerLimitAndTheLogPause) {
  auto page = http_->Get("/status", cookie_);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200) << page->body;
  for (Shield* shield : {store_->read_shield(), store_->write_shield()}) {
    const std::string row = row_of(page->body, shield->name());
    ASSERT_FALSE(row.empty()) << shield->name();
    EXPECT_NE(row.find("data-breaker=\"closed\""), std::string::npos) << row;
    // The learned limit: it moves with every latency sample, within the Shield's bounds.
    std::smatch limit;
    ASSERT_TRUE(std::regex_search(row, limit, std::regex("data-limit=\"([0-9.]+)\""))) << row;
    EXPECT_GE(std::stod(limit[1]), shield->limit().options().min) << row;
    EXPECT_LE(std::stod(limit[1]), shield->limit().options().max) << row;
  }
  EXPECT_NE(page->body.find("data-log-pause=\"off\""), std::string::npos);
  EXPECT_NE(page->body.find("<meta http-equiv=\"refresh\" content=\"2\">"), std::string::npos);
  EXPECT_NE(page->body.find("<svg"), std::string::npos);
  EXPECT_EQ(page->body.find("<script"), std::string::npos);
  // The panel's policy stands: no script from anywhere.
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"),
            std::string::npos);
  auto chart = http_->Get("/status.svg", cookie_);
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->status, 200);
  EXPECT_EQ(chart->get_header_value("Content-Type"), "image/svg+xml");
  EXPECT_NE(chart->body.find("requests: "), std::string::npos);
}

TEST_F(PanelStatusTest, AfterAWriteLockStormTheWritesBreakerShowsOpenAndTheChartCounts503s) {
  auto lock = storm(StormKind::kWrite);
  // One refused payment over HTTP for the chart...
  http_client::Headers h = cookie_;
  h.emplace("Idempotency-Key", "status-storm");
  auto paid = http_->Post("/payments", h, http_client::Params{{"amount_cents", "900"}});
  ASSERT_TRUE(paid);
  EXPECT_EQ(paid->status, 503);
  // ...and, while the lock holds, the writes breaker open on the page (a probe may be
  // running when we look: then fail a write and look again).
  auto user = store_->user_id_by_email("Ada.Nowak@club.example");
  ASSERT_TRUE(user.ok() && user->has_value());
  std::string row;
  for (int i = 0; i < 20 && row.find("data-breaker=\"open\"") == std::string::npos; ++i) {
    if (store_->write_shield()->breaker().state() != BreakerState::kOpen) {
      RequestScope scope(std::chrono::milliseconds(300));
      EXPECT_FALSE(store_->pay(**user, 500, "cash", "", "2026-01-01T00:00:00Z").ok());
    }
    auto page = http_->Get("/status", cookie_);
    ASSERT_TRUE(page);
    ASSERT_EQ(page->status, 200);
    row = row_of(page->body, write_shield_name());
  }
  EXPECT_NE(row.find("data-breaker=\"open\""), std::string::npos) << row;
  auto chart = http_->Get("/status.svg", cookie_);
  lock->end();
  ASSERT_TRUE(chart);
  ASSERT_EQ(chart->status, 200);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(chart->body, m, std::regex("503 busy: ([0-9]+) in 5 min")));
  EXPECT_GE(std::stoi(m[1]), 1) << m[0];
}

// The page is for watching an outage: while a read lock keeps the session from being read,
// a session the page confirmed before still opens it.
TEST_F(PanelStatusTest, DuringAReadLockTheStatusPageStillOpensForASessionItConfirmedBefore) {
  ASSERT_EQ(http_->Get("/status", cookie_)->status, 200);
  auto lock = storm(StormKind::kRead);
  const auto start = Steady::now();
  auto page = http_->Get("/status", cookie_);
  const auto took = Steady::now() - start;
  auto stranger = http_->Get("/status", {{"Cookie", "session=0123456789abcdef"}});
  lock->end();
  ASSERT_TRUE(page && stranger);
  EXPECT_EQ(page->status, 200) << page->body;
  EXPECT_NE(page->body.find("data-shield="), std::string::npos);
  EXPECT_LE(took, seconds(7));       // the 6 s window plus 1 s
  EXPECT_NE(stranger->status, 200);  // never confirmed: the database must say
}

// The chart's totals over the window, from its legend ("requests: 12 in 5 min").
struct ChartTotals {
  long long requests = -1;
  long long busy = -1;
};
ChartTotals chart_totals(const std::string& svg) {
  ChartTotals t;
  std::smatch m;
  if (std::regex_search(svg, m, std::regex("requests: ([0-9]+) in 5 min"))) {
    t.requests = std::stoll(m[1]);
  }
  if (std::regex_search(svg, m, std::regex("503 busy: ([0-9]+) in 5 min"))) {
    t.busy = std::stoll(m[1]);
  }
  return t;
}

// Sends `request` on `n` fresh connections to 127.0.0.1:`port` at once; -1 for one that
// could not be opened.
std::vector<int> send_burst(int port, const std::string& request, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size())) {
      if (fd >= 0) ::close(fd);
      fds.push_back(-1);
      continue;
    }
    fds.push_back(fd);
  }
  return fds;
}

// Reads every connection to its end (the front closes each after its answer), within
// `limit`. `on_answer` is called after each answer that completes.
std::vector<std::string> read_answers(std::vector<int> fds, std::chrono::seconds limit,
                                      const std::function<void(const std::string&)>& on_answer) {
  std::vector<std::string> out(fds.size());
  const auto deadline = Steady::now() + limit;
  for (;;) {
    std::vector<pollfd> polled;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] < 0) continue;
      polled.push_back({fds[i], POLLIN, 0});
      which.push_back(i);
    }
    if (polled.empty() || Steady::now() >= deadline) break;
    ::poll(polled.data(), polled.size(), 100);
    for (std::size_t p = 0; p < polled.size(); ++p) {
      if ((polled[p].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const std::size_t i = which[p];
      char chunk[4096];
      const ssize_t n = ::recv(fds[i], chunk, sizeof(chunk), 0);
      if (n > 0) {
        out[i].append(chunk, static_cast<std::size_t>(n));
        continue;
      }
      ::close(fds[i]);
      fds[i] = -1;
      on_answer(out[i]);
    }
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  return out;
}

// The front answers a request 503 itself, before any route, when database work already
// fills its queue. Those answers are on the chart too, and every answer is counted once.
TEST_F(PanelStatusTest, TheFrontsOwn503sAreOnTheChartAndEveryAnswerCountsOnce) {
  // One relay for database work, so a burst of pages fills the front's queue (64) while a
  // read lock keeps that relay on the first page.
  server_.reset();
  PanelServer::Options po;
  po.store = store_.get();
  po.logger = logging_.logger.get();
  po.log_sink = logging_.sink.get();
  po.threads = 1;
  // The schedule on the workers' lane: the async lane's bound (256) is past this burst.
  // Both lanes refuse through the same code, which puts the answer on the chart.
  po.async_lane = false;
  server_ = std::make_unique<PanelServer>(po);
  ASSERT_TRUE(server_->start().ok());
  http_ = std::make_unique<http_client::Client>("127.0.0.1", server_->port());
  http_->set_read_timeout(seconds(30));
  auto chart = http_->Get("/status.svg", cookie_);
  ASSERT_TRUE(chart);
  ASSERT_EQ(chart->status, 200);
  const ChartTotals before = chart_totals(chart->body);
  ASSERT_GE(before.requests, 0) << chart->body;
  ASSERT_GE(before.busy, 0) << chart->body;

  constexpr int kBurst = 100;
  const std::string page =
      "GET /dashboard/schedule?date=" + today() +
      " HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " + cookie_.find("Cookie")->second + "\r\n\r\n";
  auto lock = storm(StormKind::kRead);
  std::vector<int> fds = send_burst(server_->port(), page, kBurst);
  ASSERT_EQ(std::count(fds.begin(), fds.end(), -1), 0);
  // The front's own 503s come at once; the lock goes with the first of them, and the queue
  // drains.
  bool locked = true;
  const std::vector<std::string> got =
      read_answers(std::move(fds), seconds(120), [&](const std::string& answer) {
        if (locked && answer.find("the panel is busy") != std::string::npos) {
          lock->end();
          locked = false;
        }
      });
  if (locked) lock->end();

  int answered = 0;
  int busy = 0;
  int front_busy = 0;
  for (const std::string& a : got) {
    if (a.rfind("HTTP/1.1 ", 0) != 0) continue;
    ++answered;
    if (a.rfind("HTTP/1.1 503", 0) == 0) ++busy;
    if (a.find("the panel is busy") != std::string::npos) ++front_busy;
  }
  EXPECT_EQ(answered, kBurst);
  EXPECT_GE(front_busy, 1) << "the front shed nothing: its queue never filled";
  chart = http_->Get("/status.svg", cookie_);
  ASSERT_TRUE(chart);
  ASSERT_EQ(chart->status, 200);
  const ChartTotals after = chart_totals(chart->body);
  EXPECT_EQ(after.requests - before.requests, answered);
  EXPECT_EQ(after.busy - before.busy, busy);
}

TEST(PanelStatusBaseline, ABaselinePanelSaysItHasNoShield) {
  const fs::path dir =
      fs::temp_directory_path() / ("holdfast-e2e-status-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "club.db").string();
  ClubStore::Options so;
  so.path = path;
  so.strategy = Strategy::kNaive;
  auto store = ClubStore::open(so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE((*store)->ensure_demo_data(today()).ok());
  auto logging = make_logging(path, Strategy::kNaive, Clock::system(), /*console=*/false);
  ASSERT_TRUE(logging.ok());
  PanelServer::Options po;
  po.store = store->get();
  po.logger = logging->logger.get();
  auto server = std::make_unique<PanelServer>(po);
  ASSERT_TRUE(server->start().ok());
  http_client::Client http("127.0.0.1", server->port());
  auto login = http.Post(
      "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
  ASSERT_TRUE(login);
  ASSERT_EQ(login->status, 303);
  const std::string set = login->get_header_value("Set-Cookie");
  auto page = http.Get("/status", {{"Cookie", set.substr(0, set.find(';'))}});
  server.reset();
  fs::remove_all(dir);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("id=\"no-shields\""), std::string::npos);
  EXPECT_NE(page->body.find("<strong>naive</strong> baseline"), std::string::npos);
  EXPECT_NE(page->body.find("data-log-pause=\"none\""), std::string::npos);
}

TEST(TrafficRing, CountsEachAnswerInItsSecondAndForgetsSecondsOlderThanTheWindow) {
  ManualClock clock;
  TrafficRing ring(clock);
  const std::int64_t t = TrafficRing::second_of(clock.now());
  ring.record_at(t, 200, false);
  ring.record_at(t, 200, true);
  ring.record_at(t + 1, 503, false);
  ring.record_at(t + 1, 500, false);
  ring.record_at(t + 1, 507, false);
  TrafficRing::Window w = ring.window_at(t + 1);
  EXPECT_EQ(w.counts[TrafficRing::kRequests][TrafficRing::kSeconds - 2], 2u);
  EXPECT_EQ(w.counts[TrafficRing::kStale][TrafficRing::kSeconds - 2], 1u);
  EXPECT_EQ(w.counts[TrafficRing::kRequests][TrafficRing::kSeconds - 1], 3u);
  EXPECT_EQ(w.total(TrafficRing::kBusy), 1u);
  EXPECT_EQ(w.total(TrafficRing::kErrors), 2u);
  // Five minutes on, second t's slot is reused for t + 300: t is gone, t + 1 still shows.
  ring.record_at(t + 300, 200, false);
  w = ring.window_at(t + 300);
  EXPECT_EQ(w.total(TrafficRing::kRequests), 4u);
  EXPECT_EQ(w.total(TrafficRing::kStale), 0u);
  EXPECT_EQ(ring.window_at(t + 301 + 300).total(TrafficRing::kRequests), 0u);
}

TEST(TrafficRing, TwoRingsAddUpSecondBySecond) {
  ManualClock clock;
  TrafficRing panel(clock);
  TrafficRing front(clock);
  const std::int64_t t = TrafficRing::second_of(clock.now());
  panel.record_at(t, 200, false);
  front.record_at(t, 503, false);
  front.record_at(t - 1, 408, false);
  front.record_at(t + 1, 503, false);  // after the panel's window: left out
  TrafficRing::Window w = panel.window_at(t);
  w.add(front.window_at(t + 1));
  EXPECT_EQ(w.counts[TrafficRing::kRequests][TrafficRing::kSeconds - 1], 2u);
  EXPECT_EQ(w.counts[TrafficRing::kRequests][TrafficRing::kSeconds - 2], 1u);
  EXPECT_EQ(w.total(TrafficRing::kRequests), 3u);
  EXPECT_EQ(w.total(TrafficRing::kBusy), 1u);
}

TEST(TrafficRing, ConcurrentAnswersAreAllCounted) {
  ManualClock clock;
  TrafficRing ring(clock);
  const std::int64_t t = TrafficRing::second_of(clock.now());
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 10000; ++n)
        ring.record_at(t + n % 3, i == 0 ? 503 : 200, false);
    });
  }
  for (auto& th : threads)
    th.join();
  const TrafficRing::Window w = ring.window_at(t + 2);
  EXPECT_EQ(w.total(TrafficRing::kRequests), 40000u);
  EXPECT_EQ(w.total(TrafficRing::kBusy), 10000u);
}

// Every holdfast_* name the dashboard queries, from its panels' expressions and variables.
std::set<std::string> queried_metrics(const json& node) {
  std::set<std::string> names;
  if (node.is_object() || node.is_array()) {
    for (const auto& [key, value] : node.items()) {
      if (value.is_string() && (key == "expr" || key == "definition" || key == "query")) {
        const std::string text = value.get<std::string>();
        const std::regex name("holdfast_[a-z_]+");
        for (auto it = std::sregex_iterator(text.begin(), text.end(), name);
             it != std::sregex_iterator(); ++it)
          names.insert(it->str());
      } else {
        names.merge(queried_metrics(value));
      }
    }
  }
  return names;
}

TEST_F(PanelStatusTest, TheGrafanaDashboardParsesAndQueriesOnlyMetricsThePanelExports) {
  std::ifstream in(std::string(HOLDFAST_SOURCE_DIR) + "/contrib/grafana/holdfast.json");
  ASSERT_TRUE(in.good());
  const json dash = json::parse(in);  // throws, failing the test, on bad JSON
  EXPECT_GE(dash.at("schemaVersion").get<int>(), 36);
  std::set<std::string> variables;
  for (const json& v : dash.at("templating").at("list"))
    variables.insert(v.at("name").get<std::string>());
  EXPECT_TRUE(variables.count("datasource") && variables.count("db"));
  std::set<std::string> rows;
  for (const json& p : dash.at("panels")) {
    if (p.at("type") == "row") rows.insert(p.at("title").get<std::string>());
  }
  EXPECT_GE(rows.size(), 4u);
  const std::set<std::string> names = queried_metrics(dash);
  ASSERT_GE(names.size(), 14u);
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const std::string& name : names) {
    EXPECT_NE(metrics->body.find("# TYPE " + name + " "), std::string::npos)
        << name << " is not in /metrics";
  }
}

}  // namespace
}  // namespace holdfast::panel
