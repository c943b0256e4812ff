/// @file
/// How a pg::Database reaches its servers (DatabaseOptions) and how one call runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "holdfast/core/duration.hpp"
#include "holdfast/core/operation.hpp"
#include "holdfast/core/retry_policy.hpp"
#include "holdfast/core/shield_options.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast {
class Clock;   // holdfast/core/clock.hpp
class Logger;  // holdfast/log/logger.hpp
}  // namespace holdfast

namespace holdfast::pg {

namespace detail {
// PoolOptions::reconnect_backoff's default (pool.cpp), so this header needs no pool.hpp.
Backoff pool_reconnect_backoff();
}  // namespace detail

/// What each pooled connection of a Database reaches.
enum class Pooling : std::uint8_t {
  /// PostgreSQL itself, or a pooler in session mode: statements are prepared once per
  /// connection; `settings` are sent at connect.
  kSession,
  /// A pooler in transaction mode (PgBouncer's pool_mode = transaction): statements are sent
  /// unnamed, and `settings` are set inside every transaction (SET LOCAL).
  kTransaction,
};

/// How a Database watches for confirmed writes a change of writer lost (what it finds:
/// holdfast/pg/lost_writes.hpp).
struct LostWritesOptions {
  /// How many confirmed writes are remembered (a ring, allocated once when the Database is
  /// made: about 150 bytes each). 0 turns the check off.
  std::size_t remember = 4096;
  /// Writes confirmed this long before a change of writer are checked; older ones are not
  /// (a failover that loses writes loses the last few seconds'). REQUIRES: > 0.
  Duration horizon = std::chrono::seconds(60);
  /// One check's deadline (a connection of its own); a failed check is tried again a second
  /// later, up to `check_attempts` times. REQUIRES: > 0.
  Duration check_timeout = std::chrono::seconds(5);
  /// Tries of one check. REQUIRES: >= 1.
  int check_attempts = 10;
  /// Where the ERROR and WARN lines go (context "pg.lost_writes"). nullptr: a console logger
  /// of the library's own (stderr). REQUIRES: outlives the Database.
  Logger* logger = nullptr;
};

/// How a Database reaches its servers, and answers while they are away. Validated when it opens.
struct DatabaseOptions {
  /// The primary: a connection URL or key=value keywords. REQUIRES: not empty.
  std::string url{};
  /// Read replicas (streaming standbys), read in turn (the next if one cannot answer). A URL may
  /// name several hosts with target_session_attrs=standby: a promoted one is left for a standby.
  std::vector<std::string> replica_urls{};
  /// Names the Shields ("pg", "pg-replica-1", ...) and so the metrics.
  std::string name = "pg";
  /// Pool sizes. The primary has both pools, a replica only a read pool. REQUIRES: >= 1.
  int read_connections = 4;
  int write_connections = 4;  ///< the primary's write pool; REQUIRES: >= 1
  /// pg_stat_activity.application_name of every connection.
  std::string application_name = "holdfast";
  /// More settings for every call ({"lock_timeout", "2s"}): sent at connect, or with
  /// Pooling::kTransaction set inside each transaction.
  std::vector<std::pair<std::string, std::string>> settings{};
  /// What the URLs reach. The replicas' too.
  Pooling pooling = Pooling::kSession;
  /// A replica that has not replayed WAL it received this long ago (replay paused, or too
  /// slow) is unhealthy: its reads go to the primary and count as failures for its breaker.
  /// Measured from what the replica reports with each read. REQUIRES: > 0.
  Duration max_replica_lag = std::chrono::seconds(1);
  /// Breaker, throttle and retry policies; each endpoint gets a Shield built from these.
  ShieldOptions shield{};
  /// Cap on one connection attempt (the window may shorten it).
  Duration connect_timeout = std::chrono::seconds(5);
  /// Delay between failed connects of a pool (PoolOptions::reconnect_backoff).
  Backoff reconnect_backoff = detail::pool_reconnect_backoff();
  /// > 0: a background HealthProbe per endpoint at this interval while its breaker is open:
  /// SELECT 1 on the primary; on a replica its replay positions, healthy only within
  /// max_replica_lag and while it is in recovery. 0: none (requests probe when the open
  /// period ends).
  Duration health_probe_interval = Duration::zero();
  /// Silence (ADR 0023, 0059): a wait on a server that heard nothing from it this long starts
  /// a check (SELECT 1 on a connection of its own); no answer within silence_check_timeout
  /// finds the server silent, and its calls are answered at once until a check is answered.
  /// A slow server that answers anything is never silent. Zero turns the watch off. >= 0.
  Duration silence_after = std::chrono::milliseconds(500);
  /// what the silence check may take; > 0 when silence_after > 0
  Duration silence_check_timeout = std::chrono::milliseconds(500);
  /// Hedged reads (ADR 0041): a replica read not answered within the replica's p95 (at least
  /// hedge_min_delay) is also sent to the primary when it has room; the first answer wins.
  /// Each replica read earns hedge_budget of a hedge (at most 10 saved). Writes are never
  /// hedged. 0 turns hedging off. REQUIRES: 0 <= hedge_budget <= 1.
  double hedge_budget = 0.02;
  /// The least a replica read waits before it is hedged. REQUIRES: > 0.
  Duration hedge_min_delay = std::chrono::milliseconds(5);
  /// A replica answer slower than slow_copy_factor x the primary's recent read latency and
  /// than slow_copy_floor is slow. After 3 in a row the replica gets only a probe read every
  /// slow_copy_probe_every until 2 in a row are fast (ADR 0041). 0 turns it off. >= 0.
  Duration slow_copy_floor = std::chrono::milliseconds(20);
  double slow_copy_factor = 4.0;  ///< see slow_copy_floor
  /// how often an ejected replica gets a probe read; see slow_copy_floor
  Duration slow_copy_probe_every = std::chrono::milliseconds(200);
  /// The idempotency-key table used by once(). A plain or schema-qualified identifier.
  std::string idempotency_table = "holdfast_idempotency";
  /// The clock of the pools and Shields. nullptr: Clock::system().
  Clock* clock = nullptr;
  /// The watch for confirmed writes a change of writer lost (ADR 0036).
  LostWritesOptions lost_writes{};
};

/// The same name as the SQLite driver's: holdfast::pg::Options.
using Options = DatabaseOptions;

/// The isolation level of a transaction() (BEGIN ISOLATION LEVEL ...).
enum class Isolation : std::uint8_t {
  kDefault,         ///< the session's default
  kReadCommitted,   ///< READ COMMITTED
  kRepeatableRead,  ///< REPEATABLE READ
  kSerializable     ///< SERIALIZABLE
};

/// What happened inside one transaction() call (for callers and tests that want to know).
struct TransactionReport {
  int runs = 0;              ///< times the function was called
  int commits_in_doubt = 0;  ///< COMMITs that lost their connection
  /// What the last doubt resolved to: kCommitted, kRolledBack or kUnknown
  /// (kNotInTransaction while no COMMIT was in doubt).
  TxnState resolution = TxnState::kNotInTransaction;
  RetryStats retry;  ///< attempts, time slept and why the retry loop stopped
};

/// How one transaction() runs.
struct TransactionOptions {
  /// Operation::transaction(true): the function may be called again after a rollback.
  Operation operation = Operation::transaction(false, "pg.transaction");
  Isolation isolation = Isolation::kDefault;  ///< the transaction's isolation level
  /// BEGIN ... READ ONLY, on a read-only session of the primary.
  bool read_only = false;
  /// Filled in when not null.
  TransactionReport* report = nullptr;
};

/// How one read() runs; the defaults are the Database's.
struct ReadOptions {
  /// Names the read (retry lines); a read is idempotent, whatever `operation` says.
  Operation operation = Operation::read("pg.read");
  /// The retry schedule instead of DatabaseOptions::shield.reads, for instance
  /// RetryPolicy::session_reads() for a session lookup. Its window applies only outside a
  /// RequestScope. REQUIRES: outlives the call.
  const RetryPolicy* policy = nullptr;
  /// Filled in when not null: attempts on every endpoint (a read refused with 25006 and sent
  /// once more on the write path counts both), time slept, why it stopped.
  RetryStats* stats = nullptr;
};

}  // namespace holdfast::pg
