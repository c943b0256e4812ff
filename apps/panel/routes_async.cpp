// The async lane's routes (ADRs 0029, 0030): which requests HttpServer gives it, one
// RetryWindow per request open from its arrival (DESIGN §10), and the writes: payments,
// sign-ups and sign-outs with the same answers as routes_writes.cpp and routes_session.cpp,
// their session read and their transaction driven by holdfast::asio::async_run
// (async_call.hpp). Signing in stays on the workers: checking an Argon2id hash is tens of
// milliseconds of CPU, which would stall every request on the lane thread's event loop.

#include <boost/asio/awaitable.hpp>

#include "async_call.hpp"
#include "route_helpers.hpp"
#include "server.hpp"

namespace holdfast::panel {

namespace net = boost::asio;
using lane::run_call;

bool PanelServer::is_async_route(const http::Request& req) noexcept {
  if (req.method == "GET" || req.method == "HEAD") {
    return req.path == "/dashboard/schedule" || req.path == "/api/schedule";
  }
  return req.method == "POST" &&
         (req.path == "/payments" || req.path == "/signups" || req.path == "/logout");
}

net::awaitable<void> PanelServer::handle_async(const http::Request& req, http::Response& res) {
  if (!refused_by_guards(req, res)) {
    // Open from the request's arrival (DESIGN §10): whatever it met before its calls, the
    // answer comes within the window of whoever sent it. (Request::received is on the
    // store's clock: PanelServer::start() gives it to HttpServer.)
    RetryWindow window(options_.window, options_.store->clock());
    if (req.received != TimePoint{}) window.open(req.received);
    if (req.method != "POST") {
      co_await get_schedule_async(req, res, window);
    } else if (req.path == "/logout") {
      co_await post_logout_async(req, res, window);
    } else {
      co_await post_write_async(req, res, window);
    }
  }
  record_traffic(req, res);
}

net::awaitable<void> PanelServer::post_write_async(const http::Request& req, http::Response& res,
                                                   RetryWindow& window) {
  counters_.requests++;
  ClubStore& store = *options_.store;
  const ClubStore::AsyncAccess& a = *store.async_access();
  const bool payment = req.path == "/payments";
  const std::string token = session_token(req);
  Result<std::optional<User>> who{std::optional<User>()};
  if (!token.empty()) {
    const std::string now = now_utc();
    store.count_call();
    who = co_await run_call<Result<std::optional<User>>>(
        a, *a.shield, *a.sessions, window, Operation::read("session.read"),
        [&] { return store.session_once(token, now); });
  }
  const std::optional<WriteInput> in = write_input_of(req, res, req.path, token, who);
  if (!in) co_return;
  // As the store's own loop runs them: a whole transaction, re-run after a rollback; with a
  // key, idempotent too (the key makes a repeat apply nothing).
  const Idempotency idempotency =
      in->key.empty() ? Idempotency::kNonIdempotent : Idempotency::kIdempotent;
  const std::string now = now_utc();
  store.count_call();
  if (payment) {
    const Operation op{idempotency, true, "payments.create"};
    const Result<PaymentReceipt> paid = co_await run_call<Result<PaymentReceipt>>(
        a, *a.write_shield, *a.writes, window, op,
        [&] { return store.pay_once(in->user_id, in->value, in->method, in->key, now); });
    answer_payment(res, paid);
  } else {
    const Operation op{idempotency, true, "signups.create"};
    const Result<SignupReceipt> added = co_await run_call<Result<SignupReceipt>>(
        a, *a.write_shield, *a.writes, window, op,
        [&] { return store.sign_up_once(in->user_id, in->value, in->key, now); });
    answer_signup(res, added);
  }
}

net::awaitable<void> PanelServer::post_logout_async(const http::Request& req, http::Response& res,
                                                    RetryWindow& window) {
  counters_.requests++;
  ClubStore& store = *options_.store;
  const ClubStore::AsyncAccess& a = *store.async_access();
  const std::string token = session_token(req);
  if (!token.empty()) {
    if (!logout_allowed(req, res, token)) co_return;
    store.count_call();
    const Status ended = co_await run_call<Status>(a, *a.write_shield, *a.writes, window,
                                                   Operation::idempotent_write("session.end"),
                                                   [&] { return store.end_session_once(token); });
    if (!ended.ok()) {
      // The session lives on: say so rather than pretend (the cookie is kept).
      answers_->failure(res, ended, "/logout", false);
      co_return;
    }
  }
  answer_logout(res, token);
}

}  // namespace holdfast::panel
