// The demo panel's HTTP server (cpp-httplib) over a ClubStore.
//
// Routes: GET /login, POST /login, GET /login/link?token= (one-time sign-in links),
// GET /dashboard/schedule?date=, GET /api/schedule?date=,
// POST /payments, POST /signups (Idempotency-Key honoured), POST /report, GET /metrics,
// GET /healthz.
//
// With the holdfast strategy each request runs inside one RequestScope (6 s window). When
// the window is spent or the breaker is open, a page answers 503 with Retry-After and a
// digest (the same digest is in the console log line), or — for the schedule — the last
// good copy with an "as of HH:MM:SS" banner (header X-Holdfast-Stale). The baselines answer
// a generic 500 error page, as an unprotected app would. Never a stack trace.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "answers.hpp"
#include "club_store.hpp"
#include "front.hpp"
#include "holdfast/logger.hpp"
#include "security.hpp"

namespace httplib {
class Server;
}

namespace holdfast::panel {

struct PanelCounters {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> ok{0};
  std::atomic<std::uint64_t> busy_503{0};
  std::atomic<std::uint64_t> error_500{0};
  std::atomic<std::uint64_t> stale{0};
  std::atomic<std::uint64_t> bad_request{0};
};

class PanelServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;                               // 0: any free port (see port())
    ClubStore* store = nullptr;                 // REQUIRED; outlives the server
    Logger* logger = nullptr;                   // REQUIRED; outlives the server
    Duration window = std::chrono::seconds(6);  // the origin's RETRY_BUDGET_MS
    bool serve_stale = true;                    // holdfast: last good schedule instead of a 503
    int threads = 16;  // database-bound requests served at once (the front's bulkhead)
    // Mark the session cookie Secure (`holdfast panel --secure-cookies`, behind TLS).
    bool secure_cookies = false;
  };

  explicit PanelServer(Options options);
  ~PanelServer();
  PanelServer(const PanelServer&) = delete;
  PanelServer& operator=(const PanelServer&) = delete;

  // Binds and starts serving on a background thread. A port in use is a Status.
  Status start();
  // Stops serving and joins the thread. Idempotent.
  void stop() noexcept;
  [[nodiscard]] int port() const noexcept { return port_; }

  // A one-time sign-in link for `user_id`: the path and query to append to the server's
  // address ("/login/link?token=..."). Following it opens a session (the cookie POST /login
  // sets) and redirects to `next`, a path on this server. It works once, within
  // `valid_for`. `holdfast panel` prints one at start so nobody types the demo password;
  // the browser test signs in with it.
  std::string issue_sign_in_link(std::int64_t user_id,
                                 std::string_view next = "/dashboard/schedule",
                                 Duration valid_for = std::chrono::minutes(10));
  [[nodiscard]] const PanelCounters& counters() const noexcept { return counters_; }

 private:
  // The largest request body taken (a form is at most 8 KiB: httplib's own limit).
  static constexpr std::size_t kMaxBodyBytes = 64 * 1024;
  // Relays (and httplib threads) kept for the routes that never touch the database.
  static constexpr int kLightRelays = 4;

  void install_guards();
  void install_routes();
  std::string metrics_text() const;

  Options options_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<HttpFront> front_;  // the public socket (front.hpp)
  std::thread thread_;
  int port_ = 0;
  PanelCounters counters_;
  struct StaleCopy;
  std::mutex stale_mutex_;
  std::map<std::string, std::shared_ptr<const StaleCopy>> last_good_;
  std::unique_ptr<Answers> answers_;
  std::unique_ptr<AttemptLimiter> sign_in_by_account_;
  std::unique_ptr<AttemptLimiter> sign_in_by_address_;
  std::unique_ptr<AttemptLimiter> reports_by_address_;
  struct SignInLink {
    std::int64_t user_id;
    std::string next;
    TimePoint expires;
  };
  std::mutex links_mutex_;
  std::map<std::string, SignInLink> links_;
  // holdfast refreshes sessions off the request path (see server.cpp).
  struct Toucher;
  std::unique_ptr<Toucher> toucher_;
};

}  // namespace holdfast::panel
