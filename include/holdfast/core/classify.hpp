/// @file
/// Fault classification: pure, table-driven functions from a native error to a Fault.
///
/// They take codes and messages, never driver handles, so they are shared by the drivers,
/// the tests and the simulator, and every row is documented in docs/faults.md.
///
/// @code
///   classify_sqlite(5)           -> UNAVAILABLE, statement / not applied / fast / overload
///   classify_sqlstate("40001")   -> ABORTED, transaction / not applied / fast
///   classify_sqlstate("")        -> connection lost without a SQLSTATE: reconnect / unknown
///   classify_d1("D1 DB is overloaded. Requests queued for too long.")
/// @endcode
///
/// Unknown codes fall back to their primary code (SQLite) or class (PostgreSQL), and an
/// unknown class is permanent: a fault is only retried when we know retrying helps.
#pragma once

#include <span>
#include <string_view>

#include "holdfast/core/fault.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast {

/// What the classifier decided for one native error.
struct Classification {
  /// The canonical code of the error.
  Code code = Code::kUnknown;
  /// The facts that drive retries and breakers.
  Fault fault;
  std::string_view name;  ///< "SQLITE_BUSY_SNAPSHOT", "serialization_failure", ...
};

/// SQLite: any primary or extended result code.
[[nodiscard]] Classification classify_sqlite(int extended_code) noexcept;
/// PostgreSQL: a five-character SQLSTATE; "" means the connection was lost and no SQLSTATE
/// was received.
[[nodiscard]] Classification classify_sqlstate(std::string_view sqlstate) noexcept;
/// PostgreSQL: a connection attempt that failed without a SQLSTATE (refused, unreachable).
[[nodiscard]] Classification classify_pg_connect_failure() noexcept;
/// Cloudflare D1: by the error message ("D1 DB is overloaded", "SQLITE_BUSY", ...).
[[nodiscard]] Classification classify_d1(std::string_view message) noexcept;

/// A Status for a SQLite error, classified, carrying its extended result code.
[[nodiscard]] Status sqlite_status(int extended_code, std::string_view message);
/// A Status for a PostgreSQL error, classified, carrying its SQLSTATE (see
/// pooler_cannot_reach_server()).
[[nodiscard]] Status postgres_status(std::string_view sqlstate, std::string_view message);
/// True for a refusal PgBouncer sends itself because it cannot reach the server (SQLSTATE
/// 08P01 with "server login has been failing" or "pgbouncer cannot connect to server"):
/// the pooler answered, the server is away. postgres_status() classifies it like a refused
/// connect (08001); a driver behind a pooler treats it as one.
[[nodiscard]] bool pooler_cannot_reach_server(std::string_view sqlstate,
                                              std::string_view message) noexcept;
/// A Status for a Cloudflare D1 error message, classified.
[[nodiscard]] Status d1_status(std::string_view message);

/// One row of the SQLite table (sqlite_fault_table()).
struct SqliteFaultRow {
  /// The primary or extended result code.
  int code;
  /// Its name in sqlite3.h ("SQLITE_BUSY_SNAPSHOT").
  std::string_view name;
  /// The canonical code it maps to.
  Code canonical;
  /// What it means for retries and breakers.
  Fault fault;
};
/// One row of the PostgreSQL table (sqlstate_fault_table()).
struct SqlstateFaultRow {
  std::string_view sqlstate;  ///< five characters for one state, two for a whole class
  /// The condition name ("serialization_failure").
  std::string_view name;
  /// The canonical code it maps to.
  Code canonical;
  /// What it means for retries and breakers.
  Fault fault;
};
/// One row of the D1 table (d1_fault_table()).
struct D1FaultRow {
  std::string_view needle;  ///< matched case-insensitively anywhere in the message
  /// The canonical code it maps to.
  Code canonical;
  /// What it means for retries and breakers.
  Fault fault;
};
/// The tables themselves (for documentation and tests): the SQLite result codes.
[[nodiscard]] std::span<const SqliteFaultRow> sqlite_fault_table() noexcept;
/// The PostgreSQL SQLSTATEs and classes.
[[nodiscard]] std::span<const SqlstateFaultRow> sqlstate_fault_table() noexcept;
/// The D1 message fragments.
[[nodiscard]] std::span<const D1FaultRow> d1_fault_table() noexcept;

}  // namespace holdfast
