/// @file
/// holdfast over libpqxx: classified errors and retried transactions for code that already
/// uses pqxx::connection and pqxx::work. Header-only; include it only where libpqxx is
/// linked (pkg-config libpqxx). Tested with libpqxx 6.4 (Debian's libpqxx-dev).
///
/// @code
///   pqxx::connection conn(url);
///   holdfast::RequestScope request;                   // one 6 s window per request
///   holdfast::Result<long> n = holdfast::libpqxx::run(
///       shield, holdfast::Operation::transaction(/*rerunnable=*/true, "orders.pay"), conn,
///       [&](pqxx::work& w) { return w.exec1("UPDATE ... RETURNING id")[0].as<long>(); });
/// @endcode
///
/// Errors become Status values (to_status):
///   - pqxx::sql_error: its sqlstate() through postgres_status() (docs/faults.md);
///   - libpqxx 6's transaction_rollback family, which carries no SQLSTATE: by its type
///     (serialization_failure 40001, deadlock_detected 40P01, statement_completion_unknown
///     40003, transaction_rollback 40000);
///   - pqxx::broken_connection: the connection was lost and no SQLSTATE arrived (scope
///     reconnect, outcome unknown); too_many_connections: 53300 (refused, nothing applied);
///   - pqxx::in_doubt_error (the connection was lost during COMMIT): 08007
///     transaction_resolution_unknown, outcome unknown, TxnState::kUnknown;
///   - any other pqxx::failure: kUnknown, permanent; libpqxx's logic errors (usage,
///     conversion, argument, range, internal): permanent, never retried.
///
/// retry() and run() run `fn(Txn&)` in a fresh transaction (pqxx::work unless Txn is given)
/// on the caller's connection for each attempt, and commit it when fn returns. fn returns a
/// value, void, Status or `Result<U>`; a Status or Result that is not OK aborts the transaction
/// and is retried by its own Fault. The whole transaction is re-run only as the Operation
/// allows: a serialization failure or deadlock (scope kTransaction) only for
/// Operation::transaction(true); an outcome in doubt only for an idempotent operation.
///
/// The connection is the caller's, and these functions never reconnect it. When it is lost
/// (scope kReconnect: broken_connection, in_doubt_error, admin_shutdown, ...) the loop stops
/// at once -- StopReason kNotSafeToRepeat when the outcome is unknown and the operation is not
/// idempotent, else kPermanent -- and returns the Status with that Fault, so the caller knows
/// to reconnect (a new pqxx::connection; libpqxx 6 also reopens a broken connection by itself
/// at its next use unless inhibit_reactivation(true) was called) and may call again. Session
/// state (SET, prepared statements, temporary tables) does not survive a reconnect.
///
/// Exceptions other than libpqxx's propagate unchanged, after the transaction is aborted; the
/// attempt counts as neutral. Failed attempts leave TxnState kRolledBack while the connection
/// is open, kUnknown when it is lost.
///
/// Thread safety: as libpqxx's: one connection, one thread at a time.
#pragma once

#include <cstddef>
#include <exception>
#include <pqxx/pqxx>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/as_result.hpp"

/// holdfast over libpqxx: classified errors and retried transactions (see libpqxx.hpp).
namespace holdfast::libpqxx {

namespace detail {
// libpqxx 6 ends its messages with a newline.
inline std::string_view trimmed(const char* what) noexcept {
  std::string_view s(what);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.remove_suffix(1);
  return s;
}

inline Status permanent(Code code, const std::exception& e) {
  return Status(code, std::string(trimmed(e.what()))).with_backend(Backend::kPostgres);
}
}  // namespace detail

/// The Status for an exception thrown by libpqxx (see above); OK when `e` is not libpqxx's.
[[nodiscard]] inline Status to_status(const std::exception& e) {
  const std::string_view msg = detail::trimmed(e.what());
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e) != nullptr) {
    Status s = postgres_status("08007", msg);
    s.with_txn_state(TxnState::kUnknown);
    return s;
  }
  if (dynamic_cast<const pqxx::too_many_connections*>(&e) != nullptr) {
    return postgres_status("53300", msg);
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) return postgres_status("", msg);
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
      sql != nullptr && !sql->sqlstate().empty()) {
    return postgres_status(sql->sqlstate(), msg);
  }
  // libpqxx 6 throws these without a SQLSTATE (libpqxx 7 derives them from sql_error).
  if (dynamic_cast<const pqxx::serialization_failure*>(&e) != nullptr) {
    return postgres_status("40001", msg);
  }
  if (dynamic_cast<const pqxx::deadlock_detected*>(&e) != nullptr) {
    return postgres_status("40P01", msg);
  }
  if (dynamic_cast<const pqxx::statement_completion_unknown*>(&e) != nullptr) {
    return postgres_status("40003", msg);
  }
  if (dynamic_cast<const pqxx::transaction_rollback*>(&e) != nullptr) {
    return postgres_status("40000", msg);
  }
  if (dynamic_cast<const pqxx::failure*>(&e) != nullptr) {
    return detail::permanent(Code::kUnknown, e);
  }
  if (dynamic_cast<const pqxx::conversion_error*>(&e) != nullptr ||
      dynamic_cast<const pqxx::argument_error*>(&e) != nullptr) {
    return detail::permanent(Code::kInvalidArgument, e);
  }
  if (dynamic_cast<const pqxx::range_error*>(&e) != nullptr) {
    return detail::permanent(Code::kOutOfRange, e);
  }
  if (dynamic_cast<const pqxx::usage_error*>(&e) != nullptr) {
    return detail::permanent(Code::kFailedPrecondition, e);
  }
  if (dynamic_cast<const pqxx::internal_error*>(&e) != nullptr) {
    return detail::permanent(Code::kInternal, e);
  }
  return {};
}

namespace detail {

using holdfast::detail::AsResult;

// One attempt: a fresh transaction, fn, commit.
template <class Txn, class Connection, class F>
class TxnAttempt {
 public:
  using R = std::invoke_result_t<F&, Txn&>;
  using Out = typename AsResult<R>::type;

  TxnAttempt(Connection& conn, F& fn, Operation op) noexcept : conn_(conn), fn_(fn), op_(op) {}

  Out operator()() {
    ++attempts_;
    try {
      Txn tx(conn_);
      if constexpr (std::is_void_v<R>) {
        fn_(tx);
        tx.commit();
        return Out();
      } else if constexpr (std::is_same_v<R, Status>) {
        Status s = fn_(tx);
        if (!s.ok()) return s;  // ~Txn aborts
        tx.commit();
        return Out();
      } else if constexpr (is_result<R>::value) {
        R r = fn_(tx);
        if (!r.ok()) return Out(r.status());
        tx.commit();
        return r;
      } else {
        R value = fn_(tx);
        tx.commit();
        return Out(std::move(value));
      }
    } catch (const std::exception& e) {
      Status s = to_status(e);
      if (s.ok()) throw;
      return failed(std::move(s));
    }
  }

 private:
  Status failed(Status s) const {
    if (s.txn_state() == TxnState::kNotInTransaction) {
      s.with_txn_state(conn_.is_open() ? TxnState::kRolledBack : TxnState::kUnknown);
    }
    const Fault& fault = s.fault();
    if (fault.scope == RetryScope::kReconnect) {
      // The caller's connection is gone: stop here and let the caller reconnect.
      const bool unsafe =
          fault.outcome == Outcome::kUnknown && op_.idempotency != Idempotency::kIdempotent;
      s.with_stop(unsafe ? StopReason::kNotSafeToRepeat : StopReason::kPermanent, attempts_);
    }
    return s;
  }

  Connection& conn_;
  F& fn_;
  Operation op_;
  int attempts_ = 0;
};

}  // namespace detail

/// Runs fn(Txn&) in a fresh Txn on `conn`, committed, and re-runs it as `policy` and `op`
/// allow (see above). REQUIRES: no transaction open on `conn`.
template <class Txn = pqxx::work, class Connection, class F>
auto retry(const RetryPolicy& policy, Operation op, Connection& conn, F&& fn,
           RetryStats* stats = nullptr) ->
    typename detail::TxnAttempt<Txn, Connection, std::remove_reference_t<F>>::Out {
  detail::TxnAttempt<Txn, Connection, std::remove_reference_t<F>> attempt(conn, fn, op);
  return holdfast::retry(policy, op, attempt, stats);
}

/// The same under `shield` (breaker, concurrency limit, throttle; the Shield's policy for op).
template <class Txn = pqxx::work, class Connection, class F>
auto run(Shield& shield, Operation op, Connection& conn, F&& fn, RetryStats* stats = nullptr) ->
    typename detail::TxnAttempt<Txn, Connection, std::remove_reference_t<F>>::Out {
  detail::TxnAttempt<Txn, Connection, std::remove_reference_t<F>> attempt(conn, fn, op);
  return shield.run(op, attempt, stats);
}

}  // namespace holdfast::libpqxx
