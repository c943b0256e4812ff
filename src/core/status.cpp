#include "holdfast/core/status.hpp"

#include <algorithm>
#include <cstring>

#include "holdfast/core/priority.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/detail/table_name.hpp"

namespace holdfast {

std::string_view to_string(RetryScope scope) noexcept {
  switch (scope) {
    case RetryScope::kNone:
      return "none";
    case RetryScope::kStatement:
      return "statement";
    case RetryScope::kTransaction:
      return "transaction";
    case RetryScope::kReconnect:
      return "reconnect";
  }
  return "?";
}

std::string_view to_string(Outcome outcome) noexcept {
  return outcome == Outcome::kNotApplied ? "not_applied" : "unknown";
}

std::string_view to_string(Pace pace) noexcept {
  return pace == Pace::kFast ? "fast" : "slow";
}

std::string_view to_string(Priority p) noexcept {
  switch (p) {
    case Priority::kCritical:
      return "critical";
    case Priority::kBackground:
      return "background";
    case Priority::kNormal:
      break;
  }
  return "normal";
}

bool parse_priority(std::string_view text, Priority& out) noexcept {
  for (Priority p : {Priority::kCritical, Priority::kNormal, Priority::kBackground}) {
    if (text == to_string(p)) {
      out = p;
      return true;
    }
  }
  return false;
}

std::string_view to_string(Code code) noexcept {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kCancelled:
      return "CANCELLED";
    case Code::kUnknown:
      return "UNKNOWN";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kPermissionDenied:
      return "PERMISSION_DENIED";
    case Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kAborted:
      return "ABORTED";
    case Code::kOutOfRange:
      return "OUT_OF_RANGE";
    case Code::kUnimplemented:
      return "UNIMPLEMENTED";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kDataLoss:
      return "DATA_LOSS";
  }
  return "?";
}

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kNone:
      return "none";
    case Backend::kSqlite:
      return "sqlite";
    case Backend::kPostgres:
      return "postgres";
    case Backend::kD1:
      return "d1";
  }
  return "?";
}

std::string_view to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::kNone:
      return "none";
    case StopReason::kPermanent:
      return "permanent fault";
    case StopReason::kNotSafeToRepeat:
      return "not safe to repeat";
    case StopReason::kAttemptsExhausted:
      return "attempts exhausted";
    case StopReason::kWindowSpent:
      return "window spent";
    case StopReason::kThrottled:
      return "throttled";
    case StopReason::kBreakerOpen:
      return "breaker open";
    case StopReason::kCancelled:
      return "cancelled";
    case StopReason::kAtCapacity:
      return "at capacity";
    case StopReason::kProbeFailed:
      return "probe failed";
  }
  return "?";
}

std::string_view to_string(TxnState state) noexcept {
  switch (state) {
    case TxnState::kNotInTransaction:
      return "not in transaction";
    case TxnState::kStillOpen:
      return "transaction still open";
    case TxnState::kRolledBack:
      return "transaction rolled back";
    case TxnState::kCommitted:
      return "transaction committed";
    case TxnState::kUnknown:
      return "transaction outcome unknown";
  }
  return "?";
}

Status::Status(Code code, std::string message, Fault fault) : rep_(std::make_unique<Rep>()) {
  rep_->code = code == Code::kOk ? Code::kUnknown : code;
  rep_->message = std::move(message);
  rep_->fault = fault;
}

Status::Status(const Status& other)
    : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
  return *this;
}

std::string_view Status::message() const noexcept {
  return rep_ ? std::string_view(rep_->message) : std::string_view();
}

const Fault& Status::fault() const noexcept {
  static constexpr Fault kNoFault{};
  return rep_ ? rep_->fault : kNoFault;
}

std::string_view Status::sqlstate() const noexcept {
  return rep_ ? std::string_view(rep_->sqlstate) : std::string_view();
}

Status& Status::with_sqlite(int extended_code) noexcept {
  if (rep_) {
    rep_->backend = Backend::kSqlite;
    rep_->sqlite_code = extended_code;
  }
  return *this;
}

Status& Status::with_sqlstate(std::string_view sqlstate) noexcept {
  if (rep_) {
    rep_->backend = Backend::kPostgres;
    const std::size_t n = std::min(sqlstate.size(), sizeof(rep_->sqlstate) - 1);
    std::memcpy(rep_->sqlstate, sqlstate.data(), n);
    rep_->sqlstate[n] = '\0';
  }
  return *this;
}

Status& Status::with_backend(Backend backend) noexcept {
  if (rep_) rep_->backend = backend;
  return *this;
}

Status& Status::with_stop(StopReason reason, int attempts, Duration retry_after) noexcept {
  if (rep_) {
    rep_->stop = reason;
    rep_->attempts = attempts;
    rep_->retry_after = retry_after;
  }
  return *this;
}

Status& Status::with_txn_state(TxnState state) noexcept {
  if (rep_) rep_->txn = state;
  return *this;
}

Status& Status::with_fault(Fault fault) noexcept {
  if (rep_) rep_->fault = fault;
  return *this;
}

Status& Status::annotate(std::string_view context) {
  if (rep_ && !context.empty()) {
    std::string m;
    m.reserve(context.size() + 2 + rep_->message.size());
    m.append(context).append(": ").append(rep_->message);
    rep_->message = std::move(m);
  }
  return *this;
}

std::string Status::to_string() const {
  if (!rep_) return "OK";
  std::string out(holdfast::to_string(rep_->code));
  out += ": ";
  out += rep_->message;
  const Fault& f = rep_->fault;
  out += " [";
  if (rep_->backend == Backend::kSqlite) {
    out += "sqlite " + std::to_string(rep_->sqlite_code) + "; ";
  } else if (rep_->backend == Backend::kPostgres) {
    out += "sqlstate ";
    out += rep_->sqlstate[0] ? rep_->sqlstate : "none";
    out += "; ";
  } else if (rep_->backend == Backend::kD1) {
    out += "d1; ";
  }
  out += holdfast::to_string(f.scope);
  out += '/';
  out += holdfast::to_string(f.outcome);
  out += '/';
  out += holdfast::to_string(f.pace);
  if (f.overload) out += "/overload";
  out += ']';
  if (rep_->txn != TxnState::kNotInTransaction) {
    out += " (";
    out += holdfast::to_string(rep_->txn);
    out += ')';
  }
  if (rep_->stop != StopReason::kNone) {
    out += " (gave up: ";
    out += holdfast::to_string(rep_->stop);
    out += " after " + std::to_string(rep_->attempts) +
           (rep_->attempts == 1 ? " attempt" : " attempts");
    if (rep_->retry_after > Duration::zero()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(rep_->retry_after);
      out += "; retry after " + std::to_string(ms.count()) + " ms";
    }
    out += ')';
  }
  return out;
}

Error::Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}

namespace detail {
Status status_from_ok_without_value() {
  return Status(Code::kInternal, "Result built from an OK Status without a value");
}

bool is_table_name(std::string_view name) noexcept {
  bool part_start = true;
  for (const char c : name) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (c == '.' && !part_start) {
      part_start = true;
    } else if (letter || (digit && !part_start)) {
      part_start = false;
    } else {
      return false;
    }
  }
  return !part_start;
}
}  // namespace detail

}  // namespace holdfast
