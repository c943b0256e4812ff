#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <string>

#include "holdfast/postgres.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

using detail::ConnectionAccess;

// How long past the window the client still waits on the socket before it cancels: the
// server's statement_timeout (set to the window) normally answers first.
constexpr Duration kClientGrace = std::chrono::milliseconds(500);
// Resolving a COMMIT in doubt may take this long even when the window is nearly spent:
// knowing the outcome matters more than the window.
constexpr Duration kMinResolveTime = std::chrono::seconds(2);
constexpr Duration kResolvePauseFirst = std::chrono::milliseconds(10);
constexpr Duration kResolvePauseMax = std::chrono::milliseconds(200);
// The health probe's own deadline: a probe must not hang.
constexpr Duration kProbeTimeout = std::chrono::seconds(1);

std::atomic<std::uint32_t> next_statement_id{0};

bool valid_identifier(std::string_view name) {
  if (name.empty()) return false;
  bool start = true;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '.') {
      if (start) return false;
      start = true;
      continue;
    }
    const bool letter = std::isalpha(u) != 0 || c == '_';
    if (start ? !letter : !(letter || std::isdigit(u) != 0)) return false;
    start = false;
  }
  return !start;
}

std::string_view begin_sql(Isolation isolation, bool read_only) noexcept {
  static constexpr std::array<std::string_view, 8> kBegin = {
      "BEGIN",
      "BEGIN READ ONLY",
      "BEGIN ISOLATION LEVEL READ COMMITTED",
      "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY",
      "BEGIN ISOLATION LEVEL REPEATABLE READ",
      "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
      "BEGIN ISOLATION LEVEL SERIALIZABLE",
      "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY",
  };
  return kBegin[static_cast<std::size_t>(isolation) * 2 + (read_only ? 1 : 0)];
}

// A failure inside a transaction: the server rolls the whole transaction back, so only a
// re-run of all of it can help, and nothing of it was applied.
Status in_transaction(Status s) {
  if (s.ok() || s.txn_state() != TxnState::kNotInTransaction) return s;
  Fault f = s.fault();
  if (f.scope != RetryScope::kNone) f.scope = RetryScope::kTransaction;
  f.outcome = Outcome::kNotApplied;
  s.with_fault(f);
  s.with_txn_state(TxnState::kRolledBack);
  return s;
}

// A failure before anything of ours could have been applied (connect, SET, BEGIN, PREPARE).
Status nothing_applied(Status s) {
  Fault f = s.fault();
  f.outcome = Outcome::kNotApplied;
  s.with_fault(f);
  return s;
}

Status refused(std::string_view what, const SqlClass& c) {
  Status s(Code::kInvalidArgument, std::string(what) + c.explain());
  s.with_sqlstate("");
  return s;
}

// Runs a Statement, preparing it on this connection the first time.
Result<Rows> run_prepared(Connection& conn, std::string_view name, std::string_view sql,
                          std::uint32_t id, std::span<const Param> params) {
  if (!conn.is_prepared(id)) {
    if (Status s = conn.prepare(name, sql, params); !s.ok()) return nothing_applied(s);
    conn.mark_prepared(id);
  }
  return conn.query_prepared(name, params);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Transaction

Transaction::~Transaction() {
  if (conn_->txn_status() != TxnStatus::kIdle) conn_.discard();
}

Result<Rows> Transaction::record(Result<Rows> r) {
  if (!r.ok()) {
    Status s = in_transaction(r.status());
    if (failure_.ok()) failure_ = s;
    return s;
  }
  return r;
}

Result<Rows> Transaction::query(std::string_view sql, std::span<const Param> params) {
  if (!failure_.ok()) return failure_;
  const bool scs = conn_->standard_conforming_strings();
  if (const SqlClass c = classify_sql(sql, scs); c.kind == SqlKind::kInvalid) {
    return refused("refused: ", c);
  }
  if (detail::ends_transaction(sql, scs)) {
    Status s(Code::kInvalidArgument,
             "refused inside transaction(): the Database begins, commits and rolls back the "
             "transaction itself (return OK to commit, an error to roll back)");
    s.with_sqlstate("");
    return s;
  }
  return record(ConnectionAccess::query_unchecked(*conn_, sql, params));
}

Result<Rows> Transaction::query(const Statement& stmt, std::span<const Param> params) {
  if (!failure_.ok()) return failure_;
  if (stmt.name_.empty()) {
    return Status(Code::kInvalidArgument, "the Statement was not made by Database::prepare()");
  }
  if (detail::ends_transaction(stmt.sql_, conn_->standard_conforming_strings())) {
    return Status(Code::kInvalidArgument,
                  "refused inside transaction(): the Statement ends the transaction");
  }
  return record(run_prepared(*conn_, stmt.name_, stmt.sql_, stmt.id_, params));
}

// ---------------------------------------------------------------------------------------
// Database

Database::Database(DatabaseOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &Clock::system()) {
  if (options_.url.empty()) throw std::invalid_argument("DatabaseOptions::url must not be empty");
  if (options_.read_connections < 1) {
    throw std::invalid_argument("DatabaseOptions::read_connections must be at least 1");
  }
  if (options_.write_connections < 1) {
    throw std::invalid_argument("DatabaseOptions::write_connections must be at least 1");
  }
  for (const std::string& url : options_.replica_urls) {
    if (url.empty()) throw std::invalid_argument("DatabaseOptions::replica_urls has an empty URL");
  }
  if (!valid_identifier(options_.idempotency_table)) {
    throw std::invalid_argument("DatabaseOptions::idempotency_table '" +
                                options_.idempotency_table +
                                "' is not a plain or schema-qualified identifier");
  }
  if (options_.health_probe_interval < Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::health_probe_interval must not be negative");
  }
  primary_ = make_endpoint(options_.name, options_.url, true);
  for (std::size_t i = 0; i < options_.replica_urls.size(); ++i) {
    replicas_.push_back(make_endpoint(options_.name + "-replica-" + std::to_string(i + 1),
                                      options_.replica_urls[i], false));
  }
  const std::string& t = options_.idempotency_table;
  claim_sql_ = "INSERT INTO " + t + " (key) VALUES ($1) ON CONFLICT (key) DO NOTHING";
  recorded_sql_ = "SELECT result FROM " + t + " WHERE key = $1";
  record_sql_ = "UPDATE " + t + " SET result = $2 WHERE key = $1";
}

Database::~Database() = default;

std::unique_ptr<Database::Endpoint> Database::make_endpoint(std::string name,
                                                            const std::string& url, bool primary) {
  auto e = std::make_unique<Endpoint>();
  e->name = std::move(name);
  e->shield = std::make_unique<Shield>(e->name, options_.shield, *clock_);
  const Duration window = e->shield->reads().window();

  PoolOptions po;
  po.connect.conninfo = url;
  po.connect.application_name = options_.application_name;
  po.connect.settings = options_.settings;
  // Start every session at the full window, the value a request uses until its window
  // opens: most calls then never need a SET.
  po.connect.settings.emplace_back(
      "statement_timeout",
      std::to_string(std::chrono::ceil<std::chrono::milliseconds>(window).count()));
  po.connect.connect_timeout = options_.connect_timeout;
  po.connect.clock = clock_;
  po.reconnect_backoff = options_.reconnect_backoff;
  po.window = window;
  po.size = options_.read_connections;
  po.read_only = true;
  e->reads = std::make_unique<Pool>(po);
  if (primary) {
    po.size = options_.write_connections;
    po.read_only = false;
    e->writes = std::make_unique<Pool>(po);
  }
  if (options_.health_probe_interval > Duration::zero()) {
    Pool* pool = e->reads.get();
    Clock* clock = clock_;
    e->probe = std::make_unique<HealthProbe>(
        e->shield->breaker(),
        [pool, clock]() -> Status {
          const TimePoint deadline = clock->now() + kProbeTimeout;
          Result<PooledConnection> lease = pool->acquire(deadline);
          if (!lease.ok()) return lease.status();
          (*lease)->set_deadline(deadline);
          Result<Rows> r = ConnectionAccess::query_unchecked(**lease, "SELECT 1", {});
          if (!r.ok() && !(*lease)->is_open()) lease->discard();
          return r.ok() ? Status() : r.status();
        },
        HealthProbe::Options{options_.health_probe_interval, true});
  }
  return e;
}

TimePoint Database::connect_deadline() const {
  const RetryWindow* w = RequestScope::current_window();
  const Duration left = w != nullptr ? w->remaining() : options_.connect_timeout;
  return clock_->now() + std::min(left, options_.connect_timeout);
}

void Database::open_request_window() const {
  // PostgreSQL does not tell a client that its statement waits for a lock (nor a pool
  // wait from a slow server), so the window opens when the request first goes to the
  // database (SQLite's opens when its busy handler first waits). Opened at the first
  // failure instead, a statement stuck behind a lock could spend a whole window and its
  // retry a second one.
  RetryWindow* w = RequestScope::current_window();
  if (w != nullptr && !w->is_open()) w->open(clock_->now());
}

Status Database::prepare_call(Connection& conn) {
  const TimePoint now = clock_->now();
  const RetryWindow* w = RequestScope::current_window();
  const Duration left = w != nullptr ? w->remaining(now) : primary_->shield->reads().window();
  conn.set_deadline(now + left + kClientGrace);
  return conn.ensure_statement_timeout(left);
}

Result<Rows> Database::attempt(Pool& pool, const Work& work, bool may_wait) {
  open_request_window();
  Result<PooledConnection> lease = may_wait ? pool.acquire() : pool.try_acquire(connect_deadline());
  if (!lease.ok()) return lease.status();
  PooledConnection& conn = *lease;
  if (lease->fresh()) {
    standard_strings_.store(conn->standard_conforming_strings(), std::memory_order_relaxed);
  }
  if (Status s = prepare_call(*conn); !s.ok()) {
    if (!conn->is_open()) conn.discard();
    return nothing_applied(std::move(s));
  }
  Result<Rows> r =
      work.stmt != nullptr
          ? run_prepared(*conn, work.stmt->name_, work.stmt->sql_, work.stmt->id_, work.params)
          : ConnectionAccess::query_unchecked(*conn, work.sql, work.params);
  if (!r.ok() && !conn->is_open()) conn.discard();
  return r;
}

Result<Rows> Database::try_replica(Endpoint& replica, const Work& work, bool& fall_back) {
  Shield& shield = *replica.shield;
  Clock& clock = shield.clock();
  Shield::Call call(shield, shield.reads(), Operation::read("pg.read.replica"));
  const TimePoint start = clock.now();
  Shield::Admission a = call.admit(start);
  if (a.kind != Shield::Admission::Kind::kAttempt) {
    // The replica's breaker is open: the primary answers, nobody waits for the replica.
    fall_back = true;
    return a.status.ok() ? Status(Code::kUnavailable, "replica breaker open") : a.status;
  }
  // No waiting for a busy replica or its reconnect backoff: the primary can answer now.
  Result<Rows> r = attempt(*replica.reads, work, /*may_wait=*/false);
  const TimePoint end = clock.now();
  if (r.ok()) {
    call.succeeded(std::move(a.permit),
                   shield.breaker().measures_latency() ? end - start : Duration::zero());
    return r;
  }
  // Recorded for the replica's breaker and throttle; the retry, if any, is the primary's.
  (void)call.failed(std::move(a.permit), r.status(), end, end - start);
  if (r.status().fault().transient()) fall_back = true;
  return r;
}

Result<Rows> Database::read_work(const Work& work) {
  std::optional<RequestScope> own;
  if (RequestScope::current_window() == nullptr) {
    own.emplace(primary_->shield->reads().window(), primary_->shield->clock());
  }
  for (const auto& replica : replicas_) {
    bool fall_back = false;
    Result<Rows> r = try_replica(*replica, work, fall_back);
    if (!fall_back) return r;
  }
  return run(*primary_, Operation::read("pg.read"),
             [&]() -> Result<Rows> { return attempt(*primary_->reads, work, true); });
}

Result<Rows> Database::write_work(const Work& work, Operation op) {
  // An autocommit statement is its own whole transaction: one that the server rolled back
  // (40001, 40P01) may be re-run like a re-runnable transaction.
  op.reruns_transaction = true;
  return run(*primary_, op,
             [&]() -> Result<Rows> { return attempt(*primary_->writes, work, true); });
}

Result<Rows> Database::read(std::string_view sql, std::span<const Param> params) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  if (c.kind == SqlKind::kInvalid) return refused("refused: ", c);
  if (c.kind != SqlKind::kRead) {
    return refused("refused on the read path (use write() or transaction()): not a read: ", c);
  }
  return read_work(Work{sql, nullptr, params});
}

Result<Rows> Database::read(const Statement& stmt, std::span<const Param> params) {
  if (stmt.name_.empty()) {
    return Status(Code::kInvalidArgument, "the Statement was not made by Database::prepare()");
  }
  if (stmt.kind_ != SqlKind::kRead) {
    return Status(Code::kInvalidArgument,
                  "refused on the read path (use write() or transaction()): not a read: " +
                      std::string(stmt.reason_));
  }
  return read_work(Work{stmt.sql_, &stmt, params});
}

Result<Rows> Database::write_classified(const SqlClass& c, const Work& work, Operation op) {
  if (c.kind == SqlKind::kInvalid) return refused("refused: ", c);
  if (c.changes_session) {
    return refused(
        "refused: it would leave state on a pooled connection (use transaction(), "
        "DatabaseOptions::settings or prepare()): ",
        c);
  }
  return write_work(work, op);
}

Result<Rows> Database::write(std::string_view sql, std::span<const Param> params, Operation op) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  return write_classified(c, Work{sql, nullptr, params}, op);
}

Result<Rows> Database::write(const Statement& stmt, std::span<const Param> params, Operation op) {
  if (stmt.name_.empty()) {
    return Status(Code::kInvalidArgument, "the Statement was not made by Database::prepare()");
  }
  const SqlClass c{stmt.kind_, stmt.reason_, {}, stmt.changes_session_};
  return write_classified(c, Work{stmt.sql_, &stmt, params}, op);
}

Result<Rows> Database::query(std::string_view sql, std::span<const Param> params) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  if (c.kind == SqlKind::kRead) return read_work(Work{sql, nullptr, params});
  return write_classified(c, Work{sql, nullptr, params}, Operation::write("pg.write"));
}

Result<Statement> Database::prepare(std::string_view sql) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  if (c.kind == SqlKind::kInvalid) return refused("refused: ", c);
  Statement stmt;
  stmt.sql_ = std::string(sql);
  stmt.id_ = next_statement_id.fetch_add(1, std::memory_order_relaxed);
  stmt.name_ = "holdfast_" + std::to_string(stmt.id_);
  stmt.kind_ = c.kind;
  stmt.reason_ = c.reason;
  stmt.changes_session_ = c.changes_session;
  return stmt;
}

// ---------------------------------------------------------------------------------------
// Transactions

Result<Transaction> Database::begin(const TransactionOptions& options, int run) {
  Pool& pool = options.read_only ? *primary_->reads : *primary_->writes;
  open_request_window();
  Result<PooledConnection> lease = pool.acquire();
  if (!lease.ok()) return lease.status();
  if (Status s = prepare_call(**lease); !s.ok()) {
    if (!(*lease)->is_open()) lease->discard();
    return nothing_applied(std::move(s));
  }
  Transaction tx(std::move(*lease), run);
  Result<Rows> began = ConnectionAccess::query_unchecked(
      tx.connection(), begin_sql(options.isolation, options.read_only), {});
  if (!began.ok()) {
    if (!tx.connection().is_open()) tx.conn_.discard();
    return nothing_applied(began.status());  // a failed BEGIN changed nothing
  }
  if (!options.read_only) {
    // Recorded now, so a COMMIT whose connection is lost can be resolved later.
    Result<Rows> xid = ConnectionAccess::query_unchecked(
        tx.connection(), "SELECT pg_catalog.pg_current_xact_id()::text", {});
    if (!xid.ok()) {
      tx.conn_.discard();  // closing the connection rolls the transaction back
      return nothing_applied(in_transaction(xid.status()));
    }
    tx.xid_ = std::string(xid->text(0, 0));
  }
  return tx;
}

Status Database::finish(Transaction& tx, const Status& fn_status, TransactionReport& report) {
  Connection& conn = tx.connection();
  const auto roll_back = [&] {
    const TxnStatus st = conn.txn_status();
    if (st == TxnStatus::kInTransaction || st == TxnStatus::kInError) {
      Result<Rows> r = ConnectionAccess::query_unchecked(conn, "ROLLBACK", {});
      if (r.ok()) return;
    }
    if (conn.txn_status() != TxnStatus::kIdle) tx.conn_.discard();
  };
  if (!fn_status.ok()) {
    roll_back();
    return in_transaction(fn_status);
  }
  if (!tx.failure_.ok()) {
    roll_back();
    Status s = tx.failure_;
    s.annotate("the transaction function returned OK after a failed statement");
    return s;
  }
  if (conn.txn_status() != TxnStatus::kInTransaction) {
    roll_back();
    Status s(Code::kInternal, "the transaction is no longer open at COMMIT");
    s.with_txn_state(TxnState::kUnknown);
    return s;
  }

  Result<Rows> committed = ConnectionAccess::query_unchecked(conn, "COMMIT", {});
  if (committed.ok()) {
    if (committed->command() == "ROLLBACK") {
      Status s(Code::kAborted, "COMMIT rolled the transaction back",
               Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
      s.with_txn_state(TxnState::kRolledBack);
      return s;
    }
    return Status();
  }
  if (conn.is_open()) {
    // The server refused the COMMIT (a serialization failure, a deferred constraint): it
    // rolled the transaction back.
    roll_back();
    return in_transaction(committed.status());
  }

  // The connection was lost during COMMIT: the transaction may or may not have committed.
  tx.conn_.discard();
  ++report.commits_in_doubt;
  const Status& lost = committed.status();
  if (tx.xid_.empty()) {
    // A READ ONLY transaction wrote nothing: its outcome does not matter.
    return in_transaction(lost);
  }
  Status why;
  const TxnState state = resolve(tx.xid_, why);
  report.resolution = state;
  if (state == TxnState::kCommitted) return Status();
  const std::string head = "COMMIT lost its connection (" + std::string(lost.message()) + "); ";
  if (state == TxnState::kRolledBack) {
    Status s(
        Code::kAborted,
        head + "pg_xact_status() says transaction " + tx.xid_ + " was aborted: nothing was applied",
        Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kSlow, lost.fault().overload});
    s.with_sqlstate(lost.sqlstate());
    s.with_txn_state(TxnState::kRolledBack);
    return s;
  }
  Status s(Code::kUnavailable,
           head + "the outcome of transaction " + tx.xid_ +
               " could not be resolved: " + std::string(why.message()),
           Fault{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, lost.fault().overload});
  s.with_sqlstate(lost.sqlstate());
  s.with_txn_state(TxnState::kUnknown);
  return s;
}

TxnState Database::resolve(std::string_view xid, Status& why) {
  const RetryWindow* w = RequestScope::current_window();
  const Duration left = std::max(
      w != nullptr ? w->remaining() : primary_->shield->writes().window(), kMinResolveTime);
  const TimePoint deadline = clock_->now() + left;
  const Param params[] = {Param(xid)};
  Duration pause = kResolvePauseFirst;
  for (;;) {
    Result<PooledConnection> lease = primary_->writes->acquire(deadline);
    if (lease.ok()) {
      (*lease)->set_deadline(deadline);
      Result<Rows> r = ConnectionAccess::query_unchecked(
          **lease, "SELECT pg_catalog.pg_xact_status($1::pg_catalog.xid8)", params);
      if (r.ok()) {
        if (r->is_null(0, 0)) {
          why = Status(Code::kUnknown,
                       "pg_xact_status() no longer knows transaction " + std::string(xid));
          return TxnState::kUnknown;
        }
        const std::string_view answer = r->text(0, 0);
        if (answer == "committed") return TxnState::kCommitted;
        if (answer == "aborted") return TxnState::kRolledBack;
        why = Status(Code::kUnavailable,
                     "transaction " + std::string(xid) + " was still " + std::string(answer));
      } else {
        why = r.status();
        if (!(*lease)->is_open()) lease->discard();
      }
    } else {
      why = lease.status();
    }
    if (clock_->now() + pause >= deadline) return TxnState::kUnknown;
    clock_->sleep_for(pause);
    pause = std::min(pause * 2, kResolvePauseMax);
  }
}

// ---------------------------------------------------------------------------------------
// Idempotency keys

Status Database::create_idempotency_table() {
  const std::string sql = "CREATE TABLE IF NOT EXISTS " + options_.idempotency_table +
                          " (key text PRIMARY KEY, result text, "
                          "created_at timestamptz NOT NULL DEFAULT now())";
  Result<Rows> r = write(sql, {}, Operation::idempotent_write("pg.idempotency_table"));
  if (r.ok()) return Status();
  // Two processes creating it at once: one wins, the other sees it exist.
  if (r.status().sqlstate() == "23505" || r.status().sqlstate() == "42P07") return Status();
  return r.status();
}

Result<bool> Database::claim_key(Transaction& tx, std::string_view key) {
  const Param params[] = {Param(key)};
  Result<Rows> r = tx.query(claim_sql_, params);
  if (!r.ok()) return r.status();
  return r->affected() == 1;
}

Result<std::string> Database::recorded_result(Transaction& tx, std::string_view key) {
  const Param params[] = {Param(key)};
  Result<Rows> r = tx.query(recorded_sql_, params);
  if (!r.ok()) return r.status();
  if (r->empty()) {
    // The row that conflicted was rolled back after all: run the transaction again.
    return Status(Code::kAborted,
                  "idempotency key '" + std::string(key) + "' conflicted but is not recorded",
                  Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
  }
  return std::string(r->text(0, 0));
}

Status Database::record_result(Transaction& tx, std::string_view key, std::string_view result) {
  const Param params[] = {Param(key), Param(result)};
  Result<Rows> r = tx.query(record_sql_, params);
  return r.ok() ? Status() : r.status();
}

}  // namespace holdfast::pg
