#include "server.hpp"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>

#include "housekeeper.hpp"
#include "route_helpers.hpp"
#include "session_toucher.hpp"
#include "status_page.hpp"
#include "traffic_ring.hpp"

namespace holdfast::panel {

PanelServer::PanelServer(Options options)
    : options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      front_secret_(ClubStore::new_token()) {
  if (options_.store == nullptr || options_.logger == nullptr) {
    throw std::invalid_argument("PanelServer: store and logger are required");
  }
  traffic_ = std::make_unique<TrafficRing>(options_.store->clock());
  answers_ = std::make_unique<Answers>(*options_.logger, counters_, holdfast());
  if (holdfast()) {
    toucher_ = std::make_unique<SessionToucher>(*options_.store);
  }
  // The front relays at most `threads` database-bound and kLightRelays light requests at
  // once: httplib has a thread for each, so light ones never wait behind the others.
  const int threads = options_.threads + kLightRelays;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(threads));
  };
  install_guards();
  install_routes();
}

PanelServer::~PanelServer() {
  stop();
}

namespace {

constexpr std::string_view kPrivatePrefix = "holdfast-panel-";

// The folders of panels that ended without stop() (killed, or a crash) in `base`: this
// user's "holdfast-panel-<pid>-XXXXXX" directories whose process is gone. Another user's,
// a live process's, and anything that is not a plain directory are left alone.
void clear_stale_private_directories(const std::string& base) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrivatePrefix, 0) != 0) continue;
    const std::string_view rest = std::string_view(name).substr(kPrivatePrefix.size());
    long long pid = 0;
    const auto [end, parsed] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (parsed != std::errc() || end == rest.data() || *end != '-' || pid <= 0 ||
        pid > std::numeric_limits<pid_t>::max()) {
      continue;
    }
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

// A new directory only this user can enter (mkdtemp makes it 0700), for the socket of the
// server behind the front: another local user cannot reach that server at all. Its name
// carries the process id, so the next panel can tell it is stale when this one is gone.
Result<std::string> private_directory() {
  std::error_code ec;
  std::string base = std::filesystem::temp_directory_path(ec).string();
  if (ec || base.size() > 64) base = "/tmp";  // a socket's path is at most 107 bytes
  clear_stale_private_directories(base);
  std::string path =
      base + "/" + std::string(kPrivatePrefix) + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(path.data()) == nullptr) {
    return Status(Code::kUnavailable,
                  "cannot make a private directory in " + base + ": " + std::strerror(errno));
  }
  return path;
}

}  // namespace

Status PanelServer::start() {
  // httplib on a Unix socket of its own; the front on the public port (front.hpp).
  Result<std::string> dir = private_directory();
  if (!dir.ok()) return dir.status();
  upstream_dir_ = *dir;
  upstream_socket_ = upstream_dir_ + "/http.sock";
  http_->set_address_family(AF_UNIX);
  if (!http_->bind_to_port(upstream_socket_, 80)) {
    stop();
    return Status(Code::kUnavailable, "cannot listen on " + upstream_socket_);
  }
  HttpFront::Options fo;
  fo.host = options_.host;
  fo.port = options_.port;
  fo.allowed_hosts = options_.allowed_hosts;
  fo.upstream_socket = upstream_socket_;
  fo.upstream_secret = front_secret_;
  fo.heavy_relays = options_.threads;
  fo.light_relays = kLightRelays;
  fo.clock = &options_.store->clock();  // the panel's TrafficRing counts on the same clock
  front_ = std::make_unique<HttpFront>(fo);
  // The public socket first: when it cannot be had, the server behind never starts, and the
  // caller hears why at once.
  if (Status s = front_->start(); !s.ok()) {
    stop();
    return s;
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() does nothing until its loop runs: stop() right after start() would
  // otherwise wait on a server that never hears it.
  for (int i = 0; i < 5000 && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  port_ = front_->port();
  if (options_.housekeeping_every > std::chrono::milliseconds::zero()) {
    housekeeper_ = std::make_unique<Housekeeper>(*options_.store, options_.housekeeping_every);
  }
  return Status();
}

void PanelServer::stop() noexcept {
  if (front_) front_->stop();
  if (thread_.joinable()) {
    http_->stop();
    thread_.join();
  }
  toucher_.reset();
  housekeeper_.reset();
  if (!upstream_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(upstream_socket_, ignored);
    std::filesystem::remove(upstream_dir_, ignored);
    upstream_dir_.clear();
  }
}

PanelServer::RequestWindow::RequestWindow(const PanelServer& server, const httplib::Request& req) {
  if (!server.holdfast()) return;
  Clock& clock = server.options_.store->clock();
  // The front says when it accepted the request (X-Holdfast-Received, on the store's clock):
  // on PostgreSQL the window opens then, queue time included (ADR 0023). On SQLite it still
  // opens at the first wait (ADR 0011): measured in the drill, opening it at arrival there
  // served 25 % of the pages of a 5 s reader lock instead of 100 % (not yet understood).
  const std::string received = server.options_.store->backend() == "postgresql"
                                   ? req.get_header_value("X-Holdfast-Received")
                                   : std::string();
  long long ns = 0;
  const auto [end, ec] = std::from_chars(received.data(), received.data() + received.size(), ns);
  const TimePoint now = clock.now();
  if (!received.empty() && ec == std::errc() && end == received.data() + received.size() &&
      ns > 0 && TimePoint(Duration(ns)) <= now) {
    scope_.emplace(server.options_.window, clock, TimePoint(Duration(ns)));
  } else {
    scope_.emplace(server.options_.window, clock);
  }
  server.options_.store->require_position(cookie_value(req, kWritePositionCookie));
}

void PanelServer::set_write_position_cookie(httplib::Response& res) const {
  const std::string position = options_.store->write_position();
  // 5 minutes: standbys catch up in well under that; afterwards the client's reads may go to
  // any standby again.
  if (!position.empty())
    set_cookie(res, kWritePositionCookie, position, 300, options_.secure_cookies);
}

void PanelServer::install_routes() {
  using Route = void (PanelServer::*)(const httplib::Request&, httplib::Response&);
  const auto to = [this](Route route) {
    return [this, route](const httplib::Request& req, httplib::Response& res) {
      (this->*route)(req, res);
    };
  };
  http_->Get("/healthz", to(&PanelServer::get_healthz));
  http_->Get("/metrics", to(&PanelServer::get_metrics));
  http_->Get("/login", to(&PanelServer::get_login));
  http_->Post("/login", to(&PanelServer::post_login));
  http_->Get("/login/link", to(&PanelServer::get_login_link));
  http_->Post("/logout", to(&PanelServer::post_logout));
  http_->Get("/dashboard/schedule", to(&PanelServer::get_schedule_page));
  http_->Get("/api/schedule", to(&PanelServer::get_schedule_json));
  http_->Post("/payments", to(&PanelServer::post_payment));
  http_->Post("/signups", to(&PanelServer::post_signup));
  http_->Post("/report", to(&PanelServer::post_report));
  http_->Get("/status", to(&PanelServer::get_status));
  http_->Get("/status.svg", to(&PanelServer::get_status_svg));
  http_->set_post_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { record_traffic(req, res); });
}

}  // namespace holdfast::panel
