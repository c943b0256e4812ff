// Signing in: GET /login (the form), POST /login (email and password, throttled per account
// and per address, its password check in a place of the SignInGate), GET /login/link?token=
// (a one-time link from issue_sign_in_link()); and out: POST /logout.
// Each success opens a session, sets its cookie (and, on PostgreSQL, the hf_wal cookie with
// that write's position), hands out its CSRF token in X-CSRF-Token and redirects (303).

#include <atomic>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "html.hpp"
#include "route_helpers.hpp"
#include "server.hpp"
#include "store_calls.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;

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

// A sign-in's place at the SignInGate while it lives: given back however the coroutine
// ends (leave() once started, give_up() while waiting).
class GatePlace {
 public:
  explicit GatePlace(SignInGate& gate) : gate_(gate) {}
  GatePlace(const GatePlace&) = delete;
  GatePlace& operator=(const GatePlace&) = delete;
  ~GatePlace() { leave(); }

  // Waits for a place on this coroutine's event loop (on the lane a wait that holds no
  // thread; on a worker, that worker's): kRun, or why not.
  net::awaitable<SignInGate::Turn> take(SignInGate::Asker asker) {
    // The gate's Wake may come from any thread: it notes the turn and cancels the timer on
    // the timer's own (single-threaded) loop, where it runs only once the wait below has
    // begun.
    struct Signal {
      explicit Signal(const net::any_io_executor& loop) : timer(loop) {}
      net::steady_timer timer;
      std::atomic<int> turn{-1};
    };
    const auto signal = std::make_shared<Signal>(co_await net::this_coro::executor);
    const SignInGate::Entry entry = gate_.enter(std::move(asker), [signal](SignInGate::Turn t) {
      signal->turn = static_cast<int>(t);
      net::post(signal->timer.get_executor(), [signal] { signal->timer.cancel(); });
    });
    id_ = entry.id;
    if (entry.turn != SignInGate::Turn::kWait) {
      running_ = entry.turn == SignInGate::Turn::kRun;
      co_return entry.turn;
    }
    waiting_ = true;
    signal->timer.expires_after(gate_.options().max_wait);
    (void)co_await signal->timer.async_wait(net::as_tuple(net::use_awaitable));
    waiting_ = false;
    const int told = signal->turn.load();
    // Not told: the wait is over, and so is the place unless it was given just now.
    const SignInGate::Turn turn =
        told >= 0 ? static_cast<SignInGate::Turn>(told) : gate_.give_up(entry.id);
    running_ = turn == SignInGate::Turn::kRun;
    co_return turn;
  }
  // The check is done: the place goes to the next waiter.
  void leave() {
    if (waiting_ && gate_.give_up(id_) == SignInGate::Turn::kRun) running_ = true;
    waiting_ = false;
    if (running_) gate_.leave(id_);
    running_ = false;
  }

 private:
  SignInGate& gate_;
  std::uint64_t id_ = 0;
  bool waiting_ = false;
  bool running_ = false;
};

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

net::awaitable<void> PanelServer::post_login(const http::Request& req, http::Response& res,
                                             lane::Context& ctx) {
  counters_.requests++;
  const std::optional<SignInAsk> ask = sign_in_asked(req, res);
  if (!ask) co_return;
  const Result<std::string> token = co_await sign_in(*ask, ctx);
  const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
  answer_sign_in(res, *ask, token);
}

net::awaitable<Result<std::string>> PanelServer::sign_in(const SignInAsk& ask, lane::Context& ctx) {
  ClubStore& store = *options_.store;
  const Result<std::optional<ClubStore::Credentials>> user =
      co_await ctx.calls.credentials(ctx, ask.email);
  if (!user.ok()) co_return user.status();
  // An unknown email goes through the same gate and costs the same check (the store's
  // dummy hash), so that neither the answer nor its time tells whether it has an account.
  const std::optional<ClubStore::Credentials>& stored = *user;
  const ClubStore::Credentials* found = stored.has_value() ? &*stored : nullptr;
  ClubStore::SignInCheck check;
  {
    GatePlace place(*sign_in_gate_);
    const SignInGate::Turn turn = co_await place.take(gate_asker(ask));
    if (turn != SignInGate::Turn::kRun) co_return gate_refusal(turn);
    if (ctx.on_lane) {
      // Tens of milliseconds of Argon2id: off the lane's event loop.
      check = co_await net::co_spawn(
          http_->cpu_executor(),
          [&]() -> net::awaitable<ClubStore::SignInCheck> {
            co_return store.check_sign_in(found, ask.email, ask.password);
          },
          net::use_awaitable);
    } else {
      check = store.check_sign_in(found, ask.email, ask.password);  // this worker's own
    }
  }
  if (found == nullptr || !check.right) {
    co_return Status(Code::kPermissionDenied, "unknown email or wrong password");
  }
  if (!check.fresh_hash.empty()) {
    // Its failure is not the sign-in's: the next one tries again.
    (void)co_await ctx.calls.rehash(ctx, found->user_id, check.fresh_hash, found->password_hash);
  }
  co_return co_await ctx.calls.open_session(ctx, found->user_id, now_utc());
}

net::awaitable<Result<std::optional<User>>> PanelServer::session_of(const std::string& token,
                                                                    const std::string& now,
                                                                    lane::Context& ctx,
                                                                    Priority priority) {
  if (token.empty()) co_return std::optional<User>();
  Result<ClubStore::StampedSession> read = co_await ctx.calls.session(ctx, token, now, priority);
  if (!read.ok()) co_return read.status();
  co_return std::move(read->user);
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

net::awaitable<void> PanelServer::get_login_link(const http::Request& req, http::Response& res,
                                                 lane::Context& ctx) {
  counters_.requests++;
  const std::optional<SignInLink> link = sign_in_link_taken(req, res);
  if (!link) co_return;
  const Result<std::string> session =
      co_await ctx.calls.open_session(ctx, link->user_id, now_utc());
  const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
  answer_sign_in_link(res, *link, session);
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

net::awaitable<void> PanelServer::post_logout(const http::Request& req, http::Response& res,
                                              lane::Context& ctx) {
  counters_.requests++;
  const std::string token = session_token(req);
  if (!token.empty()) {
    if (!logout_allowed(req, res, token)) co_return;
    if (const Status ended = co_await ctx.calls.end_session(ctx, token); !ended.ok()) {
      // The session lives on: say so rather than pretend (the cookie is kept).
      answers_->failure(res, ended, "/logout", false);
      co_return;
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
