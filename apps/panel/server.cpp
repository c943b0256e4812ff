#include "server.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "holdfast/adapters/asio_shared_reads.hpp"
#include "housekeeper.hpp"
#include "route_helpers.hpp"
#include "session_toucher.hpp"
#include "status_page.hpp"
#include "store_calls.hpp"
#include "traffic_ring.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "logging.hpp"
#include "pg_lane.hpp"
#endif

namespace holdfast::panel {

namespace net = boost::asio;

namespace {

// The routes with database work, by method (HEAD is a GET whose body the server leaves
// out) and path. GET /login, /healthz and /metrics are light: the server keeps them on
// workers of their own.
struct DatabaseRoute {
  std::string_view method;
  std::string_view path;
};
constexpr DatabaseRoute kDatabaseRoutes[] = {
    {"GET", "/dashboard/schedule"},
    {"GET", "/api/schedule"},
    {"GET", "/login/link"},
    {"GET", "/status"},
    {"GET", "/status.svg"},
    {"POST", "/payments"},
    {"POST", "/signups"},
    {"POST", "/login"},
    {"POST", "/logout"},
    {"POST", "/report"},
};

std::string_view route_method(const http::Request& req) noexcept {
  return req.method == "HEAD" ? std::string_view("GET") : std::string_view(req.method);
}

}  // namespace

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
  blocking_calls_ = blocking_calls(*options_.store);
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
    if (!async->postgres) sqlite_calls_ = sqlite_calls(*options_.store);
    server->serve_async(
        &PanelServer::is_database_route,
        [this](const http::Request& req, http::Response& res) {
          // PostgreSQL's calls are PgLane's, once its hooks have opened it.
          StoreCalls* calls = sqlite_calls_.get();
#ifdef HOLDFAST_PANEL_HAVE_PG
          if (calls == nullptr) calls = pg_lane_.get();
#endif
          return serve(req, res, calls, true);
        },
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
  };
  if (is_database_route(req)) return serve_here(req, res);
  const std::string_view method = route_method(req);
  const Entry* found = nullptr;
  bool path_known = false;
  for (const Entry& e : kRoutes) {
    if (e.path != req.path) continue;
    path_known = true;
    if (e.method == method) found = &e;
  }
  // A database route's path asked with another method.
  for (const DatabaseRoute& r : kDatabaseRoutes)
    path_known = path_known || r.path == req.path;
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

bool PanelServer::is_database_route(const http::Request& req) noexcept {
  const std::string_view method = route_method(req);
  for (const DatabaseRoute& r : kDatabaseRoutes) {
    if (r.path == req.path && r.method == method) return true;
  }
  return false;
}

void PanelServer::serve_here(const http::Request& req, http::Response& res) {
  // The route's coroutine on a loop of this worker's own, run until it ends: each call
  // blocks this thread for as long as the store's call takes, as a baseline's code would.
  net::io_context loop(1);
  std::exception_ptr failed;
  net::co_spawn(loop, serve(req, res, blocking_calls_.get(), false),
                [&failed](std::exception_ptr e) { failed = std::move(e); });
  loop.run();
  if (failed) std::rethrow_exception(failed);  // answered 500 by HttpServer
}

net::awaitable<void> PanelServer::serve(const http::Request& req, http::Response& res,
                                        StoreCalls* calls, bool on_lane) {
  const bool refused = refused_by_guards(req, res);
  if (!refused && calls == nullptr) {
    res.status = 503;  // the lane's Clients did not open (only memory could fail them)
    res.set_header("Retry-After", "1");
    res.set_content("the panel is starting; try again in a second\n", "text/plain; charset=utf-8");
  } else if (!refused) {
    lane::Context ctx(options_.window, options_.store->clock(), *calls, holdfast(), on_lane);
    if (holdfast()) scope_request(req, ctx);
    co_await route(req, res, ctx);
  }
  record_traffic(req, res);
}

void PanelServer::scope_request(const http::Request& req, lane::Context& ctx) const {
  ClubStore& store = *options_.store;
  // Open from the request's arrival (DESIGN §10): whatever it met before its calls, the
  // answer comes within the window of whoever sent it (Request::received is on the store's
  // clock: start() gives it to HttpServer). On a worker, SQLite's still opens at its first
  // wait (ADR 0011): measured in the drill, opening it at arrival there served 25 % of the
  // pages of a 5 s reader lock instead of 100 % (not yet understood).
  const bool from_arrival = ctx.on_lane || store.backend() == "postgresql";
  if (from_arrival && req.received != TimePoint{}) ctx.window().open(req.received);
  cap_by_upstream(req, ctx.window());
  // Its reads see the writes the client's hf_wal cookie names, whichever process made them.
  const lane::OnThisThread request(ctx);
  store.require_position(cookie_value(req, kWritePositionCookie));
}

net::awaitable<void> PanelServer::route(const http::Request& req, http::Response& res,
                                        lane::Context& ctx) {
  if (req.path == "/status" || req.path == "/status.svg") {
    co_await get_status(req, res, ctx);
  } else if (req.path == "/login/link") {
    co_await get_login_link(req, res, ctx);
  } else if (req.method != "POST") {
    co_await get_schedule(req, res, ctx);
  } else if (req.path == "/report") {
    co_await post_report(req, res, ctx);
  } else if (req.path == "/login") {
    co_await post_login(req, res, ctx);
  } else if (req.path == "/logout") {
    co_await post_logout(req, res, ctx);
  } else {
    co_await post_write(req, res, ctx);
  }
}

std::optional<HttpServer::LaneHooks> PanelServer::event_loop_calls() {
#ifdef HOLDFAST_PANEL_HAVE_PG
  std::optional<Result<PgClubStore::LaneOptions>> wanted = PgLane::wanted(*options_.store);
  if (!wanted) return std::nullopt;
  if (!wanted->ok()) {
    // Served on the workers (their blocking calls work with these options); say why once.
    options_.logger->warn("panel", "the PostgreSQL routes are served on the workers: " +
                                       std::string(wanted->status().message()));
    return std::nullopt;
  }
  HttpServer::LaneHooks hooks;
  hooks.started = [this, clients = std::move(**wanted)](const net::any_io_executor& loop) {
    // Checked by wanted(): only memory could fail it.
    Result<std::unique_ptr<PgLane>> lane = PgLane::open(*options_.store, loop, clients);
    if (!lane.ok()) return;
    pg_lane_ = std::move(*lane);
    if (LaneLogStore* logs = options_.lane_logs; logs != nullptr) {
      // The log batches too wait on the loop from now on, not in libpq on the sink's thread.
      Result<std::shared_ptr<LogStore>> on_loop = pg_lane_->open_logs(logs->url());
      if (on_loop.ok()) {
        logs->attach(std::move(*on_loop));
      } else {
        options_.logger->warn(
            "panel", "the log batches stay off the event loop: " + on_loop.status().to_string());
      }
    }
  };
  hooks.stopped = [this] {
    if (options_.lane_logs != nullptr) options_.lane_logs->detach();
    pg_lane_.reset();
  };
  return hooks;
#else
  return std::nullopt;
#endif
}

}  // namespace holdfast::panel
