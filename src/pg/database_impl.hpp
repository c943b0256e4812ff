// pg::Database::Impl: what a Database is besides its public functions -- its options, its
// servers (an Endpoint each: Shield, pools, probe, liveness), the prefixes its calls open
// with, and the read, write and transaction paths (database.cpp, calls.cpp, hedge.cpp,
// replica_state.cpp, transaction.cpp). Database's functions hand each call to it (not
// installed; ADR 0042).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "database_internal.hpp"
#include "holdfast/core/health_probe.hpp"
#include "holdfast/core/liveness.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/detail/read_route.hpp"
#include "holdfast/detail/run_attempts.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/pool.hpp"

namespace holdfast::pg {

// What the steps of one routed read share (read_routed(): the replicas, the primary, the
// replicas again).
struct RoutedCall {
  // Bit i: replica i answered that it had not replayed the request's writes.
  std::uint64_t behind = 0;
  // No replica answered the read: the primary answers it.
  bool unanswered = false;
  // The primary's attempts so far.
  int primary_attempts = 0;
  // A primary attempt ended at once because a replica that was only behind has since
  // replayed the request's writes (CANCELLED, with StopReason::kCancelled: nothing is
  // recorded against the primary): the replicas again answer, success or failure.
  bool left_to_replica = false;
};

namespace detail {
struct CallPipeline;
class LostWrites;
struct CopyState;
class HedgeBudget;
}  // namespace detail

class Database::Impl {
 public:
  // Validates `options` (std::invalid_argument naming the field). Connects lazily.
  explicit Impl(DatabaseOptions options);
  // Stops the driver's own threads before what they use goes.
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Database's functions of the same names.
  Result<Rows> read(std::string_view sql, std::span<const Param> params,
                    const ReadOptions& options);
  Result<Rows> read(const Statement& stmt, std::span<const Param> params,
                    const ReadOptions& options);
  Result<Rows> write(std::string_view sql, std::span<const Param> params, Operation op);
  Result<Rows> write(const Statement& stmt, std::span<const Param> params, Operation op);
  Result<Rows> query(std::string_view sql, std::span<const Param> params);
  Result<Statement> prepare(std::string_view sql);
  Status create_idempotency_table();
  [[nodiscard]] bool silent() const noexcept;
  [[nodiscard]] std::uint64_t silence_checks() const noexcept;
  [[nodiscard]] bool replica_silent(std::size_t i) const;
  [[nodiscard]] bool replica_slow(std::size_t i) const;
  [[nodiscard]] LostWritesReport lost_writes() const;
  Result<Transaction> begin(const TransactionOptions& options, int run);
  Status finish(Transaction& tx, const Status& fn_status, TransactionReport& report);
  Status run_primary(Operation op, holdfast::detail::AttemptRef attempt, RetryStats* stats);
  Result<bool> claim_key(Transaction& tx, std::string_view key);
  Result<std::string> recorded_result(Transaction& tx, std::string_view key);
  Status record_result(Transaction& tx, std::string_view key, std::string_view result);

 private:
  friend class Database;  // its accessors read the members
  struct Endpoint;        // a server: its Shield, pools, probe and liveness (below)
  // What a read or write runs: SQL text, or a prepared Statement.
  struct Work {
    std::string_view sql;
    const Statement* stmt = nullptr;
    std::span<const Param> params;
  };
  // The statement a call opens with (database.cpp): its SQL, and its name and id when it is
  // prepared on each connection (Pooling::kSession).
  struct Prefix {
    std::string sql;
    std::string name;
    std::uint32_t id = 0;
  };
  // OK, or why `replica` is unhealthy: it reported `replayed` and `received` at `now` and
  // has been behind WAL it had received for longer than `max_lag`.
  static Status replay_lag_status(Endpoint& replica, std::uint64_t replayed, std::uint64_t received,
                                  TimePoint now, Duration max_lag);
  // What a replica said about itself with a read (the replica prefix's columns).
  struct ReplicaView {
    std::uint64_t replayed = 0;
    std::uint64_t received = 0;
    bool read_committed = false;  ///< the read's snapshot came after the replay position
    bool in_recovery = true;      ///< false: not a standby (promoted), so no replica
  };

  // The one place every retried operation goes through: the endpoint's Shield (retry
  // loop, throttle, breaker), inside a RequestScope (one of its own outside any). Defined
  // below.
  template <class F>
  auto run(Endpoint& endpoint, const RetryPolicy& policy, Operation op, F&& attempt,
           RetryStats* stats = nullptr) -> std::invoke_result_t<F&>;

  std::unique_ptr<Endpoint> make_endpoint(std::string name, const std::string& url, bool primary);
  Prefix make_prefix(std::string_view head, std::uint32_t id, std::string_view name) const;
  Result<Rows> read_work(const Work& work, const ReadOptions& options);
  Result<Rows> read_routed(const Work& work, const RetryPolicy& policy, Operation op,
                           RetryStats& stats);
  // Each replica once (`again`: those `route` found only behind, past their hold) until
  // one answers; none did: `route.unanswered`. read_routed()'s first and last steps.
  Result<Rows> replica_pass(const Work& work, RoutedCall& route, bool again, RetryStats& stats);
  // One attempt on the primary for `route`, or CANCELLED when a replica that was behind has
  // caught up since its first attempt (`route.left_to_replica`).
  Result<Rows> primary_read(const Work& work, RoutedCall& route);
  // Whether a replica marked in `behind` has been seen past the request's position.
  bool replica_caught_up(std::uint64_t behind) noexcept;
  Result<Rows> write_work(const Work& work, Operation op, RetryStats* stats = nullptr);
  Result<Rows> write_classified(const SqlClass& c, const Work& work, Operation op);
  // One read on `endpoint`'s read pool (`may_wait` for a free connection); fills `view` on
  // a replica, and closes the session and its idle siblings to its host when the replica
  // is not in recovery. A replica's new connection gets at most `replica_connect`.
  // `exchange` (when not null): how long the round trip took, the wait for a connection left
  // out.
  Result<Rows> read_once(Endpoint& endpoint, const Work& work, bool may_wait, ReplicaView* view,
                         Duration replica_connect = Duration::max(), Duration* exchange = nullptr);
  // One write on the primary, in a transaction of its own, and its commit's position.
  Result<Rows> write_once(const Work& work);
  // What a replica made of a read.
  enum class ReplicaAnswer : std::uint8_t {
    kAnswered,  ///< the result is the read's (rows, or a failure the primary would meet too)
    kFailed,    ///< it could not answer (breaker open, busy, down, lagging): the primary answers
    kBehind,    ///< it has not replayed the request's own writes yet: the primary answers
  };
  struct Hedge {               // what became of a replica read's hedge (hedge.cpp)
    bool sent = false;         // the read went to the primary too
    bool primary_won = false;  // the primary's answer is the read's
    bool gave_up = false;      // a slow replica's try was given up, no hedge sent
  };
  // One read on `replica` from `start`, hedged to the primary or given up (hedge.cpp).
  Result<Rows> replica_read(Endpoint& replica, const Work& work, ReplicaView& view, bool probe,
                            TimePoint start, Hedge& hedge);
  std::optional<Rows> hedge_to_primary(Connection& conn, PooledConnection& replica_lease,
                                       const Work& work, bool probe, Hedge& hedge);
  // read_once()'s end: the pipeline's status `s` (step `failed` failed) judged, the
  // connection discarded when it must be, `view` filled.
  Result<Rows> finish_read(Endpoint& endpoint, PooledConnection& lease, Status s,
                           std::span<Rows> out, std::size_t head, std::size_t main,
                           std::size_t failed, ReplicaView* view);
  // What `replica`'s answer after `latency` (or its lost hedge) says of its speed.
  void judge_replica(Endpoint& replica, bool lost_hedge, Duration latency, TimePoint now) noexcept;
  // One admitted read on a replica (counted in `stats`), marked asked in `pass` when it goes
  // to the replica. A replica found behind the request's writes moments ago is not asked
  // again until its hold ends, unless `past_hold`.
  Result<Rows> try_replica(Endpoint& replica, const Work& work, bool past_hold,
                           detail::StandbyPass& pass, ReplicaAnswer& answer, RetryStats& stats);
  // A connection of `pool` for a call: waits for one (`may_wait`) or takes one only if free.
  // A new connection is given at most `connect_at_most` (when it does not wait).
  Result<PooledConnection> lease(Pool& pool, bool may_wait,
                                 Duration connect_at_most = Duration::max());
  // Opens the current request's window if it is not open yet (see database.cpp).
  void open_request_window() const;
  // Starts a call's pipeline on `conn`: sets the connection's deadline from the current
  // window and adds `prefix` with the statement_timeout that leaves (and, with
  // Pooling::kTransaction, the settings). Returns the prefix's step.
  std::size_t add_prefix(detail::CallPipeline& p, Connection& conn, const Prefix& prefix) const;
  // Adds the work's statement (prepared under its name with Pooling::kSession); returns its
  // step.
  std::size_t add_work(detail::CallPipeline& p, Connection& conn, const Work& work) const;
  // When a new connection must be up by: the window's end, at most connect_timeout away.
  // `cap`: at most this far away, too.
  TimePoint connect_deadline(Duration cap = Duration::max()) const;

  Status commit(Transaction& tx, TransactionReport& report);
  // `alone`: the COMMIT's wait for a synchronous standby ended before its connection was
  // lost (ADR 0053): committed is then answered unconfirmed_commit().
  Status commit_in_doubt(Transaction& tx, const Status& lost, bool alone,
                         TransactionReport& report);
  // What became of transaction `xid`; `lsn` and `timeline`: the primary's WAL position when
  // it answered.
  // `host`: which host of the URL answered (ConnectionAccess::host_id()).
  TxnState resolve(std::string_view xid, Status& why, std::uint64_t& lsn, std::uint32_t& timeline,
                   std::uintptr_t& host);
  // A write of the current request committed at `lsn` (0: not known) on `timeline` (0: not
  // known), on the writer of `host` (`conn`, when not null, names it), with idempotency key
  // `key` (empty: none): the request's position (detail::note_write()), the newest timeline
  // seen, and the confirmed writes a change of writer checks (ADR 0036).
  void wrote(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host, const Connection* conn,
             std::string_view key) noexcept;

  const DatabaseOptions options_;
  Clock* clock_;
  std::unique_ptr<Endpoint> primary_;
  std::vector<std::unique_ptr<Endpoint>> replicas_;
  std::unique_ptr<detail::HedgeBudget> hedges_;
  std::atomic<std::uint64_t> hedged_{0};
  std::atomic<std::uint64_t> hedges_won_{0};
  std::atomic<bool> standard_strings_{true};
  // The URL names several hosts (failover: the writer is the one not in recovery).
  bool several_hosts_ = false;
  // The newest timeline of the primary's writes (not of positions requests brought: a
  // client may forge those).
  std::atomic<std::uint32_t> timeline_{0};
  // Confirmed writes a change of writer lost (null: lost_writes.remember is 0).
  std::unique_ptr<detail::LostWrites> lost_;
  // Pooling::kTransaction: `settings` as prefix parameters (name, value, name, ...).
  std::vector<Param> setting_params_;
  Prefix read_prefix_;     // READ ONLY + statement_timeout
  Prefix replica_prefix_;  // the same, and the replica's replay position
  Prefix write_prefix_;    // statement_timeout
  Prefix begin_prefix_;    // statement_timeout, and the transaction id
  std::string claim_sql_;
  std::string recorded_sql_;
  std::string record_sql_;
};

struct Database::Impl::Endpoint {
  std::string name;
  std::unique_ptr<Shield> shield;
  std::unique_ptr<Pool> reads;
  std::unique_ptr<Pool> writes;  ///< primary only
  detail::CatchUp catch_up;      ///< replicas only
  /// Its read latency, and (replicas) whether it is used less and its replay lag
  /// (slow_copy.hpp).
  std::unique_ptr<detail::CopyState> copy;
  /// The server's liveness watch (silence_after > 0): shared with every connection.
  std::shared_ptr<detail::ServerWatch> watch;
  std::unique_ptr<HealthProbe> probe;  ///< its thread reads the members above
  std::unique_ptr<Liveness> liveness;  ///< last: its thread reads the members above
};

template <class F>
auto Database::Impl::run(Endpoint& endpoint, const RetryPolicy& policy, Operation op, F&& attempt,
                         RetryStats* stats) -> std::invoke_result_t<F&> {
  if (RequestScope::current_window() != nullptr) {
    return endpoint.shield->run(policy, op, attempt, stats);
  }
  RequestScope scope(policy.window(), endpoint.shield->clock());
  return endpoint.shield->run(policy, op, attempt, stats);
}

}  // namespace holdfast::pg
