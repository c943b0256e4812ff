// The live status: GET /status (the page) and GET /status.svg (its chart alone), for
// signed-in users only; and the count of every answer the panel gives, for their chart.

#include <functional>
#include <map>
#include <mutex>

#include <boost/asio/awaitable.hpp>

#include "answers.hpp"
#include "html.hpp"
#include "http_server.hpp"
#include "route_helpers.hpp"
#include "server.hpp"
#include "status_page.hpp"
#include "store_calls.hpp"
#include "traffic_ring.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;

constexpr const char* kHtml = "text/html; charset=utf-8";

bool is_status_path(const std::string& path) {
  return path == "/status" || path == "/status.svg";
}

// How long a session the database confirmed still opens /status and the schedule's last
// good copy while the database cannot answer (a read lock, the reads' breaker open). A
// session signed out meanwhile keeps seeing them for at most this long, and only during
// the outage.
constexpr Duration kSessionGrace = std::chrono::minutes(5);

// What the chart shows: the panel's answers and the ones its HTTP server made itself (a 503
// when a lane is full, a refusal before any route runs), second by second.
TrafficRing::Window chart_counts(const TrafficRing& panel, const HttpServer* server) noexcept {
  TrafficRing::Window w = panel.window();
  if (server != nullptr) w.add(server->own_answers().window_at(w.last));
  return w;
}

}  // namespace

void PanelServer::record_traffic(const http::Request& req, const http::Response& res) noexcept {
  // Watching must not change what is watched: the status routes are not counted.
  if (is_status_path(req.path)) return;
  traffic_->record(res.status, res.has_header("X-Holdfast-Stale"));
}

net::awaitable<void> PanelServer::get_status(const http::Request& req, http::Response& res,
                                             lane::Context& ctx) {
  counters_.requests++;
  const bool image = req.path == "/status.svg";
  const std::string token = session_token(req);
  const Result<std::optional<User>> who = co_await session_of(token, now_utc(), ctx);
  if (status_allowed(res, req.path, image, token, who)) answer_status(res, image);
}

void PanelServer::answer_status(http::Response& res, bool image) {
  counters_.ok++;
  res.set_header("Cache-Control", "no-store");
  if (image) {
    res.set_content(render_traffic_svg(chart_counts(*traffic_, http_.get())), "image/svg+xml");
  } else {
    res.set_content(render_status(status_view(), chart_counts(*traffic_, http_.get())), kHtml);
  }
}

bool PanelServer::status_allowed(http::Response& res, std::string_view path, bool image,
                                 const std::string& token, const Result<std::optional<User>>& who) {
  // The same answers as the schedule's: the page redirects to the sign-in form, the image
  // (like the JSON API) answers 401.
  const auto to_sign_in = [&] {
    counters_.bad_request++;
    res.status = image ? 401 : 303;
    if (!image) res.set_header("Location", "/login");
    return false;
  };
  if (token.empty()) return to_sign_in();
  if (who.ok() && who->has_value()) {
    confirm_session(token, **who);
    return true;
  }
  if (who.ok()) {
    forget_session(token);
    return to_sign_in();
  }
  if (is_busy(who.status()) && confirmed_session(token)) return true;
  answers_->failure(res, who.status(), path, image);
  return false;
}

void PanelServer::confirm_session(const std::string& token, const User& user) {
  const TimePoint until = options_.store->clock().now() + kSessionGrace;
  std::lock_guard<std::mutex> lock(confirmed_mutex_);
  put_bounded(
      confirmed_, token, ConfirmedSession{until, user}, kConfirmedSessions,
      [](const ConfirmedSession& a, const ConfirmedSession& b) { return a.until < b.until; });
}

void PanelServer::forget_session(const std::string& token) {
  std::lock_guard<std::mutex> lock(confirmed_mutex_);
  confirmed_.erase(token);
}

std::optional<User> PanelServer::confirmed_session(const std::string& token) {
  const TimePoint now = options_.store->clock().now();
  std::lock_guard<std::mutex> lock(confirmed_mutex_);
  const auto it = confirmed_.find(token);
  if (it == confirmed_.end() || now >= it->second.until) return std::nullopt;
  return it->second.user;
}

StatusView PanelServer::status_view() const {
  ClubStore& store = *options_.store;
  StatusView view;
  view.strategy = std::string(to_string(store.strategy()));
  view.backend = std::string(store.backend());
  view.as_of = now_utc().substr(11, 8);
  Shield* reads = store.read_shield();
  Shield* writes = store.write_shield();
  if (reads != nullptr) view.shields.push_back(read_shield_status(*reads));
  if (writes != nullptr && writes != reads) view.shields.push_back(read_shield_status(*writes));
  if (options_.log_sink != nullptr) view.log_pause = read_log_pause(*options_.log_sink);
  view.lost_writes = store.lost_writes();
  return view;
}

}  // namespace holdfast::panel
