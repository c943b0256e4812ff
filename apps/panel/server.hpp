// The demo panel: its routes over a ClubStore, served by HttpServer (http_server.hpp).
//
// Routes: GET /login, POST /login, GET /login/link?token= (one-time sign-in links), POST /logout,
// GET /dashboard/schedule?date=, GET /api/schedule?date=,
// POST /payments, POST /signups (Idempotency-Key honoured), POST /report, GET /metrics,
// GET /healthz, GET /status and GET /status.svg (signed in: the Shields now and the last
// five minutes of answers; status_page.hpp).
//
// Every route with database work is one coroutine, whatever the strategy (ADR 0052): on
// HttpServer's async lane (holdfast on the system clock), its calls the library's adapters
// (store_calls.hpp); otherwise run to its end on a worker, its calls the store's blocking
// ones. With the holdfast strategy each request's calls draw from one window (6 s). When
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
#include <optional>
#include <string>
#include <vector>

#include "answers.hpp"
#include "club_store.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/log/logger.hpp"
#include "http_message.hpp"
#include "http_server.hpp"
#include "security.hpp"
#include "sign_in_gate.hpp"

namespace holdfast {
class DatabaseSink;
}

namespace holdfast::asio {
template <class T>
class SharedReads;
}

namespace holdfast::panel {

class Housekeeper;
class LaneLogStore;
class PgLane;
struct SchedulePage;
class SessionToucher;
class StoreCalls;
namespace lane {
struct Context;
}
class TrafficRing;
struct StatusView;

struct PanelCounters {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> ok{0};
  std::atomic<std::uint64_t> busy_503{0};
  std::atomic<std::uint64_t> error_500{0};
  std::atomic<std::uint64_t> stale{0};
  std::atomic<std::uint64_t> current_copy{0};  // schedules whose copy was still current
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
    int threads = 16;  // database-bound requests served at once (HttpServer's heavy workers)
    // Every route with database work (the schedule, payments, sign-ups, sign-in and
    // sign-out, links, reports, /status) on HttpServer's async lane when the store has
    // ClubStore::async_access() and runs on the system clock (ADRs 0029, 0030); false: on
    // the workers, each run to its end on one with the store's blocking calls (ADR 0052).
    bool async_lane = true;
    // The password checks' places (SignInGate, sign_in_gate.hpp), on the lane and on the
    // workers alike: checks started at once (each is about 0.1 s of CPU, two at a time: 4
    // keeps both busy and leaves the order to the gate), sign-ins waiting for a place (at
    // most 1 s each, the fewest failed sign-ins of their address first; 0: none wait), and
    // the places one address, or one account, may hold of those. Past them a sign-in is
    // answered 503 + Retry-After (429 + Retry-After: 1 past its address's or account's
    // share), so that sign-ins from many addresses cannot fill the lane's places, and a
    // flood from many addresses leaves a user of another address a check within a second.
    int max_password_checks = 4;  // at least 1 is used
    int password_check_queue = 12;
    int password_checks_per_address = 2;
    // Names a request's Host may carry besides the loopback names and `host`
    // (HttpServer::Options::allowed_hosts; `holdfast panel --allow-host`): any other gets 421.
    std::vector<std::string> allowed_hosts;
    // Mark the session cookie Secure (`holdfast panel --secure-cookies`, behind TLS).
    bool secure_cookies = false;
    // The logs table's sink (PanelLogging::sink), when there is one: /status shows whether
    // its overload pause is on. Outlives the server.
    const DatabaseSink* log_sink = nullptr;
    // holdfast's logs store on PostgreSQL (PanelLogging::lane_store), when there is one: its
    // batches are written on the event loop while the lane runs. Outlives the server.
    LaneLogStore* lane_logs = nullptr;
    // How often expired sessions and day-old idempotency keys are deleted, in small batches
    // off the request path (housekeeper.hpp); the first time after one period. Zero: never.
    std::chrono::milliseconds housekeeping_every = std::chrono::minutes(10);
  };

  explicit PanelServer(Options options);
  ~PanelServer();
  PanelServer(const PanelServer&) = delete;
  PanelServer& operator=(const PanelServer&) = delete;

  // Binds and starts serving on background threads. A port in use is a Status.
  Status start();
  // Stops serving and joins the threads. Idempotent.
  void stop() noexcept;
  [[nodiscard]] int port() const noexcept { return port_; }
  // The HTTP server, once started (its counters, for tests and /metrics); else null.
  [[nodiscard]] const HttpServer* http_server() const noexcept { return http_.get(); }

  // A one-time sign-in link for `user_id`: the path and query to append to the server's
  // address ("/login/link?token=..."). Following it opens a session (the cookie POST /login
  // sets) and redirects to `next`, a path on this server. It works once, within
  // `valid_for`. `holdfast panel` prints one at start so nobody types the demo password;
  // the browser test signs in with it.
  std::string issue_sign_in_link(std::int64_t user_id,
                                 std::string_view next = "/dashboard/schedule",
                                 Duration valid_for = std::chrono::minutes(10));
  [[nodiscard]] const PanelCounters& counters() const noexcept { return counters_; }
  // Schedules kept to answer from while the database is busy: one per date, at most
  // kStaleCopies (the copy kept longest ago gives way).
  [[nodiscard]] std::size_t stale_copies() const;
  static constexpr std::size_t kStaleCopies = 64;
  // Problem reports taken a minute from all addresses together (10 from each).
  static constexpr int kReportsPerMinute = 100;
  // Password checks a minute from one address whatever their outcome (besides the 5 failed
  // ones): a sign-in lasts 30 days, so an office behind one address signs in a few times a
  // day; 30 a minute is one every 2 s, at most 5 % of a core of Argon2id per address.
  static constexpr int kSignInsPerAddressPerMinute = 30;

 private:
  // Workers kept for the routes that never touch the database.
  static constexpr int kLightWorkers = 4;

  void install_guards();
  // The async lane's threads for a store of `connections` (server.cpp).
  [[nodiscard]] static int lane_threads(int connections);
  // On HttpServer's workers: the light routes (by method and path; the routes live in
  // routes_<resource>.cpp), and, without the lane, the database routes (serve_here()).
  void handle(const http::Request& req, http::Response& res);
  // True for a route with database work (the async lane's, or serve_here()'s).
  [[nodiscard]] static bool is_database_route(const http::Request& req) noexcept;
  // A database route run to its end on this worker's thread (its own event loop), its calls
  // the store's blocking ones (blocking_calls()).
  void serve_here(const http::Request& req, http::Response& res);
  // A database route: the guards, the request's Context (its window open from its arrival,
  // DESIGN §10, capped by an upstream deadline, with the client's hf_wal position), the
  // route, then record_traffic(). `calls` null: on the lane before its PostgreSQL Clients
  // opened (503 + Retry-After).
  boost::asio::awaitable<void> serve(const http::Request& req, http::Response& res,
                                     StoreCalls* calls, bool on_lane);
  // holdfast: the request's window (open from its arrival on the lane and on PostgreSQL,
  // capped by an upstream deadline) and its reads' position (the hf_wal cookie).
  void scope_request(const http::Request& req, lane::Context& ctx) const;
  // The route of a database request (is_database_route()), by its method and path.
  boost::asio::awaitable<void> route(const http::Request& req, http::Response& res,
                                     lane::Context& ctx);
  // What every request meets before its route (server_guards.cpp): true when it answered.
  bool refused_by_guards(const http::Request& req, http::Response& res);
  // When an upstream proxy said how long it waits for the answer (kUpstreamTimeoutHeader):
  // caps `window` there, counted from the request's arrival (server_guards.cpp). A request
  // whose sender has gone gets no more retries: its answer (a stale copy, a 503 with
  // Retry-After) comes while someone still reads it. A malformed value is refused by the
  // guards.
  static void cap_by_upstream(const http::Request& req, RetryWindow& window);

  [[nodiscard]] bool holdfast() const noexcept {
    return options_.store->strategy() == Strategy::kHoldfast;
  }
  // After a request that wrote: the hf_wal cookie with the position the client's next reads
  // must see, whichever process serves them (ClubStore::write_position()). Nothing when the
  // store has no position (SQLite, a baseline).
  void set_write_position_cookie(http::Response& res) const;

  // routes_service.cpp: the service's own routes.
  void get_healthz(const http::Request& req, http::Response& res);
  void get_metrics(const http::Request& req, http::Response& res);
  boost::asio::awaitable<void> post_report(const http::Request& req, http::Response& res,
                                           lane::Context& ctx);
  // What a problem report asks once checked (and logged); nullopt after answering 400.
  struct ReportAsk {
    std::string path;
    std::string digest;
    std::string note;
    std::string now;
  };
  std::optional<ReportAsk> report_asked(const http::Request& req, http::Response& res);
  // 202 whether or not the store kept it (`recorded`): the log has it.
  void answer_report(http::Response& res, const ReportAsk& ask, const Status& recorded);
  std::string metrics_text() const;

  // routes_session.cpp: signing in.
  void get_login(const http::Request& req, http::Response& res);
  boost::asio::awaitable<void> post_login(const http::Request& req, http::Response& res,
                                          lane::Context& ctx);
  // What a sign-in asks, once its input is checked and it has a place in both throttles.
  struct SignInAsk {
    std::string email;
    std::string password;
    std::string account;  // its keys in sign_in_by_account_, sign_in_by_address_ and
    std::string address;  // sign_ins_by_address_
    int failures = 0;     // the address's failed sign-ins within the minute (the gate's order)
  };
  // nullopt after answering (400 or 429).
  std::optional<SignInAsk> sign_in_asked(const http::Request& req, http::Response& res);
  // The refusals of the password checks' gate (RESOURCE_EXHAUSTED): no place (503), or the
  // address's or account's share taken (429).
  static constexpr std::string_view kBusySigningIn =
      "The panel is busy signing others in. Try again in a second.";
  static constexpr std::string_view kTooManyAtOnce =
      "Too many sign-ins at once. Try again in a second.";
  // The ask as the gate sees it, and the Status of a turn that is not kRun.
  [[nodiscard]] static SignInGate::Asker gate_asker(const SignInAsk& ask);
  [[nodiscard]] static Status gate_refusal(SignInGate::Turn turn);
  // Settles the throttles and answers (303 with the session, 401, 503 + Retry-After for
  // kBusySigningIn, 429 + Retry-After: 1 for kTooManyAtOnce, or the failure).
  void answer_sign_in(http::Response& res, const SignInAsk& ask, const Result<std::string>& token);
  // A sign-in's session (a token), or why there is none: its credentials read, its password
  // checked in a place of the SignInGate (on HttpServer::cpu_executor() on the lane), a
  // fresh hash written when due, and the session opened.
  boost::asio::awaitable<Result<std::string>> sign_in(const SignInAsk& ask, lane::Context& ctx);
  boost::asio::awaitable<void> get_login_link(const http::Request& req, http::Response& res,
                                              lane::Context& ctx);
  struct SignInLink {
    std::int64_t user_id;
    std::string next;
    TimePoint expires;
  };
  // The link the request names, taken (it works once), or nullopt after answering 403.
  std::optional<SignInLink> sign_in_link_taken(const http::Request& req, http::Response& res);
  void answer_sign_in_link(http::Response& res, const SignInLink& link,
                           const Result<std::string>& session);
  // POST /logout: ends the session (CSRF-checked like the writes) and clears its cookie.
  boost::asio::awaitable<void> post_logout(const http::Request& req, http::Response& res,
                                           lane::Context& ctx);
  // Its CSRF check (false after answering 403), and its answer once the session `token`
  // (empty: none was sent) is ended.
  bool logout_allowed(const http::Request& req, http::Response& res, const std::string& token);
  void answer_logout(http::Response& res, const std::string& token);

  // routes_schedule.cpp: the schedule, as a page (GET /dashboard/schedule) and as JSON
  // (GET /api/schedule): the schedule, a redirect or 401 to sign in, a 400, the last good
  // copy, or the failure.
  boost::asio::awaitable<void> get_schedule(const http::Request& req, http::Response& res,
                                            lane::Context& ctx);
  // What a schedule request asks, known before any read.
  struct ScheduleAsk {
    std::string date;   // YYYY-MM-DD
    std::string token;  // the session cookie
    std::string now;    // ISO-8601, UTC
    bool as_json = false;
  };
  // The checks before any read: false when they answered (400, a redirect or 401).
  bool schedule_asked(const http::Request& req, http::Response& res, bool as_json,
                      ScheduleAsk& ask);
  // What the reads found (read_schedule()'s outputs).
  struct ScheduleRead {
    Status failure;
    std::shared_ptr<const SchedulePage> page;  // set when failure is OK
    User user;
    bool signed_out = false;
    std::uint64_t epoch = 0;    // the data epoch observed before the reads (0: none)
    bool current_copy = false;  // the schedule is the last good copy, still current
  };
  // After the reads: answers, or returns the failure to answer.
  std::optional<Status> answer_schedule_read(const ScheduleAsk& ask, http::Response& res,
                                             ScheduleRead& read);
  // The session's user and the schedule of `ask.date`. `read.signed_out` is set only when
  // the database answered that the session is not live (never for an error of the
  // database).
  boost::asio::awaitable<void> read_schedule(lane::Context& ctx, const ScheduleAsk& ask,
                                             ScheduleRead& read);
  // The user of the request's session cookie (`token`; empty: none), as ClubStore::session()
  // reads it; the read in the class of the route it authorizes (`priority`).
  boost::asio::awaitable<Result<std::optional<User>>> session_of(
      const std::string& token, const std::string& now, lane::Context& ctx,
      Priority priority = Priority::kNormal);
  // Answers the last good copy of `date`'s schedule when `failure` allows it (holdfast,
  // serve_stale, busy) and there is one; false when it answered nothing.
  bool answer_stale_schedule(http::Response& res, const std::string& date, const User& user,
                             const Status& failure, bool as_json);

  // routes_status.cpp: the live status page (GET /status) and its chart (GET /status.svg),
  // for a live session, or, while the database cannot say, for a session it confirmed for
  // /status within the last five minutes; every answer is counted for the chart.
  boost::asio::awaitable<void> get_status(const http::Request& req, http::Response& res,
                                          lane::Context& ctx);
  // Whether the session `token` (empty: none) may see it, given what a read of the session
  // answered (`who`); otherwise answers (a redirect, 401 or the failure) and false.
  bool status_allowed(http::Response& res, std::string_view path, bool image,
                      const std::string& token, const Result<std::optional<User>>& who);
  // The page or its chart (`image`), once allowed.
  void answer_status(http::Response& res, bool image);
  [[nodiscard]] StatusView status_view() const;
  // After every route: counts the answer in traffic_ (lock-free, no allocation).
  void record_traffic(const http::Request& req, const http::Response& res) noexcept;

  // routes_writes.cpp: payments and signups, all or nothing; an Idempotency-Key makes a
  // repeat return the first result.
  boost::asio::awaitable<void> post_write(const http::Request& req, http::Response& res,
                                          lane::Context& ctx);
  struct WriteInput {
    std::int64_t user_id = 0;
    std::int64_t value = 0;  // the route's positive whole number
    std::string method;      // payments: "cash" or "card"
    std::string key;         // the Idempotency-Key, or empty
  };
  // What every write starts with: a signed-in user (with the CSRF token a form needs), the
  // route's positive whole number (amount_cents or game_id), the payment's method and the
  // Idempotency-Key, all checked, given what a read of the session answered (`who`).
  // nullopt after answering the request.
  std::optional<WriteInput> write_input(const http::Request& req, http::Response& res,
                                        std::string_view path, const std::string& token,
                                        const Result<std::optional<User>>& who);
  // What the store answered, as the answer (201, 200 for a replay, or the refusal).
  void answer_payment(http::Response& res, const Result<PaymentReceipt>& paid);
  void answer_signup(http::Response& res, const Result<SignupReceipt>& added);

  // The lane's PostgreSQL calls on its event loop (pg_lane.hpp): the hooks that make and
  // release them with the loop, or nullopt when the calls stay blocking jobs (PgLane::wanted()).
  std::optional<HttpServer::LaneHooks> event_loop_calls();

  Options options_;
  std::unique_ptr<HttpServer> http_;
  // Made and released by event_loop_calls()' hooks (shared: PgLane is complete only there).
  std::shared_ptr<PgLane> pg_lane_;
  // The routes' calls on the lane for SQLite (sqlite_calls()), and on the workers
  // (blocking_calls()).
  std::unique_ptr<StoreCalls> sqlite_calls_;
  std::unique_ptr<StoreCalls> blocking_calls_;
  int port_ = 0;
  PanelCounters counters_;
  std::unique_ptr<TrafficRing> traffic_;  // answers per second, for /status
  // Sessions the database confirmed lately (a sign-in, a schedule or /status read), by
  // token: while the database cannot say, only these see /status and the schedule's last
  // good copy, until `until`. At most kConfirmedSessions, the one confirmed longest ago
  // dropped first.
  struct ConfirmedSession {
    TimePoint until;
    User user;  // id 0 when only the token is known (a sign-in)
  };
  static constexpr std::size_t kConfirmedSessions = 1024;
  void confirm_session(const std::string& token, const User& user);
  void forget_session(const std::string& token);
  // The user of a session confirmed lately, else nullopt.
  std::optional<User> confirmed_session(const std::string& token);
  std::mutex confirmed_mutex_;
  std::map<std::string, ConfirmedSession> confirmed_;
  struct StaleCopy;
  // Keeps `page` as the date's last good copy, read at `now` (ISO-8601 UTC) after the
  // data epoch `epoch` was observed (0: none).
  void keep_stale_copy(const std::string& date, std::shared_ptr<const SchedulePage> page,
                       std::string_view now, std::uint64_t epoch);
  // The date's last good copy when it was read after observing `epoch` (not 0) and so is
  // still the file's content (sqlite::ChangeEpoch, holdfast/sqlite/change_epoch.hpp); it is
  // confirmed as of `now`. Else nullptr.
  [[nodiscard]] std::shared_ptr<const SchedulePage> current_copy(const std::string& date,
                                                                 std::uint64_t epoch,
                                                                 std::string_view now) const;
  // The reads of a day's schedule under way on the async lane, each shared by the requests
  // that miss the day's copy meanwhile (holdfast/adapters/asio_shared_reads.hpp).
  std::unique_ptr<asio::SharedReads<SchedulePage>> schedule_reads_;
  mutable std::mutex stale_mutex_;
  std::map<std::string, std::shared_ptr<const StaleCopy>> last_good_;
  std::uint64_t stale_copies_kept_ = 0;
  std::unique_ptr<Answers> answers_;
  std::unique_ptr<AttemptLimiter> sign_in_by_account_;
  std::unique_ptr<AttemptLimiter> sign_in_by_address_;
  // Every password check of an address (kSignInsPerAddressPerMinute), and their places.
  std::unique_ptr<AttemptLimiter> sign_ins_by_address_;
  std::unique_ptr<SignInGate> sign_in_gate_;
  std::unique_ptr<AttemptLimiter> reports_by_address_;
  std::unique_ptr<AttemptLimiter> all_reports_;
  std::mutex links_mutex_;
  std::map<std::string, SignInLink> links_;
  // holdfast refreshes sessions off the request path (session_toucher.hpp).
  std::unique_ptr<SessionToucher> toucher_;
  std::unique_ptr<Housekeeper> housekeeper_;  // retention of sessions and keys
};

}  // namespace holdfast::panel
