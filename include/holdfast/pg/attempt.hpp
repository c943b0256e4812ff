/// @file
/// One attempt of one step of a pg::Database call, for a driver that runs the Shield's
/// retry loop itself (an async one, ADR 0032): AttemptScope, and what the steps of one
/// routed call share, RoutedCall. The Database: holdfast/pg.hpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "holdfast/core/status.hpp"
#include "holdfast/pg/options.hpp"

namespace holdfast::pg {

/// What the steps of one routed call share, for a driver that runs the retry loop itself
/// (AttemptScope). The driver keeps one per call, zeroed, for the call's lifetime.
struct RoutedCall {
  /// Bit i: replica i answered that it had not replayed the request's writes.
  std::uint64_t behind = 0;
  /// Set by a replica step when some read of the call had no replica's answer: the primary
  /// answers the call. Cleared when a replica step begins.
  bool unanswered = false;
  /// The primary step's attempts so far (each AttemptScope of kPrimary counts one).
  int primary_attempts = 0;
  /// A primary attempt ended at once because a replica that was only behind has since
  /// replayed the request's writes (CANCELLED, with StopReason::kCancelled: nothing is
  /// recorded against the primary): the driver runs kReplicasAgain, whose answer is the
  /// call's, success or failure.
  bool left_to_replica = false;

  /// Whether, after the primary failed with `primary` (transient, or shed), the replicas
  /// that were only behind are asked once more (kReplicasAgain).
  [[nodiscard]] bool replicas_again_after(const Status& primary) const noexcept;
};

/// One attempt of one step, for a driver that runs the Shield's retry loop itself, off the
/// caller's thread: holdfast::asio::async_run on shield() (or write Database's shield()),
/// each attempt a blocking job on a pool sized to the connections. While a scope is
/// active on a thread, every Database's calls on that thread make one attempt of `step`,
/// with no Shield and no retry of their own, inside the RequestScope the job installed:
///
///   - kReplicas: each read tries the replicas once, without waiting (as read() does
///     first). A read with no replica's answer sets RoutedCall::unanswered.
///   - kPrimary: each read, write, transaction() and once() makes its one attempt on the
///     primary: what one attempt of their own loop makes. A read after the first attempt
///     ends at once with CANCELLED when a replica found behind has since caught up
///     (RoutedCall::left_to_replica).
///   - kReplicasAgain: after the primary failed (transient, or shed), each read tries once
///     more the replicas that were only behind.
///
/// In a replica step a write is refused (FAILED_PRECONDITION, nothing sent) and the call
/// is unanswered, so that only the primary step ever writes. The driver:
///
/// @code
///   RoutedCall route;
///   if (db.replica_count() > 0) {                // a job: AttemptScope(route, kReplicas)
///     r = call();
///     if (!route.unanswered) return r;
///   }
///   r = async_run(db.shield(), ...);             // each attempt a job with kPrimary
///   if (route.replicas_again_after(r.status())) {
///     again = call();                            // a job with kReplicasAgain
///     if (!route.unanswered || route.left_to_replica) return again;
///   }
///   return r;
/// @endcode
class AttemptScope {
 public:
  /// Which part of a routed call an attempt is (see above).
  enum class Step : std::uint8_t {
    kReplicas,      ///< the replicas once, without waiting
    kPrimary,       ///< one attempt on the primary
    kReplicasAgain  ///< the replicas that were only behind, once more
  };
  /// Makes this thread's Database calls one attempt of `step` of `call` until the end of
  /// the scope (a kPrimary scope counts one of the call's primary attempts).
  AttemptScope(RoutedCall& call, Step step) noexcept;
  ~AttemptScope();
  AttemptScope(const AttemptScope&) = delete;
  AttemptScope& operator=(const AttemptScope&) = delete;

  /// The innermost active scope on this thread, or nullptr.
  [[nodiscard]] static AttemptScope* current() noexcept;
  /// What the call's steps share.
  [[nodiscard]] RoutedCall& call() noexcept { return call_; }
  /// The step this scope's attempts make.
  [[nodiscard]] Step step() const noexcept { return step_; }

 private:
  RoutedCall& call_;
  Step step_;
  AttemptScope* previous_;
};

/// The BEGIN that opens a transaction at `isolation` (READ ONLY when `read_only`), as both
/// drivers send it. Static text.
[[nodiscard]] std::string_view begin_statement(Isolation isolation, bool read_only) noexcept;

/// True for a statement that ends (or starts) a transaction block: COMMIT, END, ABORT,
/// ROLLBACK (but not ROLLBACK TO SAVEPOINT), BEGIN, START TRANSACTION, PREPARE TRANSACTION.
/// A transaction function's statements may not: the driver begins and ends the transaction.
[[nodiscard]] bool ends_transaction(std::string_view sql,
                                    bool standard_conforming_strings = true) noexcept;

/// A statement's failure inside a transaction, as the transaction's: the server rolls the
/// whole transaction back, so nothing of it was applied and only a re-run of all of it can
/// help (a retryable fault's scope becomes RetryScope::kTransaction; its state
/// TxnState::kRolledBack). A status that already has a transaction state is returned as it
/// is. Both drivers' transactions use it (pg::Database's and asio::pg::Client's).
[[nodiscard]] Status in_transaction(Status s);

}  // namespace holdfast::pg
