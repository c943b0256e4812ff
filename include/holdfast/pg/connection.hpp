/// @file
/// holdfast::pg::Connection: a thin RAII wrapper over one libpq connection.
///
/// @code
///   auto conn = holdfast::pg::Connection::open("postgresql://app@127.0.0.1:5432/app");
///   if (!conn) return conn.status();
///   auto rows = conn->query("SELECT name FROM court WHERE id = $1", {court_id});
///   if (rows) std::string_view name = rows->text(0, 0);
/// @endcode
///
/// - Extended protocol only: every statement is sent with its parameters apart from the SQL
///   (PQsendQueryParams / PQsendPrepare / PQsendQueryPrepared). A string with more than one
///   statement is refused before anything is sent.
/// - Parameters are typed C++ values (Param, param.hpp); results are read as text or typed
///   values (Rows, rows.hpp).
/// - Notices (and a FATAL that arrives while the connection is idle) are captured on the
///   connection, never printed to stderr.
/// - A lost connection is detected from the connection status, not only from a SQLSTATE; the
///   FATAL behind it is read by draining every result, so a terminated backend reports 57P01
///   rather than a bare "server closed the connection". Errors become Status values through
///   holdfast::postgres_status(), connection failures through classify_pg_connect_failure().
/// - Every wait on the server is bounded by the connection's deadline (set_deadline()): past
///   it the statement is cancelled, and if the server does not answer the cancel either, the
///   connection is closed and the Status says the outcome is unknown.
///
/// Thread safety: a Connection is used by one thread at a time. Move-only.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/pg/param.hpp"
#include "holdfast/pg/rows.hpp"

/// The PostgreSQL driver: connections, a pool, the database with its read and write paths,
/// and the logs table (see pg.hpp).
namespace holdfast::pg {

namespace detail {
struct ConnectionAccess;
}

/// A message the server sent besides results (NOTICE, WARNING, ..., or a FATAL that arrived
/// while the connection was idle).
struct Notice {
  std::string severity;  ///< "NOTICE", "WARNING", "FATAL", ... (not localized)
  std::string sqlstate;  ///< the SQLSTATE, e.g. "01000" for a warning
  std::string message;   ///< the primary message (translated when lc_messages says so)
  /// The server's function that sent it, e.g. "SyncRepWaitForLSN" (not localized).
  std::string routine;
};

/// Whether `notice` is PostgreSQL's WARNING that a COMMIT stopped waiting for its synchronous
/// standbys: a cancel ("canceling wait for synchronous replication", SQLSTATE 01000) or a
/// termination of its backend ended the wait. The transaction committed on the primary, and
/// no standby confirmed it. Recognized by the function the server names (SyncRepWaitForLSN),
/// whatever the language of its message, or by the English message.
[[nodiscard]] bool is_standby_wait_cancelled(const Notice& notice) noexcept;

/// The failure both drivers answer for a COMMIT that PostgreSQL answered so: the outcome is
/// unknown (TxnState::kUnknown, Outcome::kUnknown) and no retry can change it (the write is
/// on the primary; a failover before a standby receives it loses it), so a write confirmed
/// to its caller is always one the synchronous standbys have.
[[nodiscard]] Status unconfirmed_commit();

/// What libpq says of the session's transaction.
enum class TxnStatus : std::uint8_t {
  kIdle,           ///< no transaction open
  kActive,         ///< a statement is running
  kInTransaction,  ///< inside a transaction block
  kInError,        ///< inside a failed transaction block: only ROLLBACK helps
  kUnknown,        ///< the connection is bad
};

namespace detail {
struct ServerWatch;  // src/pg/server_watch.hpp
}  // namespace detail

/// How Connection::open() connects.
struct ConnectOptions {
  /// A connection URL ("postgresql://app@127.0.0.1:5432/app?sslmode=disable") or key=value
  /// keywords ("host=127.0.0.1 port=5432 dbname=app").
  std::string conninfo;
  /// More keywords; they override the conninfo's ({"sslmode", "disable"}).
  std::vector<std::pair<std::string, std::string>> keywords;
  /// Shown in pg_stat_activity. Empty: whatever the conninfo says.
  std::string application_name;
  /// Server settings for the session, sent with the startup packet so they cost no round
  /// trip ({"lock_timeout", "2s"}). They replace an `options` keyword of the conninfo.
  std::vector<std::pair<std::string, std::string>> settings;
  /// Cap on one connection attempt; the caller's deadline may shorten it.
  Duration connect_timeout = std::chrono::seconds(5);
  /// With several hosts (a multi-host URL, "postgresql://h1:5432,h2:5432/app?
  /// target_session_attrs=read-write"): the most one host may take before the next is tried
  /// (the last one tried gets whatever is left), so that a host that accepts connections and
  /// never answers (a frozen primary) is skipped. The host that answered last is tried first;
  /// a host that a liveness check found silent is tried last, and gets no more than this.
  Duration host_connect_timeout = std::chrono::seconds(1);
  /// Reads the deadlines. nullptr: Clock::system().
  Clock* clock = nullptr;
  /// TCP keepalives and tcp_user_timeout, so that the kernel notices a peer that died or a
  /// network that dropped (not only our deadlines): keepalives after `keepalive_idle`
  /// without traffic, every `keepalive_interval`, `keepalive_count` unanswered ones end the
  /// connection; data unacknowledged for `tcp_user_timeout` ends it too. The conninfo's own
  /// keepalives* / tcp_user_timeout keywords win. Zero idle: libpq's defaults (the kernel's).
  Duration keepalive_idle = std::chrono::seconds(10);
  /// between keepalives (see keepalive_idle)
  Duration keepalive_interval = std::chrono::seconds(2);
  int keepalive_count = 3;  ///< unanswered keepalives that end the connection
  /// unacknowledged data this long ends the connection
  Duration tcp_user_timeout = std::chrono::seconds(10);
  /// Set by pg::Database: the server's liveness watch (DESIGN.md §10). Leave it empty.
  std::shared_ptr<detail::ServerWatch> watch;
};

/// One conninfo that reaches any of `conninfos` (URLs or key=value conninfos, each of one or
/// more hosts): every host and port of them in one multi-host list, in their order, and the
/// rest of the settings they share; tried as a multi-host conninfo is (one host at a time,
/// from the one that answered last). For example several standbys for one pool:
/// asio::pg::ClientOptions::standby. INVALID_ARGUMENT when `conninfos` is empty, one of them
/// cannot be parsed, or one differs from the first in anything but its hosts and ports (the
/// setting is named, its value is not: it may be a password).
[[nodiscard]] Result<std::string> any_of(std::span<const std::string> conninfos);

/// One libpq connection (see the top of this file). Move-only; used by one thread at a time.
class Connection {
 public:
  /// A closed connection.
  Connection() noexcept;
  /// Takes over the connection; the moved-from one is closed.
  Connection(Connection&&) noexcept;
  /// Closes this connection, then takes over `other`'s.
  Connection& operator=(Connection&&) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  /// Connects, waiting no later than `deadline` nor longer than options.connect_timeout.
  /// On failure the Status carries the server's SQLSTATE when it sent one (53300 too many
  /// connections, 57P03 starting up, 28P01 authentication, ...), otherwise it is classified
  /// by classify_pg_connect_failure() (refused, unreachable, timed out).
  static Result<Connection> open(const ConnectOptions& options,
                                 TimePoint deadline = TimePoint::max());
  /// open() with just a conninfo and the default options, no deadline.
  static Result<Connection> open(std::string_view conninfo);

  /// True while the connection is up as far as libpq knows (no I/O).
  [[nodiscard]] bool is_open() const noexcept;

  /// Runs one statement. REQUIRES: `sql` holds exactly one statement (else
  /// INVALID_ARGUMENT, nothing is sent).
  Result<Rows> query(std::string_view sql, std::span<const Param> params = {});
  /// query() with a braced list of parameters.
  Result<Rows> query(std::string_view sql, std::initializer_list<Param> params) {
    return query(sql, std::span<const Param>(params.begin(), params.size()));
  }
  /// Prepares `sql` under `name` on this connection. `params` give the parameter types
  /// (their values are ignored); fewer than the statement needs leaves the rest inferred.
  Status prepare(std::string_view name, std::string_view sql, std::span<const Param> params = {});
  /// Runs a statement prepared on this connection.
  Result<Rows> query_prepared(std::string_view name, std::span<const Param> params = {});
  /// query_prepared() with a braced list of parameters.
  Result<Rows> query_prepared(std::string_view name, std::initializer_list<Param> params) {
    return query_prepared(name, std::span<const Param>(params.begin(), params.size()));
  }

  /// A cheap health check for an idle connection (no round trip): reads whatever the server
  /// sent while it was idle. False when the connection is gone, the server sent a FATAL
  /// (a terminated backend), a transaction is left open, or (a host of several) a check
  /// found its host silent while another host answered.
  [[nodiscard]] bool check() noexcept;

  /// Statements sent after this wait on the server no later than `deadline` (plus a short
  /// grace for the cancel). TimePoint::max(): no deadline.
  void set_deadline(TimePoint deadline) noexcept;
  /// SET statement_timeout for the session (statement_timeout_text(): at least 1 ms).
  Status set_statement_timeout(Duration timeout);
  /// Same, but only when the session's value differs from `timeout` by more than
  /// max(20 ms, 10%): a call per statement costs nothing while the window is steady.
  Status ensure_statement_timeout(Duration timeout);
  /// The session's statement_timeout as far as this object knows; negative when unknown.
  [[nodiscard]] Duration statement_timeout() const noexcept;

  /// The session's transaction status; kUnknown without a connection.
  [[nodiscard]] TxnStatus txn_status() const noexcept;
  /// The server process id of the session; 0 without a connection.
  [[nodiscard]] int backend_pid() const noexcept;
  /// A setting the server reports (GUC_REPORT): "server_version", "application_name",
  /// "default_transaction_read_only", ... Empty when unknown.
  [[nodiscard]] std::string_view server_parameter(const char* name) const noexcept;
  /// Whether the server reports standard_conforming_strings on (anything but "off").
  [[nodiscard]] bool standard_conforming_strings() const noexcept;

  /// Notices received and not yet taken (the last 32 at most), oldest first.
  std::vector<Notice> take_notices();
  /// How many notices this connection has received in all.
  [[nodiscard]] std::uint64_t notices_received() const noexcept;
  /// Whether a notice received after the first `since` of notices_received() (those still
  /// kept) is is_standby_wait_cancelled(). No allocation.
  [[nodiscard]] bool standby_wait_cancelled(std::uint64_t since) const noexcept;

  /// Closes now (also done by the destructor).
  void close() noexcept;

 private:
  friend struct detail::ConnectionAccess;
  struct Impl;
  explicit Connection(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

/// The value of statement_timeout for `timeout`, as every driver of holdfast sends it: whole
/// milliseconds, rounded up, at least 1 (0 would mean no limit), written into `buf` with a NUL
/// after it. The view does not include the NUL.
std::string_view statement_timeout_text(Duration timeout, char (&buf)[24]) noexcept;

}  // namespace holdfast::pg
