#include "server.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "holdfast/adapters/asio_shared_reads.hpp"
#include "housekeeper.hpp"
#include "route_helpers.hpp"
#include "session_toucher.hpp"
#include "status_page.hpp"
#include "traffic_ring.hpp"

namespace holdfast::panel {

PanelServer::PanelServer(Options options) : options_(std::move(options)) {
  if (options_.store == nullptr || options_.logger == nullptr) {
    throw std::invalid_argument("PanelServer: store and logger are required");
  }
  traffic_ = std::make_unique<TrafficRing>(options_.store->clock());
  answers_ = std::make_unique<Answers>(*options_.logger, counters_, holdfast());
  if (holdfast()) {
    toucher_ = std::make_unique<SessionToucher>(*options_.store);
    schedule_reads_ = std::make_unique<asio::SharedReads<SchedulePage>>();
  }
  install_guards();
  Clock& clock = options_.store->clock();
  sign_ins_by_address_ =
      std::make_unique<AttemptLimiter>(clock, kSignInsPerAddressPerMinute, std::chrono::minutes(1));
  SignInGate::Options gate;
  gate.running = options_.max_password_checks;
  gate.waiting = options_.password_check_queue;
  gate.per_key = options_.password_checks_per_address;
  sign_in_gate_ = std::make_unique<SignInGate>(clock, gate);
}

PanelServer::~PanelServer() {
  stop();
}

// The async lane's threads for a store of `connections`: one per connection, but no more
// than the cores (at least 2). A lane thread runs SQLite's statements itself, while a wait
// for a lock is a timer on its loop and holds it not: more threads than cores only take
// turns on them, and each request crosses to one and back. With 100 payments a second on 2
// cores, the schedule page served 0.26-0.32 x nginx on 4 threads and 0.36-0.37 x on 2 (ADR
// 0049; before the day's copy made most pages one statement, 2 were slower: ADR 0030).
int PanelServer::lane_threads(int connections) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int most = cores > 0 ? std::max(cores, 2) : connections;
  return std::max(std::min(connections, most), 1);
}

Status PanelServer::start() {
  if (http_) return Status(Code::kFailedPrecondition, "PanelServer: already started");
  // Made before the first sign-in, so that the first unknown email costs what the others do.
  (void)options_.store->dummy_hash();
  HttpServer::Options o;
  o.host = options_.host;
  o.port = options_.port;
  o.allowed_hosts = options_.allowed_hosts;
  o.heavy_workers = options_.threads;
  o.light_workers = kLightWorkers;
  o.default_headers = security_headers();
  o.clock = &options_.store->clock();  // the panel's TrafficRing counts on the same clock
  // The schedule's reads and the writes on the async lane when the store can leave its
  // waits to async_run (holdfast) on real time (asio's timers are).
  const ClubStore::AsyncAccess* async = options_.store->async_access();
  bool use_async =
      options_.async_lane && async != nullptr && &options_.store->clock() == &Clock::system();
  if (use_async) o.async_workers = lane_threads(async->connections);
  std::optional<HttpServer::LaneHooks> loop_calls;
  if (use_async && async->postgres) {
    // PostgreSQL's calls, reads and writes, wait on one event loop (ADR 0043, 0044): no
    // thread of the lane's blocks in libpq. Without the lane's Clients (event_loop_calls()
    // said why) the routes are served on the workers.
    loop_calls = event_loop_calls();
    use_async = loop_calls.has_value();
    o.async_workers = 1;
  }
  auto server = std::make_unique<HttpServer>(
      std::move(o), [this](const http::Request& req, http::Response& res) { handle(req, res); });
  if (use_async) {
    server->serve_async(
        &PanelServer::is_async_route,
        [this](const http::Request& req, http::Response& res) { return handle_async(req, res); },
        loop_calls ? std::move(*loop_calls) : HttpServer::LaneHooks{});
  }
  // Set before it starts: a request served at once may use it (the CPU executor, /status).
  http_ = std::move(server);
  if (Status s = http_->start(); !s.ok()) {
    http_.reset();
    return s;
  }
  port_ = http_->port();
  if (options_.housekeeping_every > std::chrono::milliseconds::zero()) {
    housekeeper_ = std::make_unique<Housekeeper>(*options_.store, options_.housekeeping_every);
  }
  return Status();
}

void PanelServer::stop() noexcept {
  if (http_) http_->stop();
  toucher_.reset();
  housekeeper_.reset();
}

PanelServer::RequestWindow::RequestWindow(const PanelServer& server, const http::Request& req) {
  if (!server.holdfast()) return;
  Clock& clock = server.options_.store->clock();
  // On PostgreSQL the window opens when the server had read the request (Request::received),
  // so time queued for a worker counts (ADR 0023). On SQLite it still opens at the first
  // wait (ADR 0011): measured in the drill, opening it at arrival there served 25 % of the
  // pages of a 5 s reader lock instead of 100 % (not yet understood).
  const TimePoint now = clock.now();
  if (server.options_.store->backend() == "postgresql" && req.received != TimePoint{} &&
      req.received <= now) {
    scope_.emplace(server.options_.window, clock, req.received);
  } else {
    scope_.emplace(server.options_.window, clock);
  }
  cap_by_upstream(req, scope_->window());
  server.options_.store->require_position(cookie_value(req, kWritePositionCookie));
}

void PanelServer::set_write_position_cookie(http::Response& res) const {
  const std::string position = options_.store->write_position();
  // 5 minutes: standbys catch up in well under that; afterwards the client's reads may go to
  // any standby again.
  if (!position.empty())
    set_cookie(res, kWritePositionCookie, position, 300, options_.secure_cookies);
}

void PanelServer::handle(const http::Request& req, http::Response& res) {
  using Route = void (PanelServer::*)(const http::Request&, http::Response&);
  struct Entry {
    std::string_view method;
    std::string_view path;
    Route route;
  };
  static constexpr Entry kRoutes[] = {
      {"GET", "/healthz", &PanelServer::get_healthz},
      {"GET", "/metrics", &PanelServer::get_metrics},
      {"GET", "/login", &PanelServer::get_login},
      {"POST", "/login", &PanelServer::post_login},
      {"GET", "/login/link", &PanelServer::get_login_link},
      {"POST", "/logout", &PanelServer::post_logout},
      {"GET", "/dashboard/schedule", &PanelServer::get_schedule_page},
      {"GET", "/api/schedule", &PanelServer::get_schedule_json},
      {"POST", "/payments", &PanelServer::post_payment},
      {"POST", "/signups", &PanelServer::post_signup},
      {"POST", "/report", &PanelServer::post_report},
      {"GET", "/status", &PanelServer::get_status},
      {"GET", "/status.svg", &PanelServer::get_status_svg},
  };
  // HEAD is a GET whose body the server leaves out.
  const std::string_view method = req.method == "HEAD" ? std::string_view("GET") : req.method;
  const Entry* found = nullptr;
  bool path_known = false;
  for (const Entry& e : kRoutes) {
    if (e.path != req.path) continue;
    path_known = true;
    if (e.method == method) found = &e;
  }
  if (found == nullptr) {
    counters_.bad_request++;
    if (path_known) {
      res.status = 405;
      res.set_content("method not allowed\n", "text/plain; charset=utf-8");
    } else {
      res.status = 404;
      res.set_content("not found\n", "text/plain; charset=utf-8");
    }
  } else if (!refused_by_guards(req, res)) {
    (this->*(found->route))(req, res);
  }
  record_traffic(req, res);
}

}  // namespace holdfast::panel
