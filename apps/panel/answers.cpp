#include "answers.hpp"

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "html.hpp"
#include "idempotency.hpp"
#include "server.hpp"

namespace holdfast::panel {

using nlohmann::json;

bool is_busy(const Status& s) {
  switch (s.stop_reason()) {
    case StopReason::kWindowSpent:
    case StopReason::kBreakerOpen:
    case StopReason::kProbeFailed:
    case StopReason::kThrottled:
    case StopReason::kAttemptsExhausted:
      return true;
    default:
      break;
  }
  return s.fault().transient() || s.code() == Code::kUnavailable ||
         s.code() == Code::kDeadlineExceeded || s.code() == Code::kResourceExhausted;
}

bool is_storage_full(const Status& s) {
  constexpr int kSqliteFull = 13;  // SQLITE_FULL; extended codes keep it in the low byte
  return (s.sqlite_code() & 0xff) == kSqliteFull || s.sqlstate() == "53100";
}

int retry_after_seconds(const Status& s) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(s.retry_after()).count();
  if (ms <= 0) return 2;
  return static_cast<int>((ms + 999) / 1000);
}

bool from_engine(const Status& s) {
  return s.backend() != Backend::kNone || s.sqlite_code() != 0 || !s.sqlstate().empty();
}

namespace {

// What a failed write's answer says was applied: "no" when the database rolled it back or
// the error proves nothing was applied (a refusal aborts the transaction), else how to find
// out safely.
std::string_view applied(const Status& s) {
  const bool nothing_applied =
      s.txn_state() == TxnState::kRolledBack || s.fault().outcome == Outcome::kNotApplied;
  return nothing_applied ? "no" : "unknown: repeat with the same Idempotency-Key";
}

}  // namespace

Refusal database_refusal(const Status& s) {
  if (s.ok()) return Refusal::kNone;
  const std::string_view state = s.sqlstate();
  if (state == "25006") return Refusal::kReadOnly;
  if (state == "42501") return Refusal::kNotPermitted;
  return Refusal::kNone;
}

std::string Answers::new_digest() {
  const auto now =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format(
      "{:010x}", ((now * 0x9e3779b97f4a7c15ULL) ^ digest_counter_.fetch_add(1)) & 0xffffffffffULL);
}

void Answers::client_error(http::Response& res, int status, std::string_view message,
                           bool as_json) const {
  counters_.bad_request++;
  res.status = status;
  if (as_json) {
    res.set_content(json{{"error", std::string(message)}}.dump(), "application/json");
  } else {
    res.set_content(render_bad_request(message), "text/html; charset=utf-8");
  }
}

void Answers::failure(http::Response& res, const Status& s, std::string_view path, bool as_json) {
  answer(res, s, path, as_json, false);
}

void Answers::write_failure(http::Response& res, const Status& s, std::string_view path) {
  answer(res, s, path, true, true);
}

void Answers::refused(http::Response& res, const Status& s, Refusal why, std::string_view path,
                      bool as_json, bool write) {
  const std::string digest = new_digest();
  const std::string detail = s.to_string();
  const bool read_only = why == Refusal::kReadOnly;
  log_.error("panel",
             read_only ? "the database refused: read-only" : "the database refused: not permitted",
             {{"digest", digest},
              {"path", path},
              {"sqlstate", s.sqlstate()},
              {"status", std::string_view(detail)}});
  const std::string_view request = write ? "write" : "request";
  std::string what;
  json j;
  if (read_only) {
    counters_.busy_503++;
    res.status = 503;
    res.set_header("Retry-After", std::to_string(kReadOnlyRetryAfterSeconds));
    what = fmt::format("the database refused the {}: it is read-only", request);
    j = {{"error", what},
         {"refused", "read_only"},
         {"retry_after_s", kReadOnlyRetryAfterSeconds},
         {"digest", digest}};
  } else {
    counters_.error_500++;
    res.status = 500;
    what = fmt::format("the database refused the {}: not permitted", request);
    j = {{"error", what}, {"refused", "not_permitted"}, {"digest", digest}};
  }
  if (write) j["applied"] = applied(s);
  if (as_json) {
    res.set_content(j.dump(), "application/json");
    return;
  }
  std::string next;
  if (read_only) {
    next = fmt::format(
        "It is refusing changes at the moment (during a failover, for example); nothing was "
        "changed. Please try again in {} s.",
        kReadOnlyRetryAfterSeconds);
  } else {
    next =
        "The panel's database account lacks a permission: this is our configuration, not "
        "something you did. Nothing was changed.";
  }
  res.set_content(
      page("The database refused this request",
           fmt::format("<main><h1>The database refused this {}: {}</h1><p>{}</p><p>If it "
                       "keeps happening, quote <code id=\"digest\">{}</code>.</p></main>",
                       request, read_only ? "it is read-only" : "not permitted", next,
                       escape_html(digest))),
      "text/html; charset=utf-8");
}

void Answers::answer(http::Response& res, const Status& s, std::string_view path, bool as_json,
                     bool write) {
  if (const Refusal why = database_refusal(s); why != Refusal::kNone) {
    return refused(res, s, why, path, as_json, write);
  }
  const std::string digest = new_digest();
  const std::string detail = s.to_string();
  log_.error("panel", "request failed",
             {{"digest", digest}, {"path", path}, {"status", std::string_view(detail)}});
  if (is_storage_full(s)) {
    counters_.error_500++;
    res.status = 507;
    const std::string what = "the server's storage is full; nothing was saved";
    if (as_json) {
      res.set_content(json{{"error", what}, {"digest", digest}}.dump(), "application/json");
    } else {
      res.set_content(render_bad_request(what + " (digest " + digest + ")"),
                      "text/html; charset=utf-8");
    }
    return;
  }
  if (holdfast_ && is_busy(s)) {
    counters_.busy_503++;
    const int after = retry_after_seconds(s);
    res.status = 503;
    res.set_header("Retry-After", std::to_string(after));
    if (as_json) {
      json j{{"error", "the database is busy"}, {"retry_after_s", after}, {"digest", digest}};
      if (write) j["applied"] = applied(s);
      res.set_content(j.dump(), "application/json");
    } else {
      res.set_content(render_busy(after, digest), "text/html; charset=utf-8");
    }
    return;
  }
  counters_.error_500++;
  res.status = 500;
  if (as_json) {
    res.set_content(json{{"error", "internal error"}, {"digest", digest}}.dump(),
                    "application/json");
  } else {
    res.set_content(
        fmt::format("<!doctype html><title>Error</title><h1>Application error: a server-side "
                    "exception has occurred</h1><p>Digest: {}</p>",
                    digest),
        "text/html; charset=utf-8");
  }
}

void Answers::write_refusal(http::Response& res, const Status& s, std::string_view path) {
  if (is_key_reused(s)) return client_error(res, 422, kKeyReusedMessage, true);
  if (s.code() == Code::kAlreadyExists) {
    // The store checks first; a UNIQUE violation from the engine is the same refusal, with
    // its detail kept in the log.
    if (from_engine(s)) {
      log_.warn("panel", "write refused by a constraint",
                {{"path", path}, {"status", std::string_view(s.to_string())}});
    }
    return client_error(res, 409, "already signed up for this game", true);
  }
  if (!from_engine(s) && s.code() == Code::kNotFound) {
    return client_error(res, 404, "no such game", true);
  }
  if (!from_engine(s) && s.code() == Code::kFailedPrecondition) {
    return client_error(res, 409, "the game is full", true);
  }
  if (!from_engine(s) && s.code() == Code::kOutOfRange) {
    return client_error(res, 409, kGameStartedMessage, true);
  }
  write_failure(res, s, path);
}

}  // namespace holdfast::panel
