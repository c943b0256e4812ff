/// @file
/// Status: errors are values.
///
/// A Status is either OK (no allocation: a null pointer) or an error with
///   - a canonical Code (absl-style: kUnavailable means retry the call, kAborted means
///     retry the transaction, kFailedPrecondition means don't retry until fixed),
///   - a message for people,
///   - the native code: a SQLite extended result code or a PostgreSQL SQLSTATE,
///   - the Fault facts the classifier derived from it,
///   - when a retry loop gave up: why (StopReason), how many attempts it made, and for a
///     rejection by a circuit breaker, how long until it is worth trying again,
///   - for an error inside a transaction: whether the transaction was rolled back.
///
/// Thread safety: a Status is a value; distinct objects may be used from distinct threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "holdfast/clock.hpp"
#include "holdfast/fault.hpp"

namespace holdfast {

enum class Code : std::uint8_t {
  kOk = 0,
  kCancelled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
};

/// Which database produced the native code.
enum class Backend : std::uint8_t { kNone, kSqlite, kPostgres, kD1 };

/// Why a retry loop stopped. kNone: no loop gave up on this status (yet).
enum class StopReason : std::uint8_t {
  kNone,
  kPermanent,          ///< the fault cannot be helped by retrying
  kNotSafeToRepeat,    ///< the attempt may have been applied, or only a whole-transaction
                       ///< re-run could help and the caller did not declare one safe
  kAttemptsExhausted,  ///< the policy's maximum number of attempts was made
  kWindowSpent,        ///< the request's retry window has no time left
  kThrottled,          ///< the retry throttle refused (too many retries process-wide)
  kBreakerOpen,        ///< the circuit breaker refused the attempt
  kCancelled,          ///< the caller cancelled
  kAtCapacity,         ///< the database is at the concurrency the Shield learned it answers
  kProbeFailed,        ///< the server refused again the connect that probed it after refused
                       ///< connects (a pool's probe): trying before retry_after() would be
                       // refused too. A refusal by the server, not our shedding: breakers
                       // count it.
};

/// What an error inside a transaction left behind.
enum class TxnState : std::uint8_t {
  kNotInTransaction,  ///< autocommit, or not applicable
  kStillOpen,         ///< the transaction is still open (e.g. COMMIT returned SQLITE_BUSY)
  kRolledBack,        ///< the database rolled the transaction back: nothing was applied
  kCommitted,         ///< resolved after the fact: the transaction did commit
  kUnknown,           ///< nobody can tell (connection lost during COMMIT, not resolved)
};

[[nodiscard]] std::string_view to_string(Code code) noexcept;
[[nodiscard]] std::string_view to_string(Backend backend) noexcept;
[[nodiscard]] std::string_view to_string(StopReason reason) noexcept;
[[nodiscard]] std::string_view to_string(TxnState state) noexcept;

class [[nodiscard]] Status {
 public:
  /// OK.
  Status() noexcept = default;
  /// An error. `code` must not be kOk (an error built with kOk becomes kUnknown).
  Status(Code code, std::string message, Fault fault = {});

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  [[nodiscard]] bool ok() const noexcept { return rep_ == nullptr; }
  [[nodiscard]] Code code() const noexcept { return rep_ ? rep_->code : Code::kOk; }
  [[nodiscard]] std::string_view message() const noexcept;
  [[nodiscard]] const Fault& fault() const noexcept;
  [[nodiscard]] Backend backend() const noexcept { return rep_ ? rep_->backend : Backend::kNone; }
  /// SQLite extended result code (0 when none).
  [[nodiscard]] int sqlite_code() const noexcept { return rep_ ? rep_->sqlite_code : 0; }
  /// PostgreSQL SQLSTATE ("" when none, e.g. a lost connection).
  [[nodiscard]] std::string_view sqlstate() const noexcept;
  [[nodiscard]] StopReason stop_reason() const noexcept {
    return rep_ ? rep_->stop : StopReason::kNone;
  }
  /// Attempts made by the retry loop that gave up (0 when no loop gave up).
  [[nodiscard]] int attempts() const noexcept { return rep_ ? rep_->attempts : 0; }
  /// For kBreakerOpen/kThrottled/kAtCapacity/kProbeFailed: how long until trying again is
  /// worth it (HTTP Retry-After). On a failure no loop gave up on (kNone): how long until
  /// another attempt can be served (a pool's failed connect: its backoff), which retry
  /// loops respect.
  [[nodiscard]] Duration retry_after() const noexcept {
    return rep_ ? rep_->retry_after : Duration::zero();
  }
  [[nodiscard]] TxnState txn_state() const noexcept {
    return rep_ ? rep_->txn : TxnState::kNotInTransaction;
  }

  /// Builders; each is a no-op on an OK status.
  Status& with_sqlite(int extended_code) noexcept;
  Status& with_sqlstate(std::string_view sqlstate) noexcept;
  Status& with_backend(Backend backend) noexcept;
  Status& with_stop(StopReason reason, int attempts, Duration retry_after = {}) noexcept;
  Status& with_txn_state(TxnState state) noexcept;
  Status& with_fault(Fault fault) noexcept;
  /// Prefixes the message with `context` and ": ".
  Status& annotate(std::string_view context);

  /// "UNAVAILABLE: database is locked [sqlite 5; statement/not_applied/fast/overload]
  ///  (gave up: window spent after 4 attempts)". "OK" for OK.
  [[nodiscard]] std::string to_string() const;

 private:
  struct Rep {
    Code code = Code::kUnknown;
    Backend backend = Backend::kNone;
    StopReason stop = StopReason::kNone;
    TxnState txn = TxnState::kNotInTransaction;
    Fault fault;
    int sqlite_code = 0;
    int attempts = 0;
    char sqlstate[6] = {};
    Duration retry_after{};
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

inline const Status& ok_status() noexcept {
  static const Status kOk;
  return kOk;
}

}  // namespace holdfast
