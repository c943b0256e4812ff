// The club's writes: POST /payments (amount_cents, method) and POST /signups (game_id), for
// a signed-in user. Each is all or nothing; an Idempotency-Key makes a repeat answer the
// first result (200 with "replayed": true) instead of writing again (201).

#include <nlohmann/json.hpp>

#include "idempotency.hpp"
#include "route_helpers.hpp"
#include "server.hpp"

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

std::optional<PanelServer::WriteInput> PanelServer::write_input(const http::Request& req,
                                                                http::Response& res,
                                                                std::string_view path) {
  const std::string token = session_token(req);
  Result<std::optional<User>> who = token.empty()
                                        ? Result<std::optional<User>>(std::optional<User>())
                                        : options_.store->session(token, now_utc());
  return write_input_of(req, res, path, token, who);
}

std::optional<PanelServer::WriteInput> PanelServer::write_input_of(
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

void PanelServer::post_payment(const http::Request& req, http::Response& res) {
  counters_.requests++;
  const RequestWindow scope = request_window(req);
  const std::optional<WriteInput> in = write_input(req, res, "/payments");
  if (!in) return;
  answer_payment(res, options_.store->pay(in->user_id, in->value, in->method, in->key, now_utc()));
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

void PanelServer::post_signup(const http::Request& req, http::Response& res) {
  counters_.requests++;
  const RequestWindow scope = request_window(req);
  const std::optional<WriteInput> in = write_input(req, res, "/signups");
  if (!in) return;
  answer_signup(res, options_.store->sign_up(in->user_id, in->value, in->key, now_utc()));
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
