// Database::Impl: construction, what every call does (a connection, its deadline, the prefix),
// and prepared statements. The read and write paths are calls.cpp's; transactions are
// transaction.cpp's.
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/health_probe.hpp"
#include "holdfast/core/liveness.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/detail/slow_copy.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/lsn.hpp"
#include "lost_writes.hpp"
#include "pg_internal.hpp"
#include "server_watch.hpp"

namespace holdfast::pg {
namespace {

using detail::ConnectionAccess;
using detail::Step;
using detail::Steps;

// How long past the window the client still waits on the socket before it cancels: the
// server's statement_timeout (set to the window) normally answers first. A server that
// holds the statement without running it (PgBouncer queueing it for a server connection)
// answers neither: the cancel's grace (exchange.cpp) then bounds the overrun.
constexpr Duration kClientGrace = std::chrono::milliseconds(50);
// The health probe's own deadline: a probe must not hang.
constexpr Duration kProbeTimeout = std::chrono::seconds(1);

// The ids of the driver's own prepared statements (below detail::kFirstStatementId).
constexpr std::uint32_t kReadPrefixId = 0;
constexpr std::uint32_t kReplicaPrefixId = 1;
constexpr std::uint32_t kWritePrefixId = 2;
constexpr std::uint32_t kBeginPrefixId = 3;

constexpr std::string_view kReadHead =
    "SELECT pg_catalog.set_config('transaction_read_only', 'on', true), "
    "pg_catalog.set_config('statement_timeout', $1, true)";
// Columns 2-4: the replay and receive positions, and whether the statement after this one
// takes a snapshot of its own (read committed), so that it sees everything replayed by now.
// Column 5: whether the server is in recovery at all: a standby that was promoted keeps the
// replay position it had then, and is no replica (ADR 0025).
constexpr std::string_view kReplicaHead =
    "SELECT pg_catalog.set_config('transaction_read_only', 'on', true), "
    "pg_catalog.set_config('statement_timeout', $1, true), "
    "pg_catalog.pg_last_wal_replay_lsn()::text, pg_catalog.pg_last_wal_receive_lsn()::text, "
    "pg_catalog.current_setting('transaction_isolation') = 'read committed', "
    "pg_catalog.pg_is_in_recovery()";
// A replica's health probe: its replay and receive positions (its lag, as reads judge it),
// and whether it is in recovery (a replica at all).
constexpr const char* kReplicaProbe =
    "SELECT pg_catalog.pg_last_wal_replay_lsn()::text, "
    "pg_catalog.pg_last_wal_receive_lsn()::text, pg_catalog.pg_is_in_recovery()";
constexpr std::string_view kWriteHead =
    "SELECT pg_catalog.set_config('statement_timeout', $1, true)";
// Column 1: the transaction id, recorded so that a COMMIT in doubt can be resolved.
constexpr std::string_view kBeginHead =
    "SELECT pg_catalog.set_config('statement_timeout', $1, true), "
    "pg_catalog.pg_current_xact_id()::text";

std::atomic<std::uint32_t> next_statement_id{detail::kFirstStatementId};

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

void validate(const DatabaseOptions& o) {
  if (o.url.empty()) throw std::invalid_argument("DatabaseOptions::url must not be empty");
  if (o.read_connections < 1) {
    throw std::invalid_argument("DatabaseOptions::read_connections must be at least 1");
  }
  if (o.write_connections < 1) {
    throw std::invalid_argument("DatabaseOptions::write_connections must be at least 1");
  }
  for (const std::string& url : o.replica_urls) {
    if (url.empty()) throw std::invalid_argument("DatabaseOptions::replica_urls has an empty URL");
  }
  if (!valid_identifier(o.idempotency_table)) {
    throw std::invalid_argument("DatabaseOptions::idempotency_table '" + o.idempotency_table +
                                "' is not a plain or schema-qualified identifier");
  }
  if (o.health_probe_interval < Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::health_probe_interval must not be negative");
  }
  if (o.silence_after < Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::silence_after must not be negative");
  }
  if (o.silence_after > Duration::zero() && o.silence_check_timeout <= Duration::zero()) {
    throw std::invalid_argument(
        "DatabaseOptions::silence_check_timeout must be greater than zero while silence_after is "
        "set");
  }
  if (o.lost_writes.remember > 0) {
    if (Status bad = check(o.lost_writes); !bad.ok()) {
      throw std::invalid_argument("DatabaseOptions::" + std::string(bad.message()));
    }
  }
  if (!(o.hedge_budget >= 0.0 && o.hedge_budget <= 1.0)) {
    throw std::invalid_argument("DatabaseOptions::hedge_budget must be within [0, 1]");
  }
  if (o.hedge_min_delay <= Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::hedge_min_delay must be greater than zero");
  }
  if (o.slow_copy_floor < Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::slow_copy_floor must not be negative");
  }
  if (!(o.slow_copy_factor >= 1.0)) {
    throw std::invalid_argument("DatabaseOptions::slow_copy_factor must be at least 1");
  }
  if (o.slow_copy_probe_every <= Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::slow_copy_probe_every must be greater than zero");
  }
  if (o.max_replica_lag <= Duration::zero()) {
    throw std::invalid_argument("DatabaseOptions::max_replica_lag must be greater than zero");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// What database.cpp, calls.cpp and transaction.cpp share

void detail::Marks::apply(Connection& conn, std::size_t failed) const {
  for (std::size_t i = 0; i < size; ++i) {
    if (failed > step[i]) ConnectionAccess::mark_prepared(conn, id[i]);
  }
}

std::size_t detail::add_statement(Steps& steps, Connection& conn, std::string_view sql,
                                  std::string_view name, std::uint32_t id,
                                  std::span<const Param> params, Marks& marks) {
  if (name.empty()) return steps.add(Step{Step::Kind::kQuery, sql, {}, params});
  if (!ConnectionAccess::is_prepared(conn, id)) {
    marks.step[marks.size] = steps.add(Step{Step::Kind::kPrepare, sql, name, params});
    marks.id[marks.size++] = id;
  }
  return steps.add(Step{Step::Kind::kPrepared, {}, name, params});
}

Status detail::nothing_applied(Status s) {
  Fault f = s.fault();
  f.outcome = Outcome::kNotApplied;
  s.with_fault(f);
  return s;
}

Status in_transaction(Status s) {
  if (s.ok() || s.txn_state() != TxnState::kNotInTransaction) return s;
  Fault f = s.fault();
  if (f.scope != RetryScope::kNone) f.scope = RetryScope::kTransaction;
  f.outcome = Outcome::kNotApplied;
  s.with_fault(f);
  s.with_txn_state(TxnState::kRolledBack);
  return s;
}

bool detail::pooler_refused(PooledConnection& lease, Status& s) {
  if (!pooler_cannot_reach_server(s.sqlstate(), s.message())) return false;
  s = lease.server_unreachable(std::move(s));
  return true;
}

Status detail::left_demoted_primary(PooledConnection& lease, Pool& writes, Status s,
                                    RetryScope scope) {
  lease.discard();
  writes.drop_idle();
  s.with_fault(Fault{scope, Outcome::kNotApplied, Pace::kFast, false});
  return s.annotate(
      "the server is read-only (a demoted primary?); nothing was applied and the writer is "
      "looked for again");
}

Status detail::refused(std::string_view what, const SqlClass& c) {
  Status s(Code::kInvalidArgument, std::string(what) + c.explain());
  s.with_sqlstate("");
  return s;
}

std::uint64_t detail::wal_position(const Rows& rows, int col) noexcept {
  if (rows.is_null(0, col)) return 0;
  Result<Lsn> lsn = Lsn::parse(rows.text(0, col));
  return lsn.ok() ? lsn->value : 0;
}

std::uint32_t detail::wal_timeline(const Rows& rows, int col) noexcept {
  if (col >= rows.columns() || rows.is_null(0, col)) return 0;
  const std::string_view text = rows.text(0, col);
  std::uint32_t timeline = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), timeline, 16);
  return r.ec == std::errc() && r.ptr == text.data() + text.size() ? timeline : 0;
}

using detail::refused;

// ---------------------------------------------------------------------------------------
// Construction

Database::Impl::Impl(DatabaseOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &Clock::system()) {
  validate(options_);
  hedges_ = std::make_unique<detail::HedgeBudget>(options_.hedge_budget);
  several_hosts_ = detail::ConnectionAccess::host_count(options_.url) > 1;
  primary_ = make_endpoint(options_.name, options_.url, true);
  for (std::size_t i = 0; i < options_.replica_urls.size(); ++i) {
    replicas_.push_back(make_endpoint(options_.name + "-replica-" + std::to_string(i + 1),
                                      options_.replica_urls[i], false));
  }
  if (options_.pooling == Pooling::kTransaction) {
    for (const auto& [name, value] : options_.settings) {
      setting_params_.emplace_back(name);
      setting_params_.emplace_back(value);
    }
  }
  read_prefix_ = make_prefix(kReadHead, kReadPrefixId, "holdfast_read");
  replica_prefix_ = make_prefix(kReplicaHead, kReplicaPrefixId, "holdfast_replica_read");
  write_prefix_ = make_prefix(kWriteHead, kWritePrefixId, "holdfast_write");
  begin_prefix_ = make_prefix(kBeginHead, kBeginPrefixId, "holdfast_begin");
  const std::string& t = options_.idempotency_table;
  claim_sql_ = "INSERT INTO " + t + " (key) VALUES ($1) ON CONFLICT (key) DO NOTHING";
  // A repeat reads the key's result by writing its row again, unchanged, so that its COMMIT
  // is a write: with synchronous replication it waits for the standby as the first one did
  // (ADR 0053), and its position is the request's own write for its reads.
  recorded_sql_ = "UPDATE " + t + " SET result = result WHERE key = $1 RETURNING result";
  record_sql_ = "UPDATE " + t + " SET result = $2 WHERE key = $1";
  if (options_.lost_writes.remember > 0) {
    // The checker's own connections reach the writer as the write pool's do.
    ConnectOptions check;
    check.conninfo = options_.url;
    check.application_name = options_.application_name;
    if (options_.pooling == Pooling::kSession) check.settings = options_.settings;
    check.connect_timeout = options_.connect_timeout;
    check.clock = clock_;
    ConnectionAccess::ask_for_writer(check);
    lost_ = std::make_unique<detail::LostWrites>(options_.lost_writes, std::move(check),
                                                 options_.idempotency_table, timeline_,
                                                 primary_->shield->metrics(), *clock_);
  }
}

LostWritesReport Database::Impl::lost_writes() const {
  return lost_ != nullptr ? lost_->report() : LostWritesReport{};
}

Database::Impl::~Impl() {
  // The driver's own threads go first, while everything they use is still there: the health
  // probe's (it connects through the pools, and a connect reports to the Liveness), the
  // Liveness's (it uses the pools and Shields), then the pools' connect threads (their
  // connects report to the Liveness too). Only then may the Liveness go.
  auto stop = [](Endpoint& e) {
    e.probe.reset();
    if (e.liveness != nullptr) e.liveness->stop();
    e.reads.reset();
    e.writes.reset();
    if (e.watch != nullptr) e.watch->liveness.store(nullptr, std::memory_order_release);
  };
  lost_.reset();  // its thread connects on its own, and counts in the primary's metrics
  for (auto& r : replicas_)
    stop(*r);
  if (primary_ != nullptr) stop(*primary_);
}

Database::Impl::Prefix Database::Impl::make_prefix(std::string_view head, std::uint32_t id,
                                                   std::string_view name) const {
  Prefix p;
  p.sql = std::string(head);
  if (options_.pooling == Pooling::kTransaction) {
    // Unnamed: another transaction may run on another server session. The settings are
    // set here, in every transaction, instead of at connect.
    for (std::size_t i = 0; i < options_.settings.size(); ++i) {
      p.sql += ", pg_catalog.set_config($" + std::to_string(2 + 2 * i) + ", $" +
               std::to_string(3 + 2 * i) + ", true)";
    }
    return p;
  }
  p.name = std::string(name);
  p.id = id;
  return p;
}

std::unique_ptr<Database::Impl::Endpoint> Database::Impl::make_endpoint(std::string name,
                                                                        const std::string& url,
                                                                        bool primary) {
  auto e = std::make_unique<Endpoint>();
  e->name = std::move(name);
  e->shield = std::make_unique<Shield>(e->name, options_.shield, *clock_);
  detail::SlowCopyRule rule;
  rule.floor = options_.slow_copy_floor;
  rule.factor = options_.slow_copy_factor;
  rule.probe_every = options_.slow_copy_probe_every;
  e->copy = std::make_unique<detail::CopyState>(rule);
  const Duration window = e->shield->reads().window();

  PoolOptions po;
  po.connect.conninfo = url;
  po.connect.application_name = options_.application_name;
  // A transaction pooler refuses settings at connect (and could not keep them per session).
  if (options_.pooling == Pooling::kSession) po.connect.settings = options_.settings;
  po.connect.connect_timeout = options_.connect_timeout;
  po.connect.clock = clock_;
  if (primary) ConnectionAccess::ask_for_writer(po.connect);
  if (options_.silence_after > Duration::zero()) {
    e->watch = std::make_shared<detail::ServerWatch>();
    po.connect.watch = e->watch;
  }
  po.reconnect_backoff = options_.reconnect_backoff;
  po.window = window;
  po.size = options_.read_connections;
  e->reads = std::make_unique<Pool>(po);
  if (primary) {
    po.size = options_.write_connections;
    e->writes = std::make_unique<Pool>(po);
  }
  if (options_.health_probe_interval > Duration::zero()) {
    Endpoint* ep = e.get();
    Clock* clock = clock_;
    const Duration max_lag = options_.max_replica_lag;
    e->probe = std::make_unique<HealthProbe>(
        e->shield->breaker(),
        [ep, clock, primary, max_lag]() -> Status {
          const TimePoint deadline = clock->now() + kProbeTimeout;
          Result<PooledConnection> lease = ep->reads->acquire_for_probe(deadline);
          if (!lease.ok()) return lease.status();
          (*lease)->set_deadline(deadline);
          Result<Rows> r =
              ConnectionAccess::query_unchecked(**lease, primary ? "SELECT 1" : kReplicaProbe, {});
          if (!r.ok()) {
            Status failed = r.status();
            if (!detail::pooler_refused(*lease, failed) && !(*lease)->is_open()) {
              lease->discard();
            }
            return failed;
          }
          if (primary) {
            // A connect to the server worked: the writes pool's may go ahead, too.
            if (lease->fresh() && ep->writes != nullptr) ep->writes->server_answered();
            return Status();
          }
          if (r->text(0, 2) != "t") {
            // Not in recovery: no replica (a promoted standby). This session and its idle
            // siblings to that host go, so the next probe connects through the host list.
            ep->reads->drop_idle_to(**lease);
            lease->discard();
            return detail::not_a_replica(ep->name);
          }
          // A replica is healthy only when its replay keeps up, judged as its reads judge it.
          return replay_lag_status(*ep, detail::wal_position(*r, 0), detail::wal_position(*r, 1),
                                   clock->now(), max_lag);
        },
        HealthProbe::Options{options_.health_probe_interval, true});
  }
  if (e->watch != nullptr) {
    ConnectOptions check = po.connect;
    check.watch = nullptr;
    Endpoint* ep = e.get();
    Liveness::Options lo;
    // Each wait's own quiet time, without doubling, as asio::pg::Client judges (ADR 0059).
    lo.suspect_after = options_.silence_after;
    lo.suspect_max = lo.suspect_after;
    lo.check_timeout = options_.silence_check_timeout;
    lo.each_wait = true;
    e->liveness = std::make_unique<Liveness>(
        *e->shield,
        [check](TimePoint deadline) { return ConnectionAccess::check_server(check, deadline); },
        [ep](bool silent) {
          ep->watch->set_silent(silent);
          // Idle connections reach the host that went silent (or one of several that did):
          // none is handed out again. When the silence ends, the next connects find the host
          // that answers now (after a failover, another one).
          ep->reads->drop_idle();
          if (ep->writes != nullptr) ep->writes->drop_idle();
          if (silent) {
            ep->reads->wake_waiters();
            if (ep->writes != nullptr) ep->writes->wake_waiters();
          }
        },
        lo);
    e->watch->liveness.store(e->liveness.get(), std::memory_order_release);
  }
  return e;
}

// ---------------------------------------------------------------------------------------
// What every call does

TimePoint Database::Impl::connect_deadline(Duration cap) const {
  const RetryWindow* w = RequestScope::current_window();
  const Duration left = w != nullptr ? w->remaining() : options_.connect_timeout;
  return clock_->now() + std::min({left, options_.connect_timeout, cap});
}

void Database::Impl::open_request_window() const {
  // PostgreSQL does not tell a client that its statement waits for a lock (nor a pool
  // wait from a slow server), so the window opens when the request first goes to the
  // database (SQLite's opens when its busy handler first waits). Opened at the first
  // failure instead, a statement stuck behind a lock could spend a whole window and its
  // retry a second one.
  RetryWindow* w = RequestScope::current_window();
  if (w != nullptr && !w->is_open()) w->open(clock_->now());
}

Result<PooledConnection> Database::Impl::lease(Pool& pool, bool may_wait,
                                               Duration connect_at_most) {
  open_request_window();
  Result<PooledConnection> lease =
      may_wait ? pool.acquire() : pool.try_acquire(connect_deadline(connect_at_most));
  if (lease.ok() && lease->fresh()) {
    standard_strings_.store((*lease)->standard_conforming_strings(), std::memory_order_relaxed);
  }
  return lease;
}

std::size_t Database::Impl::add_prefix(detail::CallPipeline& p, Connection& conn,
                                       const Prefix& prefix) const {
  const TimePoint now = clock_->now();
  const RetryWindow* w = RequestScope::current_window();
  const Duration left = w != nullptr ? w->remaining(now) : primary_->shield->reads().window();
  conn.set_deadline(now + left + kClientGrace);
  p.timeout = Param(statement_timeout_text(left, p.timeout_ms).data());
  std::span<const Param> params(&p.timeout, 1);
  if (!setting_params_.empty()) {
    p.more.clear();
    p.more.push_back(p.timeout);
    p.more.insert(p.more.end(), setting_params_.begin(), setting_params_.end());
    params = p.more;
  }
  return detail::add_statement(p.steps, conn, prefix.sql, prefix.name, prefix.id, params, p.marks);
}

std::size_t Database::Impl::add_work(detail::CallPipeline& p, Connection& conn,
                                     const Work& work) const {
  const bool named = work.stmt != nullptr && options_.pooling == Pooling::kSession;
  return detail::add_statement(p.steps, conn, work.sql,
                               named ? work.stmt->name_ : std::string_view(),
                               named ? work.stmt->id_ : 0, work.params, p.marks);
}

// ---------------------------------------------------------------------------------------
// Statements

Result<Statement> Database::Impl::prepare(std::string_view sql) {
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

bool Database::Impl::silent() const noexcept {
  return primary_->liveness != nullptr && primary_->liveness->silent();
}

std::uint64_t Database::Impl::silence_checks() const noexcept {
  return primary_->liveness != nullptr ? primary_->liveness->checks() : 0;
}

bool Database::Impl::replica_silent(std::size_t i) const {
  const Endpoint& e = *replicas_.at(i);
  return e.liveness != nullptr && e.liveness->silent();
}

Status Database::Impl::run_primary(Operation op, holdfast::detail::AttemptRef attempt,
                                   RetryStats* stats) {
  return run(*primary_, primary_->shield->policy_for(op), op, attempt, stats);
}

}  // namespace holdfast::pg
