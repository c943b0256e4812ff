#include "server.hpp"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "holdfast/window.hpp"
#include "html.hpp"
#include "idempotency.hpp"

namespace holdfast::panel {
namespace {

using nlohmann::json;

std::string now_utc() {
  return std::string(utc_stamp(WallClock::system().now()).view());
}
std::string today_utc() {
  return now_utc().substr(0, 10);
}

bool valid_date(std::string_view s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  using namespace std::chrono;
  const int y = std::stoi(std::string(s.substr(0, 4)));
  const unsigned m = static_cast<unsigned>(std::stoi(std::string(s.substr(5, 2))));
  const unsigned d = static_cast<unsigned>(std::stoi(std::string(s.substr(8, 2))));
  return year_month_day(year(y), month(m), day(d)).ok();
}

std::string cookie_value(const httplib::Request& req, std::string_view name) {
  const std::string header = req.get_header_value("Cookie");
  std::string_view rest = header;
  while (!rest.empty()) {
    const auto semi = rest.find(';');
    std::string_view part = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    while (!part.empty() && part.front() == ' ')
      part.remove_prefix(1);
    if (part.size() > name.size() && part.substr(0, name.size()) == name &&
        part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
  }
  return {};
}

// The session cookie: not readable by scripts, not sent on cross-site subrequests, 30 days;
// Secure (HTTPS only) with `--secure-cookies`.
void set_session_cookie(httplib::Response& res, std::string_view token, bool secure) {
  res.set_header("Set-Cookie",
                 fmt::format("session={}; Path=/; HttpOnly; SameSite=Lax; Max-Age=2592000{}", token,
                             secure ? "; Secure" : ""));
}

// The schedule as /api/schedule answers it; `stale_as_of` marks the last good copy.
json schedule_json(const Schedule& s, const std::optional<std::string>& stale_as_of) {
  json j = {{"date", s.date},
            {"club", s.context.club_name},
            {"holidays", s.context.holidays},
            {"games", json::array()}};
  if (stale_as_of) j["stale_as_of"] = *stale_as_of;
  for (const Game& g : s.games) {
    j["games"].push_back({{"id", g.id},
                          {"court", g.court},
                          {"activity", g.activity},
                          {"starts_at", g.starts_at},
                          {"ends_at", g.ends_at},
                          {"capacity", g.capacity},
                          {"signed_up", g.signed_up}});
  }
  return j;
}

bool positive_integer(const std::string& text, std::int64_t& out) {
  if (text.empty() || text.size() > 12) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  out = std::stoll(text);
  return out > 0;
}

}  // namespace

struct PanelServer::StaleCopy {
  Schedule schedule;
  std::string as_of;  // "HH:MM:SS" UTC
};

// Session refreshes for holdfast: a page render must not wait for the write lock just to
// move last_seen forward, so renders hand the token to this background writer (bounded,
// deduplicated) and a refresh that meets a busy database is simply tried on a later render.
struct PanelServer::Toucher {
  explicit Toucher(ClubStore& store) : store_(store), thread_([this] { loop(); }) {}
  ~Toucher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void touch(const std::string& token) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.size() < 1024) pending_.insert(token);
    wake_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200),
                     [&] { return stop_ || !pending_.empty(); });
      std::set<std::string> batch;
      batch.swap(pending_);
      lock.unlock();
      for (const std::string& token : batch) {
        RequestScope scope(std::chrono::seconds(2), store_.clock());
        (void)store_.refresh_session(token, now_utc());
      }
      lock.lock();
    }
  }
  ClubStore& store_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::set<std::string> pending_;
  bool stop_ = false;
  std::thread thread_;
};

PanelServer::PanelServer(Options options)
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  if (options_.store == nullptr || options_.logger == nullptr) {
    throw std::invalid_argument("PanelServer: store and logger are required");
  }
  answers_ = std::make_unique<Answers>(*options_.logger, counters_,
                                       options_.store->strategy() == Strategy::kHoldfast);
  if (options_.store->strategy() == Strategy::kHoldfast) {
    toucher_ = std::make_unique<Toucher>(*options_.store);
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

std::string PanelServer::issue_sign_in_link(std::int64_t user_id, std::string_view next,
                                            Duration valid_for) {
  // Only a path on this server: "//host" or "https://..." would make it an open redirect.
  std::string target(next);
  if (target.empty() || target.front() != '/' || target.rfind("//", 0) == 0 ||
      target.find_first_of("\\\r\n") != std::string::npos) {
    target = "/dashboard/schedule";
  }
  std::string token = ClubStore::new_token();
  std::lock_guard<std::mutex> lock(links_mutex_);
  const TimePoint now = options_.store->clock().now();
  std::erase_if(links_, [&](const auto& kv) { return kv.second.expires <= now; });
  links_[token] = SignInLink{user_id, std::move(target), now + valid_for};
  return "/login/link?token=" + token;
}

Status PanelServer::start() {
  // httplib on a loopback port of its own; the front on the public one (front.hpp).
  const int upstream = http_->bind_to_any_port("127.0.0.1");
  if (upstream <= 0) return Status(Code::kUnavailable, "cannot listen on 127.0.0.1");
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  HttpFront::Options fo;
  fo.host = options_.host;
  fo.port = options_.port;
  fo.upstream_port = upstream;
  fo.heavy_relays = options_.threads;
  fo.light_relays = kLightRelays;
  front_ = std::make_unique<HttpFront>(fo);
  if (Status s = front_->start(); !s.ok()) {
    stop();
    return s;
  }
  port_ = front_->port();
  return Status();
}

void PanelServer::stop() noexcept {
  if (front_) front_->stop();
  if (thread_.joinable()) {
    http_->stop();
    thread_.join();
  }
  toucher_.reset();
}

std::string PanelServer::metrics_text() const {
  ClubStore& store = *options_.store;
  const std::string strategy(to_string(store.strategy()));
  std::string out;
  const auto counter = [&](std::string_view name, std::string_view help, std::uint64_t value) {
    out += fmt::format("# HELP holdfast_panel_{} {}\n# TYPE holdfast_panel_{} counter\n", name,
                       help, name);
    out += fmt::format("holdfast_panel_{}{{strategy=\"{}\"}} {}\n", name, strategy, value);
  };
  counter("requests_total", "HTTP requests received.", counters_.requests.load());
  counter("responses_ok_total", "Requests answered 2xx.", counters_.ok.load());
  counter("responses_busy_total", "Requests answered 503 (database busy).",
          counters_.busy_503.load());
  counter("responses_error_total", "Requests answered 500.", counters_.error_500.load());
  counter("stale_pages_total", "Schedules served from the last good copy.", counters_.stale.load());
  counter("bad_requests_total", "Requests answered 4xx for bad input.",
          counters_.bad_request.load());
  counter("database_attempts_total", "Database attempts made by the panel.", store.attempts());
  if (store.read_shield() != nullptr) {
    const Metrics::Labelled shields[] = {
        {&store.read_shield()->metrics(), store.read_shield()->name()},
        {&store.write_shield()->metrics(), store.write_shield()->name()}};
    out += Metrics::prometheus_text(shields);
  }
  return out;
}

void PanelServer::install_routes() {
  ClubStore& store = *options_.store;
  Logger& log = *options_.logger;
  const bool holdfast = store.strategy() == Strategy::kHoldfast;

  Answers& answers = *answers_;
  // A failure of the database or the panel: generic answer plus digest (answers.hpp).
  auto fail = [&answers](httplib::Response& res, const Status& s, std::string_view path,
                         bool as_json) { answers.failure(res, s, path, as_json); };

  http_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    counters_.requests++;
    counters_.ok++;
    res.set_content("ok\n", "text/plain");
  });

  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });

  http_->Get("/login", [this](const httplib::Request&, httplib::Response& res) {
    counters_.requests++;
    counters_.ok++;
    res.set_content(render_login(""), "text/html; charset=utf-8");
  });

  http_->Post("/login", [this, &store, holdfast, fail](const httplib::Request& req,
                                                       httplib::Response& res) {
    counters_.requests++;
    const std::string email = req.get_param_value("email");
    const std::string password = req.get_param_value("password");
    if (Status input = ClubStore::check_login(email, password); !input.ok()) {
      counters_.bad_request++;
      res.status = 400;
      res.set_content(render_login(input.message()), "text/html; charset=utf-8");
      return;
    }
    // Throttled per account and per address before the password is looked at.
    const std::string account = "account:" + email;
    const Duration wait = std::max(sign_in_by_account_->wait_for(account),
                                   sign_in_by_address_->wait_for(client_address(req)));
    if (wait > Duration::zero()) {
      counters_.bad_request++;
      res.status = 429;
      res.set_header("Retry-After", std::to_string(retry_after_header(wait)));
      res.set_content(render_login("Too many failed sign-ins. Try again in a minute."),
                      "text/html; charset=utf-8");
      return;
    }
    std::optional<RequestScope> scope;
    if (holdfast) scope.emplace(options_.window, store.clock());
    Result<std::string> token = store.login(email, password, now_utc());
    if (!token.ok()) {
      if (token.status().code() == Code::kPermissionDenied) {
        sign_in_by_account_->record(account);
        sign_in_by_address_->record(client_address(req));
        counters_.bad_request++;
        res.status = 401;
        res.set_content(render_login(token.status().message()), "text/html; charset=utf-8");
        return;
      }
      return fail(res, token.status(), "/login", false);
    }
    counters_.ok++;
    res.status = 303;
    set_session_cookie(res, *token, options_.secure_cookies);
    res.set_header("X-CSRF-Token", csrf_token(*token));
    res.set_header("Location", "/dashboard/schedule");
  });

  // A one-time sign-in link (issue_sign_in_link): a session without typing the password.
  http_->Get("/login/link",
             [this, &store, holdfast, fail](const httplib::Request& req, httplib::Response& res) {
               counters_.requests++;
               const std::string token = req.get_param_value("token");
               std::optional<SignInLink> link;
               {
                 std::lock_guard<std::mutex> lock(links_mutex_);
                 if (auto it = links_.find(token); it != links_.end() && !token.empty()) {
                   if (store.clock().now() < it->second.expires) link = it->second;
                   links_.erase(it);  // used or expired: gone either way
                 }
               }
               if (!link) {
                 counters_.bad_request++;
                 res.status = 403;
                 res.set_content(render_login("That sign-in link was used already or has expired."),
                                 "text/html; charset=utf-8");
                 return;
               }
               std::optional<RequestScope> scope;
               if (holdfast) scope.emplace(options_.window, store.clock());
               Result<std::string> session = store.open_session(link->user_id, now_utc());
               if (!session.ok()) return fail(res, session.status(), "/login/link", false);
               counters_.ok++;
               res.status = 303;
               set_session_cookie(res, *session, options_.secure_cookies);
               res.set_header("X-CSRF-Token", csrf_token(*session));
               res.set_header("Location", link->next);
             });

  // The schedule: a session read and two query groups, inside one RequestScope (holdfast).
  auto load_schedule = [this, &store, holdfast](const httplib::Request& req, httplib::Response& res,
                                                bool as_json) {
    counters_.requests++;
    const std::string date = req.has_param("date") ? req.get_param_value("date") : today_utc();
    if (!valid_date(date)) {
      answers_->client_error(res, 400, "date must be a calendar date written YYYY-MM-DD", as_json);
      return std::optional<Status>();
    }
    const std::string token = cookie_value(req, "session");
    if (token.empty() || token.size() > 64) {
      res.status = as_json ? 401 : 303;
      if (!as_json) res.set_header("Location", "/login");
      counters_.bad_request++;
      return std::optional<Status>();
    }
    std::optional<RequestScope> scope;
    if (holdfast) scope.emplace(options_.window, store.clock());
    const std::string now = now_utc();
    Status failure;
    Schedule schedule;
    User user;
    [&] {
      Result<std::optional<User>> who = store.session(token, now);
      if (!who.ok()) {
        failure = who.status();
        return;
      }
      if (!who->has_value()) {
        failure = Status(Code::kPermissionDenied, "no live session");
        return;
      }
      user = **who;
      if (holdfast) {
        toucher_->touch(token);
      } else if (Status touched = store.refresh_session(token, now); !touched.ok()) {
        failure = touched;  // the origin's "Failed to get session"
        return;
      }
      Result<std::vector<Game>> games = store.games_on(date);
      if (!games.ok()) {
        failure = games.status();
        return;
      }
      Result<ScheduleContext> context = store.context_on(date);
      if (!context.ok()) {
        failure = context.status();
        return;
      }
      schedule = Schedule{date, std::move(*games), std::move(*context)};
    }();
    if (failure.code() == Code::kPermissionDenied) {
      res.status = as_json ? 401 : 303;
      if (!as_json) res.set_header("Location", "/login");
      counters_.bad_request++;
      return std::optional<Status>();
    }
    if (!failure.ok()) {
      std::shared_ptr<const StaleCopy> copy;
      if (holdfast && options_.serve_stale && is_busy(failure)) {
        std::lock_guard<std::mutex> lock(stale_mutex_);
        if (auto it = last_good_.find(date); it != last_good_.end()) copy = it->second;
      }
      if (!copy) return std::optional<Status>(failure);
      counters_.stale++;
      counters_.ok++;
      res.set_header("X-Holdfast-Stale", copy->as_of);
      if (as_json) {
        res.set_content(schedule_json(copy->schedule, copy->as_of).dump(), "application/json");
      } else {
        User someone = user.id != 0 ? user : User{0, "signed-in user", "", "member"};
        res.set_content(render_schedule(copy->schedule, someone, copy->as_of),
                        "text/html; charset=utf-8");
      }
      return std::optional<Status>();
    }
    if (holdfast) {
      auto copy = std::make_shared<StaleCopy>(StaleCopy{schedule, now.substr(11, 8)});
      std::lock_guard<std::mutex> lock(stale_mutex_);
      last_good_[date] = std::move(copy);
    }
    counters_.ok++;
    res.set_header("X-CSRF-Token", csrf_token(token));
    if (as_json) {
      res.set_content(schedule_json(schedule, std::nullopt).dump(), "application/json");
    } else {
      res.set_content(
          with_csrf_fields(render_schedule(schedule, user, std::nullopt), csrf_token(token)),
          "text/html; charset=utf-8");
    }
    return std::optional<Status>();
  };

  http_->Get("/dashboard/schedule",
             [load_schedule, fail](const httplib::Request& req, httplib::Response& res) {
               if (auto failed = load_schedule(req, res, false)) {
                 fail(res, *failed, "/dashboard/schedule", false);
               }
             });
  http_->Get("/api/schedule",
             [load_schedule, fail](const httplib::Request& req, httplib::Response& res) {
               if (auto failed = load_schedule(req, res, true)) {
                 fail(res, *failed, "/api/schedule", true);
               }
             });

  // Writes: all or nothing; an Idempotency-Key makes a repeat return the first result.
  auto signed_in = [this, &store](const httplib::Request& req, httplib::Response& res,
                                  std::int64_t& user_id) -> std::optional<Status> {
    const std::string token = cookie_value(req, "session");
    Result<std::optional<User>> who = token.empty()
                                          ? Result<std::optional<User>>(std::optional<User>())
                                          : store.session(token, now_utc());
    if (!who.ok()) return who.status();
    if (!who->has_value()) {
      counters_.bad_request++;
      res.status = 401;
      res.set_content(json{{"error", "sign in first (POST /login)"}}.dump(), "application/json");
      return std::nullopt;
    }
    user_id = (*who)->id;
    if (!csrf_ok(req, token)) {
      answers_->client_error(res, 403,
                             "missing or wrong CSRF token: send the csrf_token form field or the "
                             "X-CSRF-Token header the panel gave at sign-in",
                             true);
      return std::nullopt;
    }
    return Status();
  };
  auto write_failed = [&answers](httplib::Response& res, const Status& s, std::string_view path) {
    answers.write_failure(res, s, path);
  };

  // The common start of a write: counted, inside the request's window (holdfast), signed
  // in, and one positive whole number read from the form; `body` does the rest.
  auto write_route = [this, &store, holdfast, signed_in, write_failed](
                         std::string path, std::string field, std::string field_error, auto body) {
    return [this, &store, holdfast, signed_in, write_failed, path, field, field_error, body](
               const httplib::Request& req, httplib::Response& res) {
      counters_.requests++;
      std::optional<RequestScope> scope;
      if (holdfast) scope.emplace(options_.window, store.clock());
      std::int64_t user_id = 0;
      std::optional<Status> auth = signed_in(req, res, user_id);
      if (!auth) return;
      if (!auth->ok()) return write_failed(res, *auth, path);
      std::int64_t value = 0;
      if (!positive_integer(request_field(req, field), value)) {
        return answers_->client_error(res, 400, field_error, true);
      }
      body(req, res, user_id, value);
    };
  };

  http_->Post(
      "/payments",
      write_route(
          "/payments", "amount_cents", "amount_cents must be a positive whole number of cents",
          [this, &store, &log, write_failed](const httplib::Request& req, httplib::Response& res,
                                             std::int64_t user_id, std::int64_t cents) {
            std::string method = request_field(req, "method");
            if (method.empty()) method = "card";
            const std::string key = req.get_header_value("Idempotency-Key");
            if (Status input = ClubStore::check_payment(cents, method, key); !input.ok()) {
              return answers_->client_error(res, 400, input.message(), true);
            }
            Result<PaymentReceipt> paid = store.pay(user_id, cents, method, key, now_utc());
            if (!paid.ok() && is_key_reused(paid.status())) {
              return answers_->client_error(res, 422, kKeyReusedMessage, true);
            }
            if (!paid.ok()) return write_failed(res, paid.status(), "/payments");
            if (!paid->replayed) {
              log.info("payments", "payment recorded",
                       {{"payment_id", paid->payment_id}, {"amount_cents", paid->amount_cents}});
            }
            counters_.ok++;
            res.status = paid->replayed ? 200 : 201;
            res.set_content(json{{"payment_id", paid->payment_id},
                                 {"amount_cents", paid->amount_cents},
                                 {"replayed", paid->replayed}}
                                .dump(),
                            "application/json");
          }));

  http_->Post("/signups",
              write_route("/signups", "game_id", "game_id must be a positive whole number",
                          [this, &store](const httplib::Request& req, httplib::Response& res,
                                         std::int64_t user_id, std::int64_t game) {
                            const std::string key = req.get_header_value("Idempotency-Key");
                            if (Status input = ClubStore::check_sign_up(game, key); !input.ok()) {
                              return answers_->client_error(res, 400, input.message(), true);
                            }
                            Result<SignupReceipt> added =
                                store.sign_up(user_id, game, key, now_utc());
                            if (!added.ok())
                              return answers_->write_refusal(res, added.status(), "/signups");
                            counters_.ok++;
                            res.status = added->replayed ? 200 : 201;
                            res.set_content(json{{"signup_id", added->signup_id},
                                                 {"game_id", added->game_id},
                                                 {"replayed", added->replayed}}
                                                .dump(),
                                            "application/json");
                          }));

  http_->Post("/report", [this, &store, &log, holdfast](const httplib::Request& req,
                                                        httplib::Response& res) {
    counters_.requests++;
    std::optional<RequestScope> scope;
    if (holdfast) scope.emplace(options_.window, store.clock());
    const std::string path = req.has_param("path") ? req.get_param_value("path") : "";
    const std::string digest = req.has_param("digest") ? req.get_param_value("digest") : "";
    const std::string note = req.has_param("note") ? req.get_param_value("note") : "";
    const std::string now = now_utc();
    // The console always gets the report, even when the database cannot take it.
    log.warn("report", "problem reported",
             {{"path", std::string_view(path)},
              {"digest", std::string_view(digest)},
              {"at", std::string_view(now)}});
    if (Status input = ClubStore::check_report(path, digest, note); !input.ok()) {
      return answers_->client_error(res, 400, input.message(), false);
    }
    Status recorded = store.record_report(path, digest, note, now);
    if (!recorded.ok()) {
      log.warn("report", "report not stored", {{"status", std::string_view(recorded.to_string())}});
    }
    counters_.ok++;
    res.status = 202;
    res.set_content(
        fmt::format("<!doctype html><title>Thank you</title><p>Thank you. Your report{} was "
                    "recorded at {}{}.</p>",
                    digest.empty() ? "" : " (" + escape_html(digest) + ")", escape_html(now),
                    recorded.ok() ? "" : " in the server log"),
        "text/html; charset=utf-8");
  });
}

}  // namespace holdfast::panel
