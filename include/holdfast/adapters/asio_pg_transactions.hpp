// Internal to holdfast/adapters/asio_pg.hpp, which includes it after the Client class: a Client's
// transactions of several statements (async_transaction(), async_once() with a function): the
// Transaction their functions run statements on, COMMIT, a COMMIT in doubt resolved, and the
// idempotency key's transaction.
#pragma once

namespace holdfast::asio::pg {

/// The statements of one transaction (async_transaction(), async_once() with a function): one
/// connection to the primary, between the Client's BEGIN and its COMMIT or ROLLBACK. Valid
/// while the function runs; each attempt calls the function with a new one. Not copyable.
template <class Executor>
class Client<Executor>::Transaction {
 public:
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  /// Runs `sql` with `params` in the transaction and waits for its rows on the loop (the
  /// first statement takes BEGIN with it: one round trip). A failed statement fails the
  /// transaction (the server rolled it back): later ones return the same failure unsent, and
  /// the Client rolls back whatever the function returns. A statement that would begin or end
  /// the transaction (COMMIT, ROLLBACK, BEGIN, ...) is refused with INVALID_ARGUMENT: return
  /// OK to commit, an error to roll back. `sql` and `params` are copied when it is sent.
  /// Unless a pooler in transaction mode is in between, the statement is a prepared statement
  /// of the connection, as a read or a write is (parsed the first time, in the same round trip).
  awaitable<Result<Rows>> query(std::string_view sql,
                                std::span<const holdfast::pg::Param> params = {}) {
    if (!failure_.ok()) co_return failure_;
    if (holdfast::pg::ends_transaction(sql)) {
      Status refused(Code::kInvalidArgument,
                     "refused inside a transaction: the Client begins, commits and rolls back "
                     "the transaction itself (return OK to commit, an error to roll back)");
      refused.with_sqlstate("");
      co_return refused;
    }
    Result<Rows> r = Status(Code::kInternal, "not run");
    const bool prepared = client_.prepares();
    if (!begun_) {
      begun_ = true;
      // BEGIN, the transaction's id (for a COMMIT in doubt) and the statement: one round trip.
      const Piece with_id[] = {{begin_}, {kXidSql, {}, prepared}, {sql, params, prepared}};
      const Piece plain[] = {{begin_}, {sql, params, prepared}};
      const std::span<const Piece> pieces =
          want_xid_ ? std::span<const Piece>(with_id) : std::span<const Piece>(plain);
      Rows out[3];
      std::size_t failed = pieces.size();
      Status st = co_await client_.exchange(slot_, pieces, std::span(out, pieces.size()), &failed,
                                            until_, 1, &client_.primary_, prepared);
      if (st.ok()) {
        if (want_xid_) xid_ = std::string(out[1].text(0, 0));
        r = std::move(out[pieces.size() - 1]);
      } else {
        r = std::move(st);
      }
    } else {
      // One piece: inside the transaction its Sync commits nothing.
      const Piece one[] = {{sql, params, prepared}};
      Rows out[1];
      std::size_t failed = 1;
      Status st = co_await client_.exchange(slot_, one, out, &failed, until_, kNoSettings,
                                            &client_.primary_);
      if (st.ok()) {
        r = std::move(out[0]);
      } else {
        r = std::move(st);
      }
    }
    if (!r.ok()) {
      failure_ = holdfast::pg::in_transaction(r.status());
      co_return failure_;
    }
    co_return r;
  }

 private:
  friend class Client;
  static constexpr std::string_view kXidSql = "SELECT pg_catalog.pg_current_xact_id()::text";

  // `begin`: the BEGIN to send with the first statement; empty when the Client began it.
  Transaction(Client& client, Slot& slot, TimePoint until, std::string_view begin, bool want_xid)
      : client_(client),
        slot_(slot),
        until_(until),
        begin_(begin),
        want_xid_(want_xid && !begin.empty()),
        begun_(begin.empty()) {}

  Client& client_;
  Slot& slot_;
  TimePoint until_;
  std::string_view begin_;
  bool want_xid_;
  bool begun_;
  std::string xid_;  // the transaction's id, once begun (when it may write)
  Status failure_;   // the first failed statement's
};

template <class Executor>
auto Client<Executor>::function_failure(const Status& returned, const Transaction& tx) -> Status {
  if (!returned.ok()) return returned;
  if (tx.failure_.ok()) return Status();
  Status s = tx.failure_;
  s.annotate("the transaction function returned OK after a failed statement");
  return s;
}

/// One attempt of an async_transaction(): a connection, the function, COMMIT or ROLLBACK.
template <class Executor>
template <class R>
auto Client<Executor>::transaction_attempt(std::shared_ptr<Transacted<R>> state) -> awaitable<R> {
  const TimePoint until = attempt_deadline(state->request);
  Result<std::unique_ptr<Slot>> leased = co_await lease(primary_, until);
  if (!leased.ok()) co_return R(leased.status());
  Slot& s = **leased;
  if (state->report != nullptr) ++state->report->runs;
  Transaction tx(*this, s, until, state->begin, state->writes);
  R out = co_await call_function<R>(state->fn, tx);
  Status failed = function_failure(out.ok() ? Status() : out.status(), tx);
  if (failed.ok() && tx.begun_) failed = co_await commit(s, tx, state->request, state->report);
  if (!failed.ok()) {
    if (failed.sqlstate() == "25006" && several_hosts_) {
      // A primary demoted under it: the function runs again on the new one when it may.
      failed = demoted(s, failed, RetryScope::kTransaction);
      failed.with_txn_state(TxnState::kRolledBack);
    }
    co_await roll_back(s, until);
  }
  give_back(primary_, std::move(*leased));
  if (!failed.ok()) co_return R(holdfast::pg::in_transaction(std::move(failed)));
  co_return out;
}

template <class Executor>
auto Client<Executor>::commit(Slot& s, Transaction& tx, const RequestContext& request,
                              holdfast::pg::TransactionReport* report) -> awaitable<Status> {
  if (s.conn.txn_status() != holdfast::pg::TxnStatus::kInTransaction) {
    Status gone(Code::kInternal, "the transaction is no longer open at COMMIT");
    gone.with_txn_state(TxnState::kUnknown);
    co_return gone;
  }
  // COMMIT and, when it may have written, the position after it (for the request's reads on
  // a standby): one round trip.
  const Piece pieces[] = {{"COMMIT"}, {kPositionSql}};
  const std::size_t n = tx.want_xid_ ? 2 : 1;
  Rows out[2];
  std::size_t failed = n;
  const std::uint64_t heard = s.conn.notices_received();
  Status committed = co_await exchange(s, std::span(pieces, n), std::span(out, n), &failed,
                                       tx.until_, kNoSettings, &primary_);
  if (committed.ok() || (n == 2 && failed == 1)) {
    if (out[0].command() == "ROLLBACK") {
      Status aborted(Code::kAborted, "COMMIT rolled the transaction back",
                     Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
      aborted.with_txn_state(TxnState::kRolledBack);
      co_return aborted;
    }
    if (unconfirmed(s, heard, request)) co_return holdfast::pg::unconfirmed_commit();
    if (n == 2) wrote(request, committed.ok() ? &out[1] : nullptr, s);
    co_return Status();
  }
  // The server refused the COMMIT (a serialization failure, a deferred constraint): it rolled
  // the transaction back.
  if (s.conn.is_open()) co_return holdfast::pg::in_transaction(std::move(committed));
  // The connection was lost during COMMIT: it may or may not have committed.
  if (report != nullptr) ++report->commits_in_doubt;
  if (n == 1) co_return holdfast::pg::in_transaction(std::move(committed));  // READ ONLY
  // A backend terminated while its COMMIT waited for a synchronous standby says so first.
  const bool alone = s.conn.standby_wait_cancelled(heard);
  co_return co_await resolve(tx.xid_, committed, request, report, s, alone);
}

template <class Executor>
auto Client<Executor>::resolve(const std::string& xid, const Status& lost,
                               const RequestContext& request,
                               holdfast::pg::TransactionReport* report, const Slot& in_doubt,
                               bool alone) -> awaitable<Status> {
  // Knowing the outcome matters more than the window: at least this long, even when the
  // window is spent (as pg::Database resolves a COMMIT in doubt).
  constexpr Duration kMinResolveTime = std::chrono::seconds(2);
  constexpr Duration kPauseMax = std::chrono::milliseconds(200);
  const TimePoint deadline = std::max(request.deadline(), detail::Clock::now() + kMinResolveTime);
  const holdfast::pg::Param id[] = {holdfast::pg::Param(xid)};
  Duration pause = std::chrono::milliseconds(10);
  TxnState state = TxnState::kUnknown;
  std::string why;
  for (;;) {
    Result<std::unique_ptr<Slot>> slot = co_await lease(primary_, deadline);
    if (slot.ok()) {
      Result<Rows> r = co_await exchange(**slot, resolve_sql_, id, deadline);
      give_back(primary_, std::move(*slot));
      if (r.ok() && r->is_null(0, 2)) {
        why = "pg_xact_status() no longer knows it";
        break;
      }
      if (r.ok() && r->text(0, 2) == "committed") {
        if (!alone) wrote(request, &*r, in_doubt);
        state = TxnState::kCommitted;
        break;
      }
      if (r.ok() && r->text(0, 2) == "aborted") {
        state = TxnState::kRolledBack;
        break;
      }
      why =
          r.ok() ? "it was still " + std::string(r->text(0, 2)) : std::string(r.status().message());
    } else {
      why = std::string(slot.status().message());
    }
    if (detail::Clock::now() + pause >= deadline) break;
    detail::net::steady_timer wait(ex_, pause);
    detail::error_code ec;
    co_await wait.async_wait(detail::net::redirect_error(detail::net::use_awaitable, ec));
    pause = std::min(pause * 2, kPauseMax);
  }
  if (report != nullptr) report->resolution = state;
  if (state == TxnState::kCommitted) {
    if (!alone) co_return Status();
    request.position_unknown();  // on the primary alone: its reads go there
    co_return holdfast::pg::unconfirmed_commit();
  }
  const std::string head = "COMMIT lost its connection (" + std::string(lost.message()) + "); ";
  if (state == TxnState::kRolledBack) {
    Status s(
        Code::kAborted,
        head + "pg_xact_status() says transaction " + xid + " was aborted: nothing was applied",
        Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kSlow, lost.fault().overload});
    s.with_sqlstate(lost.sqlstate());
    s.with_txn_state(TxnState::kRolledBack);
    co_return s;
  }
  // Its reads go to the primary from now on: whether it committed is unknown.
  request.position_unknown();
  Status s(Code::kUnavailable,
           head + "the outcome of transaction " + xid + " could not be resolved: " + why,
           Fault{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, lost.fault().overload});
  s.with_sqlstate(lost.sqlstate());
  s.with_txn_state(TxnState::kUnknown);
  co_return s;
}

template <class Executor>
auto Client<Executor>::once_attempt(std::shared_ptr<Keyed> state)
    -> awaitable<Result<KeyedResult>> {
  const TimePoint until = attempt_deadline(state->request);
  Result<std::unique_ptr<Slot>> leased = co_await lease(primary_, until);
  if (!leased.ok()) co_return leased.status();
  Slot& s = **leased;
  const holdfast::pg::Param key[] = {holdfast::pg::Param(state->key)};
  Result<KeyedResult> out = co_await keyed(s, *state, key, until);
  if (!out.ok() && out.status().sqlstate() == "25006" && several_hosts_) {
    out = Result<KeyedResult>(demoted(s, out.status()));
  }
  // Rolled back on the loop: the connection is reused only once it is idle again.
  if (!out.ok()) co_await roll_back(s, until);
  give_back(primary_, std::move(*leased));
  co_return out;
}

template <class Executor>
auto Client<Executor>::keyed(Slot& s, const Keyed& state, std::span<const holdfast::pg::Param> key,
                             TimePoint until) -> awaitable<Result<KeyedResult>> {
  const Piece begin[] = {{state.begin}, {claim_sql_, key}};
  Rows begun[2];
  std::size_t failed = 2;
  Status claimed = co_await exchange(s, begin, begun, &failed, until, 1, &primary_);
  if (!claimed.ok()) co_return holdfast::pg::in_transaction(std::move(claimed));
  KeyedResult kept;
  if (begun[1].affected() == 1) {
    Transaction tx(*this, s, until, {}, false);
    Result<std::string> made = co_await call_function<Result<std::string>>(state.fn, tx);
    Status failure = function_failure(made.ok() ? Status() : made.status(), tx);
    if (!failure.ok()) co_return holdfast::pg::in_transaction(std::move(failure));
    kept.result = std::move(*made);
  } else {
    Result<Rows> recorded = co_await exchange(s, recorded_sql_, key, until, &primary_);
    if (!recorded.ok()) co_return holdfast::pg::in_transaction(recorded.status());
    if (recorded->empty()) {
      // The row that conflicted was rolled back after all: run the transaction again.
      co_return Status(Code::kAborted, "idempotency key conflicted but is not recorded",
                       Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
    }
    kept.result = std::string(recorded->text(0, 0));
    kept.replayed = true;
    // Recorded again below, unchanged, so that the COMMIT is a write: with synchronous
    // replication it waits for the standby as the first one did (ADR 0053), and its position
    // is the request's own write for its reads.
  }
  const holdfast::pg::Param record[] = {holdfast::pg::Param(state.key),
                                        holdfast::pg::Param(kept.result)};
  const Piece end[] = {{record_sql_, record}, {"COMMIT"}, {kPositionSql}};
  Rows ended[3];
  failed = 3;
  const std::uint64_t heard = s.conn.notices_received();
  Status committed = co_await exchange(s, end, ended, &failed, until, kNoSettings, &primary_);
  if (committed.ok() || failed == 2) {
    if (ended[1].command() == "ROLLBACK") {
      co_return Status(Code::kAborted, "COMMIT rolled the transaction back",
                       Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
    }
    if (unconfirmed(s, heard, state.request)) co_return holdfast::pg::unconfirmed_commit();
    wrote(state.request, committed.ok() ? &ended[2] : nullptr, s, state.key);
    co_return kept;
  }
  if (committed.fault().outcome == Outcome::kUnknown) state.request.position_unknown();
  co_return committed;
}

}  // namespace holdfast::asio::pg
