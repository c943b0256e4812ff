/// @file
/// Status: errors are values.
///
/// A Status is OK (a null pointer: no allocation) or an error: a canonical Code, a message,
/// the native code (SQLite's or PostgreSQL's), its Fault, why a retry loop gave up and what
/// became of the transaction. A value: distinct objects may be used from distinct threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "holdfast/core/duration.hpp"
#include "holdfast/core/fault.hpp"

/// holdfast: keeps a service answering while its database is locked, overloaded or restarting.
namespace holdfast {

/// The canonical error codes (absl's and gRPC's): what kind of failure a Status reports.
enum class Code : std::uint8_t {
  kOk = 0,              ///< not an error
  kCancelled,           ///< the caller cancelled the operation
  kUnknown,             ///< an error with no better code
  kInvalidArgument,     ///< the request itself is wrong (bad SQL, bad value, bad setting)
  kDeadlineExceeded,    ///< the deadline passed before the operation finished
  kNotFound,            ///< something asked for does not exist
  kAlreadyExists,       ///< something to be created exists already
  kPermissionDenied,    ///< not allowed (including a read-only database)
  kResourceExhausted,   ///< out of some resource (memory, disk, connections)
  kFailedPrecondition,  ///< not in a state the operation needs: do not retry until fixed
  kAborted,             ///< the operation was aborted (a conflict): retry the whole transaction
  kOutOfRange,          ///< past a valid range (a row or column that does not exist)
  kUnimplemented,       ///< not supported
  kInternal,            ///< a broken invariant: a bug
  kUnavailable,         ///< the database cannot serve the call now: retrying the call may succeed
  kDataLoss,            ///< unrecoverable data loss or corruption
};

/// Which database produced the native code.
enum class Backend : std::uint8_t {
  kNone,      ///< no native code
  kSqlite,    ///< a SQLite extended result code
  kPostgres,  ///< a PostgreSQL SQLSTATE
  kD1         ///< a Cloudflare D1 error message
};

/// Why a retry loop stopped. kNone: no loop gave up on this status (yet).
enum class StopReason : std::uint8_t {
  kNone,               ///< not given up on (yet)
  kPermanent,          ///< the fault cannot be helped by retrying
  kNotSafeToRepeat,    ///< the attempt may have been applied, or only a whole-transaction
                       ///< re-run could help and the caller did not declare one safe
  kAttemptsExhausted,  ///< the policy's maximum number of attempts was made
  kWindowSpent,        ///< the request's retry window has no time left
  kThrottled,          ///< the retry throttle refused (too many retries process-wide)
  kBreakerOpen,        ///< the circuit breaker refused the attempt
  kCancelled,          ///< the caller cancelled
  kAtCapacity,         ///< the database is at the concurrency the Shield learned it answers
  kProbeFailed,        ///< a pool's probe connect after refused connects was refused again:
                       ///< the server refuses (breakers count it) until retry_after()
};

/// What an error inside a transaction left behind.
enum class TxnState : std::uint8_t {
  kNotInTransaction,  ///< autocommit, or not applicable
  kStillOpen,         ///< the transaction is still open (e.g. COMMIT returned SQLITE_BUSY)
  kRolledBack,        ///< the database rolled the transaction back: nothing was applied
  kCommitted,         ///< resolved after the fact: the transaction did commit
  kUnknown,           ///< nobody can tell (connection lost during COMMIT, not resolved)
};

/// "OK", "UNAVAILABLE", ...: the code's name as to_string() of a Status prints it.
[[nodiscard]] std::string_view to_string(Code code) noexcept;
/// "none", "sqlite", "postgres", "d1".
[[nodiscard]] std::string_view to_string(Backend backend) noexcept;
/// A few words for the reason ("permanent fault", "not safe to repeat", ...).
[[nodiscard]] std::string_view to_string(StopReason reason) noexcept;
/// A few words for the state ("not in transaction", "transaction rolled back", ...).
[[nodiscard]] std::string_view to_string(TxnState state) noexcept;

/// OK or an error (see the top of this file). Copying an error copies its details; moving is
/// cheap.
class [[nodiscard]] Status {
 public:
  /// OK.
  Status() noexcept = default;
  /// An error. `code` must not be kOk (an error built with kOk becomes kUnknown).
  Status(Code code, std::string message, Fault fault = {});

  /// A copy (allocates for an error).
  Status(const Status& other);
  /// Copies `other` (allocates for an error).
  Status& operator=(const Status& other);
  /// Moves; `other` is left OK.
  Status(Status&&) noexcept = default;
  /// Moves; `other` is left OK.
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  /// True for OK.
  [[nodiscard]] bool ok() const noexcept { return rep_ == nullptr; }
  /// The canonical code; kOk for OK.
  [[nodiscard]] Code code() const noexcept { return rep_ ? rep_->code : Code::kOk; }
  /// The message for people; empty for OK.
  [[nodiscard]] std::string_view message() const noexcept;
  /// What the classifier derived from the native code; a default Fault (scope kNone) for OK.
  [[nodiscard]] const Fault& fault() const noexcept;
  /// Which database produced the native code; kNone when none.
  [[nodiscard]] Backend backend() const noexcept { return rep_ ? rep_->backend : Backend::kNone; }
  /// SQLite extended result code (0 when none).
  [[nodiscard]] int sqlite_code() const noexcept { return rep_ ? rep_->sqlite_code : 0; }
  /// PostgreSQL SQLSTATE ("" when none, e.g. a lost connection).
  [[nodiscard]] std::string_view sqlstate() const noexcept;
  /// Why a retry loop gave up on this status; kNone when none did.
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
  /// What the error left of the transaction it happened in.
  [[nodiscard]] TxnState txn_state() const noexcept {
    return rep_ ? rep_->txn : TxnState::kNotInTransaction;
  }

  /// Builders; each is a no-op on an OK status.
  Status& with_sqlite(int extended_code) noexcept;
  /// Sets the SQLSTATE (and the backend: kPostgres).
  Status& with_sqlstate(std::string_view sqlstate) noexcept;
  /// Sets which database produced the native code.
  Status& with_backend(Backend backend) noexcept;
  /// Marks the status as given up on: why, after how many attempts, and how long until
  /// trying again is worth it.
  Status& with_stop(StopReason reason, int attempts, Duration retry_after = {}) noexcept;
  /// Sets what the error left of its transaction.
  Status& with_txn_state(TxnState state) noexcept;
  /// Sets the Fault.
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

/// A shared OK Status, for functions that return a reference.
inline const Status& ok_status() noexcept {
  static const Status kOk;
  return kOk;
}

}  // namespace holdfast
