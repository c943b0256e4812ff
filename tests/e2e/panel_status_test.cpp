// Issue #16 item 6: the live /status page (apps/panel/routes_status.cpp, status_page.hpp),
// its answer counts (traffic_ring.hpp), and the Grafana dashboard in contrib/grafana/.
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

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
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
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
  httplib::Headers h = cookie_;
  h.emplace("Idempotency-Key", "status-storm");
  auto paid = http_->Post("/payments", h, httplib::Params{{"amount_cents", "900"}});
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
  httplib::Client http("127.0.0.1", server->port());
  auto login = http.Post(
      "/login", httplib::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
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
