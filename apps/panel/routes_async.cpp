// The async lane's routes (ADRs 0029, 0030): which requests HttpServer gives it, one
// RetryWindow per request open from its arrival (DESIGN §10), and the writes: payments,
// sign-ups, sign-ins and sign-outs with the same answers as routes_writes.cpp and
// routes_session.cpp, each database call driven by holdfast::asio::async_run
// (async_call.hpp). A sign-in's password check (tens of milliseconds of Argon2id) runs on
// HttpServer::cpu_executor(), so that it never stalls the lane's event loop.

#include <algorithm>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "async_call.hpp"
#include "route_helpers.hpp"
#include "server.hpp"

namespace holdfast::panel {

namespace net = boost::asio;
using lane::read_call;
using lane::write_call;

bool PanelServer::is_async_route(const http::Request& req) noexcept {
  // Every route with database work. (GET /login, /healthz and /metrics are light: the
  // server keeps them on workers of their own.)
  if (req.method == "GET" || req.method == "HEAD") {
    return req.path == "/dashboard/schedule" || req.path == "/api/schedule" ||
           req.path == "/login/link" || req.path == "/status" || req.path == "/status.svg";
  }
  return req.method == "POST" &&
         (req.path == "/payments" || req.path == "/signups" || req.path == "/login" ||
          req.path == "/logout" || req.path == "/report");
}

net::awaitable<void> PanelServer::handle_async(const http::Request& req, http::Response& res) {
  if (!refused_by_guards(req, res)) {
    // Open from the request's arrival (DESIGN §10): whatever it met before its calls, the
    // answer comes within the window of whoever sent it. (Request::received is on the
    // store's clock: PanelServer::start() gives it to HttpServer.)
    lane::Context ctx(options_.window, options_.store->clock());
    if (req.received != TimePoint{}) ctx.window.open(req.received);
    if (options_.store->async_access()->blocking()) {
      // PostgreSQL: the tries block, on the pools sized to the connections (start()); the
      // reads must see the writes the client's hf_wal cookie names, as on the workers.
      ctx.read_jobs = http_->blocking_executor(0);
      ctx.write_jobs = http_->blocking_executor(1);
      const lane::OnThisThread request(ctx);
      options_.store->require_position(cookie_value(req, kWritePositionCookie));
    }
    if (req.path == "/status" || req.path == "/status.svg") {
      co_await get_status_async(req, res, ctx);
    } else if (req.path == "/login/link") {
      co_await get_login_link_async(req, res, ctx);
    } else if (req.method != "POST") {
      co_await get_schedule_async(req, res, ctx);
    } else if (req.path == "/report") {
      co_await post_report_async(req, res, ctx);
    } else if (req.path == "/login") {
      co_await post_login_async(req, res, ctx);
    } else if (req.path == "/logout") {
      co_await post_logout_async(req, res, ctx);
    } else {
      co_await post_write_async(req, res, ctx);
    }
  }
  record_traffic(req, res);
}

net::awaitable<void> PanelServer::post_write_async(const http::Request& req, http::Response& res,
                                                   lane::Context& ctx) {
  counters_.requests++;
  ClubStore& store = *options_.store;
  const bool payment = req.path == "/payments";
  const std::string token = session_token(req);
  const std::string now = now_utc();
  const Result<std::optional<User>> who = co_await session_async(token, now, ctx);
  const std::optional<WriteInput> in = write_input_of(req, res, req.path, token, who);
  if (!in) co_return;
  // As the store's own loop runs them: a whole transaction, re-run after a rollback; with a
  // key, idempotent too (the key makes a repeat apply nothing).
  const Idempotency idempotency =
      in->key.empty() ? Idempotency::kNonIdempotent : Idempotency::kIdempotent;
  if (payment) {
    const Operation op{idempotency, true, "payments.create"};
    const Result<PaymentReceipt> paid = co_await write_call<Result<PaymentReceipt>>(
        store, ctx, op,
        [&] { return store.pay_once(in->user_id, in->value, in->method, in->key, now); });
    const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
    answer_payment(res, paid);
  } else {
    const Operation op{idempotency, true, "signups.create"};
    const Result<SignupReceipt> added = co_await write_call<Result<SignupReceipt>>(
        store, ctx, op, [&] { return store.sign_up_once(in->user_id, in->value, in->key, now); });
    const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
    answer_signup(res, added);
  }
}

net::awaitable<void> PanelServer::post_logout_async(const http::Request& req, http::Response& res,
                                                    lane::Context& ctx) {
  counters_.requests++;
  ClubStore& store = *options_.store;
  const std::string token = session_token(req);
  if (!token.empty()) {
    if (!logout_allowed(req, res, token)) co_return;
    const Status ended =
        co_await write_call<Status>(store, ctx, Operation::idempotent_write("session.end"),
                                    [&] { return store.end_session_once(token); });
    if (!ended.ok()) {
      // The session lives on: say so rather than pretend (the cookie is kept).
      answers_->failure(res, ended, "/logout", false);
      co_return;
    }
  }
  answer_logout(res, token);
}

net::awaitable<void> PanelServer::post_login_async(const http::Request& req, http::Response& res,
                                                   lane::Context& ctx) {
  counters_.requests++;
  const std::optional<SignInAsk> ask = sign_in_asked(req, res);
  if (!ask) co_return;
  const Result<std::string> token = co_await sign_in_async(*ask, ctx);
  const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
  answer_sign_in(res, *ask, token);
}

net::awaitable<Result<std::string>> PanelServer::sign_in_async(const SignInAsk& ask,
                                                               lane::Context& ctx) {
  ClubStore& store = *options_.store;
  using Found = Result<std::optional<ClubStore::Credentials>>;
  const Found user = co_await read_call<Found>(store, ctx, Operation::read("login.user"),
                                               [&] { return store.credentials_once(ask.email); });
  if (!user.ok()) co_return user.status();
  const Status wrong(Code::kPermissionDenied, "unknown email or wrong password");
  if (!user->has_value()) co_return wrong;
  const ClubStore::Credentials& found = **user;
  // At most max_password_checks run or wait at once; each place is given back when its
  // check is done, however this coroutine ends.
  if (password_checks_.fetch_add(1) >= std::max(options_.max_password_checks, 1)) {
    password_checks_.fetch_sub(1);
    co_return Status(Code::kResourceExhausted, std::string(kBusySigningIn));
  }
  struct Place {
    std::atomic<int>& taken;
    ~Place() { taken.fetch_sub(1); }
  };
  const PasswordCost cost = store.password_cost();
  ClubStore::SignInCheck check;
  {
    const Place place{password_checks_};
    check = co_await net::co_spawn(
        http_->cpu_executor(),
        [&]() -> net::awaitable<ClubStore::SignInCheck> {
          co_return ClubStore::check_sign_in(found.password_hash, ask.email, ask.password, cost);
        },
        net::use_awaitable);
  }
  if (!check.right) co_return wrong;
  if (!check.fresh_hash.empty()) {
    // Its failure is not the sign-in's: the next one tries again.
    (void)co_await write_call<Status>(store, ctx, Operation::idempotent_write("login.rehash"), [&] {
      return store.rehash_once(found.user_id, check.fresh_hash, found.password_hash);
    });
  }
  co_return co_await open_session_async(found.user_id, ctx);
}

net::awaitable<Result<std::string>> PanelServer::open_session_async(std::int64_t user_id,
                                                                    lane::Context& ctx) {
  ClubStore& store = *options_.store;
  const std::string token = ClubStore::new_token();
  const std::string now = now_utc();
  const Status opened =
      co_await write_call<Status>(store, ctx, Operation::idempotent_write("login.session"),
                                  [&] { return store.insert_session_once(token, user_id, now); });
  if (!opened.ok()) co_return opened;
  // Its failure is not the sign-in's: the next one tries again.
  (void)co_await write_call<Status>(store, ctx, Operation::idempotent_write("login.session_cap"),
                                    [&] { return store.cap_sessions_once(user_id, now); });
  co_return token;
}

net::awaitable<Result<std::optional<User>>> PanelServer::session_async(const std::string& token,
                                                                       const std::string& now,
                                                                       lane::Context& ctx) {
  if (token.empty()) co_return std::optional<User>();
  ClubStore& store = *options_.store;
  // On the sessions' own schedule (ClubStore::session()).
  co_return co_await read_call<Result<std::optional<User>>>(
      store, ctx, Operation::read("session.read"), [&] { return store.session_once(token, now); },
      store.async_access()->sessions);
}

net::awaitable<void> PanelServer::get_login_link_async(const http::Request& req,
                                                       http::Response& res, lane::Context& ctx) {
  counters_.requests++;
  const std::optional<SignInLink> link = sign_in_link_taken(req, res);
  if (!link) co_return;
  const Result<std::string> session = co_await open_session_async(link->user_id, ctx);
  const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
  answer_sign_in_link(res, *link, session);
}

net::awaitable<void> PanelServer::post_report_async(const http::Request& req, http::Response& res,
                                                    lane::Context& ctx) {
  counters_.requests++;
  const std::optional<ReportAsk> ask = report_asked(req, res);
  if (!ask) co_return;
  ClubStore& store = *options_.store;
  const Status recorded = co_await write_call<Status>(
      store, ctx, Operation::write("problem_reports.create"),
      [&] { return store.record_report_once(ask->path, ask->digest, ask->note, ask->now); });
  answer_report(res, *ask, recorded);
}

net::awaitable<void> PanelServer::get_status_async(const http::Request& req, http::Response& res,
                                                   lane::Context& ctx) {
  counters_.requests++;
  const bool image = req.path == "/status.svg";
  const std::string token = session_token(req);
  const Result<std::optional<User>> who = co_await session_async(token, now_utc(), ctx);
  if (status_allowed_of(res, req.path, image, token, who)) answer_status(res, image);
}

}  // namespace holdfast::panel
