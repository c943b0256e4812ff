// The club's writes: POST /payments (amount_cents, method) and POST /signups (game_id), for
// a signed-in user. Each is all or nothing; an Idempotency-Key makes a repeat answer the
// first result (200 with "replayed": true) instead of writing again (201).

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "idempotency.hpp"
#include "route_helpers.hpp"
#include "server.hpp"
#include "store_calls.hpp"

namespace holdfast::panel {
namespace {

using nlohmann::json;

bool positive_integer(const std::string& text, std::int64_t& out) {
  if (text.empty() || text.size() > 12) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  out = std::stoll(text);
  return out > 0;
}

}  // namespace

boost::asio::awaitable<void> PanelServer::post_write(const http::Request& req, http::Response& res,
                                                     lane::Context& ctx) {
  counters_.requests++;
  const bool payment = req.path == "/payments";
  const std::string token = session_token(req);
  const std::string now = now_utc();
  // A payment is critical (ADR 0035): under overload it keeps its places, the session read
  // that authorizes it included. Sign-ups are as normal as pages.
  const Priority priority = payment ? Priority::kCritical : Priority::kNormal;
  const Result<std::optional<User>> who = co_await session_of(token, now, ctx, priority);
  const std::optional<WriteInput> in = write_input(req, res, req.path, token, who);
  if (!in) co_return;
  if (payment) {
    const Result<PaymentReceipt> paid =
        co_await ctx.calls.pay(ctx, in->user_id, in->value, in->method, in->key, now);
    const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
    answer_payment(res, paid);
  } else {
    const Result<SignupReceipt> added =
        co_await ctx.calls.sign_up(ctx, in->user_id, in->value, in->key, now);
    const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
    answer_signup(res, added);
  }
}

std::optional<PanelServer::WriteInput> PanelServer::write_input(
    const http::Request& req, http::Response& res, std::string_view path, const std::string& token,
    const Result<std::optional<User>>& who) {
  if (!who.ok()) {
    answers_->write_failure(res, who.status(), path);
    return std::nullopt;
  }
  if (!who->has_value()) {
    counters_.bad_request++;
    res.status = 401;
    res.set_content(json{{"error", "sign in first (POST /login)"}}.dump(), "application/json");
    return std::nullopt;
  }
  if (!csrf_ok(req, token)) {
    answers_->client_error(res, 403,
                           "missing or wrong CSRF token: send the csrf_token form field or the "
                           "X-CSRF-Token header the panel gave at sign-in",
                           true);
    return std::nullopt;
  }
  WriteInput in;
  in.user_id = (*who)->id;
  in.key = req.get_header_value("Idempotency-Key");
  const bool payment = path == "/payments";
  if (!positive_integer(request_field(req, payment ? "amount_cents" : "game_id"), in.value)) {
    answers_->client_error(res, 400,
                           payment ? "amount_cents must be a positive whole number of cents"
                                   : "game_id must be a positive whole number",
                           true);
    return std::nullopt;
  }
  Status checked;
  if (payment) {
    in.method = request_field(req, "method");
    if (in.method.empty()) in.method = "card";
    checked = ClubStore::check_payment(in.value, in.method, in.key);
  } else {
    checked = ClubStore::check_sign_up(in.value, in.key);
  }
  if (!checked.ok()) {
    answers_->client_error(res, 400, checked.message(), true);
    return std::nullopt;
  }
  return in;
}

void PanelServer::answer_payment(http::Response& res, const Result<PaymentReceipt>& paid) {
  if (!paid.ok() && is_key_reused(paid.status())) {
    return answers_->client_error(res, 422, kKeyReusedMessage, true);
  }
  if (!paid.ok()) return answers_->write_failure(res, paid.status(), "/payments");
  if (!paid->replayed) {
    options_.logger->info("payments", "payment recorded",
                          {{"payment_id", paid->payment_id}, {"amount_cents", paid->amount_cents}});
  }
  counters_.ok++;
  res.status = paid->replayed ? 200 : 201;
  set_write_position_cookie(res);
  res.set_content(json{{"payment_id", paid->payment_id},
                       {"amount_cents", paid->amount_cents},
                       {"replayed", paid->replayed}}
                      .dump(),
                  "application/json");
}

void PanelServer::answer_signup(http::Response& res, const Result<SignupReceipt>& added) {
  if (!added.ok()) return answers_->write_refusal(res, added.status(), "/signups");
  counters_.ok++;
  res.status = added->replayed ? 200 : 201;
  set_write_position_cookie(res);
  res.set_content(json{{"signup_id", added->signup_id},
                       {"game_id", added->game_id},
                       {"replayed", added->replayed}}
                      .dump(),
                  "application/json");
}

}  // namespace holdfast::panel
