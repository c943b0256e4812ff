// Signing in: GET /login (the form), POST /login (email and password, throttled per account
// and per address, its password check in a place of the SignInGate), GET /login/link?token=
// (a one-time link from issue_sign_in_link()); and out: POST /logout.
// Each success opens a session, sets its cookie (and, on PostgreSQL, the hf_wal cookie with
// that write's position), hands out its CSRF token in X-CSRF-Token and redirects (303).

#include "html.hpp"
#include "route_helpers.hpp"
#include "server.hpp"

namespace holdfast::panel {
namespace {

constexpr const char* kHtml = "text/html; charset=utf-8";

// The session cookie: not readable by scripts, not sent on cross-site subrequests, 30 days;
// Secure (HTTPS only) with `--secure-cookies`.
void set_session_cookie(http::Response& res, std::string_view token, bool secure) {
  set_cookie(res, "session", token, 2'592'000, secure);
}

// The answer to a sign-in that opened `session`.
void signed_in_redirect(http::Response& res, const std::string& session, bool secure_cookie,
                        const std::string& next) {
  res.status = 303;
  set_session_cookie(res, session, secure_cookie);
  res.set_header("X-CSRF-Token", csrf_token(session));
  res.set_header("Location", next);
}

}  // namespace

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

void PanelServer::get_login(const http::Request&, http::Response& res) {
  counters_.requests++;
  counters_.ok++;
  res.set_content(render_login(""), kHtml);
}

void PanelServer::post_login(const http::Request& req, http::Response& res) {
  counters_.requests++;
  std::optional<SignInAsk> ask = sign_in_asked(req, res);
  if (!ask) return;
  const RequestWindow scope = request_window(req);
  // The check waits for its place at the gate on this worker (at most a second).
  const ClubStore::CheckPlace at_the_gate = [&](const std::function<void()>& check) {
    std::uint64_t id = 0;
    const SignInGate::Turn turn = sign_in_gate_->wait_for_turn(gate_asker(*ask), id);
    if (turn != SignInGate::Turn::kRun) return gate_refusal(turn);
    struct Place {
      SignInGate& gate;
      std::uint64_t id;
      ~Place() { gate.leave(id); }
    } const place{*sign_in_gate_, id};
    check();
    return Status();
  };
  answer_sign_in(res, *ask,
                 options_.store->login(ask->email, ask->password, now_utc(), at_the_gate));
}

SignInGate::Asker PanelServer::gate_asker(const SignInAsk& ask) {
  return SignInGate::Asker{ask.address, ask.account, ask.failures};
}

Status PanelServer::gate_refusal(SignInGate::Turn turn) {
  return Status(Code::kResourceExhausted,
                std::string(turn == SignInGate::Turn::kKeyBusy ? kTooManyAtOnce : kBusySigningIn));
}

std::optional<PanelServer::SignInAsk> PanelServer::sign_in_asked(const http::Request& req,
                                                                 http::Response& res) {
  SignInAsk ask;
  ask.email = req.get_param_value("email");
  ask.password = req.get_param_value("password");
  if (Status input = ClubStore::check_login(ask.email, ask.password); !input.ok()) {
    counters_.bad_request++;
    res.status = 400;
    res.set_content(render_login(input.message()), kHtml);
    return std::nullopt;
  }
  // Throttled per account and per address before the password is looked at: each attempt
  // holds a place in the limits while it runs, and counts in the first two only if the
  // password was wrong, in the third (every check of the address) whatever the outcome.
  ask.account = "account:" + ask.email;
  ask.address = client_address(req);
  Duration wait = sign_in_by_account_->try_acquire(ask.account);
  if (wait == Duration::zero()) {
    wait = sign_in_by_address_->try_acquire(ask.address);
    if (wait > Duration::zero()) sign_in_by_account_->settle(ask.account, false);
  }
  bool every_check = false;
  if (wait == Duration::zero()) {
    wait = sign_ins_by_address_->try_acquire(ask.address);
    every_check = wait > Duration::zero();
    if (every_check) {
      sign_in_by_account_->settle(ask.account, false);
      sign_in_by_address_->settle(ask.address, false);
    }
  }
  if (wait > Duration::zero()) {
    counters_.bad_request++;
    res.status = 429;
    res.set_header("Retry-After", std::to_string(retry_after_header(wait)));
    res.set_content(render_login(wait <= AttemptLimiter::kBusyWait ? kTooManyAtOnce
                                 : every_check ? "Too many sign-ins from this address. Try "
                                                 "again in a minute."
                                               : "Too many failed sign-ins. Try again in a "
                                                 "minute."),
                    kHtml);
    return std::nullopt;
  }
  ask.failures = sign_in_by_address_->events(ask.address);
  return ask;
}

void PanelServer::answer_sign_in(http::Response& res, const SignInAsk& ask,
                                 const Result<std::string>& token) {
  // The store's own answer, never an engine's 42501 (a permission the database refused).
  const bool wrong_password = !token.ok() && token.status().code() == Code::kPermissionDenied &&
                              !from_engine(token.status());
  // The gate's own refusals: not a wrong password, not the database, and no check ran.
  const bool no_place =
      !token.ok() && token.status().code() == Code::kResourceExhausted &&
      !from_engine(token.status()) &&
      (token.status().message() == kBusySigningIn || token.status().message() == kTooManyAtOnce);
  sign_in_by_account_->settle(ask.account, wrong_password);
  sign_in_by_address_->settle(ask.address, wrong_password);
  sign_ins_by_address_->settle(ask.address, !no_place);
  if (!token.ok()) {
    if (wrong_password) {
      counters_.bad_request++;
      res.status = 401;
      res.set_content(render_login(token.status().message()), kHtml);
      return;
    }
    if (no_place) {
      const bool share_taken = token.status().message() == kTooManyAtOnce;
      (share_taken ? counters_.bad_request : counters_.busy_503)++;
      res.status = share_taken ? 429 : 503;
      res.set_header("Retry-After", "1");
      res.set_content(render_login(token.status().message()), kHtml);
      return;
    }
    return answers_->failure(res, token.status(), "/login", false);
  }
  counters_.ok++;
  confirm_session(*token, User{});
  signed_in_redirect(res, *token, options_.secure_cookies, "/dashboard/schedule");
  set_write_position_cookie(res);
}

void PanelServer::get_login_link(const http::Request& req, http::Response& res) {
  counters_.requests++;
  const std::optional<SignInLink> link = sign_in_link_taken(req, res);
  if (!link) return;
  const RequestWindow scope = request_window(req);
  answer_sign_in_link(res, *link, options_.store->open_session(link->user_id, now_utc()));
}

std::optional<PanelServer::SignInLink> PanelServer::sign_in_link_taken(const http::Request& req,
                                                                       http::Response& res) {
  const std::string token = req.get_param_value("token");
  std::optional<SignInLink> link;
  {
    std::lock_guard<std::mutex> lock(links_mutex_);
    if (auto it = links_.find(token); it != links_.end() && !token.empty()) {
      if (options_.store->clock().now() < it->second.expires) link = it->second;
      links_.erase(it);  // used or expired: gone either way
    }
  }
  if (!link) {
    counters_.bad_request++;
    res.status = 403;
    res.set_content(render_login("That sign-in link was used already or has expired."), kHtml);
  }
  return link;
}

void PanelServer::answer_sign_in_link(http::Response& res, const SignInLink& link,
                                      const Result<std::string>& session) {
  if (!session.ok()) return answers_->failure(res, session.status(), "/login/link", false);
  counters_.ok++;
  confirm_session(*session, User{});
  signed_in_redirect(res, *session, options_.secure_cookies, link.next);
  set_write_position_cookie(res);
}

void PanelServer::post_logout(const http::Request& req, http::Response& res) {
  counters_.requests++;
  const std::string token = session_token(req);
  if (!token.empty()) {
    if (!logout_allowed(req, res, token)) return;
    const RequestWindow scope = request_window(req);
    if (Status ended = options_.store->end_session(token); !ended.ok()) {
      // The session lives on: say so rather than pretend (the cookie is kept).
      return answers_->failure(res, ended, "/logout", false);
    }
  }
  answer_logout(res, token);
}

bool PanelServer::logout_allowed(const http::Request& req, http::Response& res,
                                 const std::string& token) {
  // A cross-site form cannot sign a user out: the same CSRF token as the writes.
  if (csrf_ok(req, token)) return true;
  answers_->client_error(res, 403,
                         "missing or wrong CSRF token: send the csrf_token form "
                         "field or the X-CSRF-Token header the panel gave at sign-in",
                         false);
  return false;
}

void PanelServer::answer_logout(http::Response& res, const std::string& token) {
  if (!token.empty()) forget_session(token);
  counters_.ok++;
  res.status = 303;
  set_cookie(res, "session", "", 0, options_.secure_cookies);  // Max-Age=0: the browser drops it
  res.set_header("Location", "/login");
}

}  // namespace holdfast::panel
