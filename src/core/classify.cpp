// The fault tables. docs/faults.md explains each row; tests check every one, and check the
// SQLite numbers against sqlite3.h.
#include "holdfast/core/classify.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace holdfast {
namespace {

constexpr RetryScope kNone = RetryScope::kNone;
constexpr RetryScope kStmt = RetryScope::kStatement;
constexpr RetryScope kTxn = RetryScope::kTransaction;
constexpr RetryScope kConn = RetryScope::kReconnect;
constexpr Outcome kNA = Outcome::kNotApplied;
constexpr Outcome kUnk = Outcome::kUnknown;
constexpr Pace kFast = Pace::kFast;
constexpr Pace kSlow = Pace::kSlow;

// Permanent: bad input, broken file, missing permission. Retrying cannot help.
constexpr Fault kPermanent{kNone, kNA, kFast, false};
// Permanent, and a write that failed this way may or may not have been applied.
constexpr Fault kPermanentUnknown{kNone, kUnk, kFast, false};
// Lock contention: the holder will let go; nothing was applied; evidence of load.
constexpr Fault kLockContention{kStmt, kNA, kFast, true};
// A race the engine asks us to re-run the statement for; not load.
constexpr Fault kStatementRace{kStmt, kNA, kFast, false};
// The transaction was rolled back (or must be): re-run all of it; not load.
constexpr Fault kTxnConflict{kTxn, kNA, kFast, false};
// The database is overloaded or short of resources: back off; nothing was applied.
constexpr Fault kOverloaded{kStmt, kNA, kSlow, true};
// Overloaded, and the attempt may have been applied (storage reset mid-operation).
constexpr Fault kOverloadedUnknown{kStmt, kUnk, kSlow, true};
// The connection could not be made or is refused: nothing was sent.
constexpr Fault kConnectRefused{kConn, kNA, kSlow, true};
// The connection died under an attempt: it may have been applied.
constexpr Fault kConnectionLost{kConn, kUnk, kSlow, true};
// A session closed for idleness: nothing in flight, not load.
constexpr Fault kSessionExpired{kConn, kNA, kFast, false};

using C = Code;

constexpr std::array kSqliteRows = std::to_array<SqliteFaultRow>({
    {1, "SQLITE_ERROR", C::kInvalidArgument, kPermanent},
    {257, "SQLITE_ERROR_MISSING_COLLSEQ", C::kInvalidArgument, kPermanent},
    {513, "SQLITE_ERROR_RETRY", C::kAborted, kStatementRace},
    {769, "SQLITE_ERROR_SNAPSHOT", C::kFailedPrecondition, kPermanent},
    {2, "SQLITE_INTERNAL", C::kInternal, kPermanentUnknown},
    {3, "SQLITE_PERM", C::kPermissionDenied, kPermanent},
    {4, "SQLITE_ABORT", C::kAborted, kPermanent},
    {516, "SQLITE_ABORT_ROLLBACK", C::kAborted, kTxnConflict},
    {5, "SQLITE_BUSY", C::kUnavailable, kLockContention},
    {261, "SQLITE_BUSY_RECOVERY", C::kUnavailable, kLockContention},
    {517, "SQLITE_BUSY_SNAPSHOT", C::kAborted, kTxnConflict},
    {773, "SQLITE_BUSY_TIMEOUT", C::kUnavailable, kLockContention},
    // Plain SQLITE_LOCKED is a conflict inside one connection: a bug, not load.
    {6, "SQLITE_LOCKED", C::kFailedPrecondition, kPermanent},
    {262, "SQLITE_LOCKED_SHAREDCACHE", C::kUnavailable, kStatementRace},
    {518, "SQLITE_LOCKED_VTAB", C::kFailedPrecondition, kPermanent},
    {7, "SQLITE_NOMEM", C::kResourceExhausted, kOverloaded},
    {8, "SQLITE_READONLY", C::kPermissionDenied, kPermanent},
    {264, "SQLITE_READONLY_RECOVERY", C::kUnavailable, kStatementRace},
    {520, "SQLITE_READONLY_CANTLOCK", C::kPermissionDenied, kPermanent},
    {776, "SQLITE_READONLY_ROLLBACK", C::kPermissionDenied, kPermanent},
    {1032, "SQLITE_READONLY_DBMOVED", C::kFailedPrecondition, kPermanent},
    {1288, "SQLITE_READONLY_CANTINIT", C::kPermissionDenied, kPermanent},
    {1544, "SQLITE_READONLY_DIRECTORY", C::kPermissionDenied, kPermanent},
    {9, "SQLITE_INTERRUPT", C::kCancelled, kPermanent},
    {10, "SQLITE_IOERR", C::kInternal, kPermanentUnknown},
    {266, "SQLITE_IOERR_READ", C::kInternal, kPermanentUnknown},
    {522, "SQLITE_IOERR_SHORT_READ", C::kDataLoss, kPermanent},
    {778, "SQLITE_IOERR_WRITE", C::kInternal, kPermanentUnknown},
    {1034, "SQLITE_IOERR_FSYNC", C::kInternal, kPermanentUnknown},
    {1290, "SQLITE_IOERR_DIR_FSYNC", C::kInternal, kPermanentUnknown},
    {1546, "SQLITE_IOERR_TRUNCATE", C::kInternal, kPermanentUnknown},
    {1802, "SQLITE_IOERR_FSTAT", C::kInternal, kPermanentUnknown},
    {2058, "SQLITE_IOERR_UNLOCK", C::kInternal, kPermanentUnknown},
    {2314, "SQLITE_IOERR_RDLOCK", C::kInternal, kPermanent},
    {2570, "SQLITE_IOERR_DELETE", C::kInternal, kPermanentUnknown},
    {2826, "SQLITE_IOERR_BLOCKED", C::kInternal, kPermanent},
    {3082, "SQLITE_IOERR_NOMEM", C::kResourceExhausted, kOverloaded},
    {3338, "SQLITE_IOERR_ACCESS", C::kPermissionDenied, kPermanent},
    {3594, "SQLITE_IOERR_CHECKRESERVEDLOCK", C::kInternal, kPermanent},
    {3850, "SQLITE_IOERR_LOCK", C::kInternal, kPermanent},
    {4106, "SQLITE_IOERR_CLOSE", C::kInternal, kPermanentUnknown},
    {4362, "SQLITE_IOERR_DIR_CLOSE", C::kInternal, kPermanentUnknown},
    {4618, "SQLITE_IOERR_SHMOPEN", C::kInternal, kPermanent},
    {4874, "SQLITE_IOERR_SHMSIZE", C::kInternal, kPermanent},
    {5130, "SQLITE_IOERR_SHMLOCK", C::kInternal, kPermanent},
    {5386, "SQLITE_IOERR_SHMMAP", C::kInternal, kPermanent},
    {5642, "SQLITE_IOERR_SEEK", C::kInternal, kPermanentUnknown},
    {5898, "SQLITE_IOERR_DELETE_NOENT", C::kInternal, kPermanentUnknown},
    {6154, "SQLITE_IOERR_MMAP", C::kInternal, kPermanent},
    {6410, "SQLITE_IOERR_GETTEMPPATH", C::kInternal, kPermanent},
    {6666, "SQLITE_IOERR_CONVPATH", C::kInternal, kPermanent},
    {6922, "SQLITE_IOERR_VNODE", C::kInternal, kPermanent},
    {7178, "SQLITE_IOERR_AUTH", C::kPermissionDenied, kPermanent},
    {7434, "SQLITE_IOERR_BEGIN_ATOMIC", C::kInternal, kPermanentUnknown},
    {7690, "SQLITE_IOERR_COMMIT_ATOMIC", C::kInternal, kPermanentUnknown},
    {7946, "SQLITE_IOERR_ROLLBACK_ATOMIC", C::kInternal, kPermanentUnknown},
    {8202, "SQLITE_IOERR_DATA", C::kDataLoss, kPermanent},
    {8458, "SQLITE_IOERR_CORRUPTFS", C::kDataLoss, kPermanent},
    {11, "SQLITE_CORRUPT", C::kDataLoss, kPermanent},
    {267, "SQLITE_CORRUPT_VTAB", C::kDataLoss, kPermanent},
    {523, "SQLITE_CORRUPT_SEQUENCE", C::kDataLoss, kPermanent},
    {779, "SQLITE_CORRUPT_INDEX", C::kDataLoss, kPermanent},
    {12, "SQLITE_NOTFOUND", C::kNotFound, kPermanent},
    {13, "SQLITE_FULL", C::kResourceExhausted, kPermanent},
    {14, "SQLITE_CANTOPEN", C::kFailedPrecondition, kPermanent},
    {270, "SQLITE_CANTOPEN_NOTEMPDIR", C::kFailedPrecondition, kPermanent},
    {526, "SQLITE_CANTOPEN_ISDIR", C::kInvalidArgument, kPermanent},
    {782, "SQLITE_CANTOPEN_FULLPATH", C::kInvalidArgument, kPermanent},
    {1038, "SQLITE_CANTOPEN_CONVPATH", C::kInvalidArgument, kPermanent},
    {1550, "SQLITE_CANTOPEN_SYMLINK", C::kInvalidArgument, kPermanent},
    {15, "SQLITE_PROTOCOL", C::kUnavailable, kStatementRace},
    {16, "SQLITE_EMPTY", C::kInternal, kPermanent},
    // The schema changed under a prepared statement: preparing again helps.
    {17, "SQLITE_SCHEMA", C::kAborted, kStatementRace},
    {18, "SQLITE_TOOBIG", C::kInvalidArgument, kPermanent},
    {19, "SQLITE_CONSTRAINT", C::kFailedPrecondition, kPermanent},
    {275, "SQLITE_CONSTRAINT_CHECK", C::kFailedPrecondition, kPermanent},
    {531, "SQLITE_CONSTRAINT_COMMITHOOK", C::kFailedPrecondition, kPermanent},
    {787, "SQLITE_CONSTRAINT_FOREIGNKEY", C::kFailedPrecondition, kPermanent},
    {1043, "SQLITE_CONSTRAINT_FUNCTION", C::kFailedPrecondition, kPermanent},
    {1299, "SQLITE_CONSTRAINT_NOTNULL", C::kInvalidArgument, kPermanent},
    {1555, "SQLITE_CONSTRAINT_PRIMARYKEY", C::kAlreadyExists, kPermanent},
    {1811, "SQLITE_CONSTRAINT_TRIGGER", C::kFailedPrecondition, kPermanent},
    {2067, "SQLITE_CONSTRAINT_UNIQUE", C::kAlreadyExists, kPermanent},
    {2323, "SQLITE_CONSTRAINT_VTAB", C::kFailedPrecondition, kPermanent},
    {2579, "SQLITE_CONSTRAINT_ROWID", C::kAlreadyExists, kPermanent},
    {2835, "SQLITE_CONSTRAINT_PINNED", C::kFailedPrecondition, kPermanent},
    {3091, "SQLITE_CONSTRAINT_DATATYPE", C::kInvalidArgument, kPermanent},
    {20, "SQLITE_MISMATCH", C::kInvalidArgument, kPermanent},
    {21, "SQLITE_MISUSE", C::kInternal, kPermanent},
    {22, "SQLITE_NOLFS", C::kUnimplemented, kPermanent},
    {23, "SQLITE_AUTH", C::kPermissionDenied, kPermanent},
    {279, "SQLITE_AUTH_USER", C::kPermissionDenied, kPermanent},
    {24, "SQLITE_FORMAT", C::kInternal, kPermanent},
    {25, "SQLITE_RANGE", C::kOutOfRange, kPermanent},
    {26, "SQLITE_NOTADB", C::kFailedPrecondition, kPermanent},
    {27, "SQLITE_NOTICE", C::kUnknown, kPermanent},
    {283, "SQLITE_NOTICE_RECOVER_WAL", C::kUnknown, kPermanent},
    {539, "SQLITE_NOTICE_RECOVER_ROLLBACK", C::kUnknown, kPermanent},
    {28, "SQLITE_WARNING", C::kUnknown, kPermanent},
    {284, "SQLITE_WARNING_AUTOINDEX", C::kUnknown, kPermanent},
});

constexpr std::array kSqlstateRows = std::to_array<SqlstateFaultRow>({
    // The connection is gone and no SQLSTATE arrived: the attempt may have been applied.
    {"", "connection_lost", C::kUnavailable, kConnectionLost},
    {"03", "sql_statement_not_yet_complete", C::kFailedPrecondition, kPermanent},
    {"08", "connection_exception", C::kUnavailable, kConnectionLost},
    {"08000", "connection_exception", C::kUnavailable, kConnectionLost},
    {"08003", "connection_does_not_exist", C::kUnavailable, {kConn, kNA, kFast, false}},
    {"08006", "connection_failure", C::kUnavailable, kConnectionLost},
    {"08001", "sqlclient_unable_to_establish_sqlconnection", C::kUnavailable, kConnectRefused},
    {"08004", "sqlserver_rejected_establishment_of_sqlconnection", C::kUnavailable,
     kConnectRefused},
    {"08007", "transaction_resolution_unknown", C::kUnknown, kConnectionLost},
    {"08P01", "protocol_violation", C::kInternal, kPermanentUnknown},
    {"09", "triggered_action_exception", C::kFailedPrecondition, kPermanent},
    {"0A", "feature_not_supported", C::kUnimplemented, kPermanent},
    {"0B", "invalid_transaction_initiation", C::kFailedPrecondition, kPermanent},
    {"0F", "locator_exception", C::kInvalidArgument, kPermanent},
    {"0L", "invalid_grantor", C::kPermissionDenied, kPermanent},
    {"0P", "invalid_role_specification", C::kPermissionDenied, kPermanent},
    {"0Z", "diagnostics_exception", C::kFailedPrecondition, kPermanent},
    {"20", "case_not_found", C::kNotFound, kPermanent},
    {"21", "cardinality_violation", C::kInvalidArgument, kPermanent},
    {"22", "data_exception", C::kInvalidArgument, kPermanent},
    {"22012", "division_by_zero", C::kInvalidArgument, kPermanent},
    {"22P02", "invalid_text_representation", C::kInvalidArgument, kPermanent},
    {"23", "integrity_constraint_violation", C::kFailedPrecondition, kPermanent},
    {"23502", "not_null_violation", C::kInvalidArgument, kPermanent},
    {"23503", "foreign_key_violation", C::kFailedPrecondition, kPermanent},
    {"23505", "unique_violation", C::kAlreadyExists, kPermanent},
    {"23514", "check_violation", C::kFailedPrecondition, kPermanent},
    {"23P01", "exclusion_violation", C::kFailedPrecondition, kPermanent},
    {"24", "invalid_cursor_state", C::kFailedPrecondition, kPermanent},
    {"25", "invalid_transaction_state", C::kFailedPrecondition, kPermanent},
    // A write inside a READ ONLY transaction: the read path's safety net fired.
    {"25006", "read_only_sql_transaction", C::kFailedPrecondition, kPermanent},
    {"25P02", "in_failed_sql_transaction", C::kFailedPrecondition, kPermanent},
    // The server ended an idle transaction and the session: it was rolled back.
    {"25P03", "idle_in_transaction_session_timeout", C::kAborted, kSessionExpired},
    {"26", "invalid_sql_statement_name", C::kInvalidArgument, kPermanent},
    {"27", "triggered_data_change_violation", C::kFailedPrecondition, kPermanent},
    {"28", "invalid_authorization_specification", C::kPermissionDenied, kPermanent},
    {"2B", "dependent_privilege_descriptors_still_exist", C::kFailedPrecondition, kPermanent},
    {"2D", "invalid_transaction_termination", C::kFailedPrecondition, kPermanent},
    {"2F", "sql_routine_exception", C::kFailedPrecondition, kPermanent},
    {"34", "invalid_cursor_name", C::kInvalidArgument, kPermanent},
    {"38", "external_routine_exception", C::kFailedPrecondition, kPermanent},
    {"39", "external_routine_invocation_exception", C::kFailedPrecondition, kPermanent},
    {"3B", "savepoint_exception", C::kFailedPrecondition, kPermanent},
    {"3D", "invalid_catalog_name", C::kNotFound, kPermanent},
    {"3F", "invalid_schema_name", C::kNotFound, kPermanent},
    {"40", "transaction_rollback", C::kAborted, kTxnConflict},
    {"40000", "transaction_rollback", C::kAborted, kTxnConflict},
    {"40001", "serialization_failure", C::kAborted, kTxnConflict},
    {"40P01", "deadlock_detected", C::kAborted, kTxnConflict},
    {"40002", "transaction_integrity_constraint_violation", C::kFailedPrecondition, kPermanent},
    {"40003", "statement_completion_unknown", C::kUnknown, kPermanentUnknown},
    {"42", "syntax_error_or_access_rule_violation", C::kInvalidArgument, kPermanent},
    {"42501", "insufficient_privilege", C::kPermissionDenied, kPermanent},
    {"42P01", "undefined_table", C::kNotFound, kPermanent},
    {"42703", "undefined_column", C::kNotFound, kPermanent},
    {"42883", "undefined_function", C::kNotFound, kPermanent},
    {"44", "with_check_option_violation", C::kFailedPrecondition, kPermanent},
    {"53", "insufficient_resources", C::kResourceExhausted, kOverloaded},
    {"53100", "disk_full", C::kResourceExhausted, kPermanent},
    {"53200", "out_of_memory", C::kResourceExhausted, kOverloaded},
    {"53300", "too_many_connections", C::kResourceExhausted, kConnectRefused},
    {"53400", "configuration_limit_exceeded", C::kResourceExhausted, kPermanent},
    {"54", "program_limit_exceeded", C::kResourceExhausted, kPermanent},
    {"55", "object_not_in_prerequisite_state", C::kFailedPrecondition, kPermanent},
    {"55006", "object_in_use", C::kUnavailable, kStatementRace},
    {"55P03", "lock_not_available", C::kUnavailable, kLockContention},
    {"57", "operator_intervention", C::kUnavailable, kPermanent},
    // Statement timeout (ours, set from the window) or a cancel: the statement was rolled
    // back. Slow pace: the database was too slow to answer in time.
    {"57014", "query_canceled", C::kDeadlineExceeded, kOverloaded},
    {"57P01", "admin_shutdown", C::kUnavailable, kConnectionLost},
    {"57P02", "crash_shutdown", C::kUnavailable, kConnectionLost},
    {"57P03", "cannot_connect_now", C::kUnavailable, kConnectRefused},
    {"57P04", "database_dropped", C::kNotFound, kPermanent},
    {"57P05", "idle_session_timeout", C::kUnavailable, kSessionExpired},
    {"58", "system_error", C::kInternal, kPermanentUnknown},
    {"72", "snapshot_too_old", C::kAborted, kTxnConflict},
    {"F0", "config_file_error", C::kInternal, kPermanent},
    {"HV", "fdw_error", C::kInternal, kPermanent},
    {"P0", "plpgsql_error", C::kFailedPrecondition, kPermanent},
    {"XX", "internal_error", C::kInternal, kPermanentUnknown},
    {"XX001", "data_corrupted", C::kDataLoss, kPermanentUnknown},
    {"XX002", "index_corrupted", C::kDataLoss, kPermanentUnknown},
});

// Most specific first: the first needle found in the message wins.
constexpr std::array kD1Rows = std::to_array<D1FaultRow>({
    {"D1 DB is overloaded", C::kUnavailable, kOverloaded},
    {"Requests queued for too long", C::kUnavailable, kOverloaded},
    {"Too many requests queued", C::kUnavailable, kOverloaded},
    {"Network connection lost", C::kUnavailable, kConnectionLost},
    {"transient issue on remote node", C::kUnavailable, kOverloaded},
    {"exceeded timeout which caused object to be reset", C::kDeadlineExceeded, kOverloadedUnknown},
    {"caused object to be reset", C::kInternal, kOverloadedUnknown},
    {"exceeded its memory limit and was reset", C::kResourceExhausted, kOverloadedUnknown},
    {"reset because its code was updated", C::kUnavailable, kStatementRace},
    {"Memory limit would be exceeded", C::kResourceExhausted, kPermanent},
    {"SQLITE_BUSY", C::kUnavailable, kLockContention},
    {"database is locked", C::kUnavailable, kLockContention},
    {"SQLITE_CONSTRAINT", C::kFailedPrecondition, kPermanent},
    {"SQLITE_TOOBIG", C::kInvalidArgument, kPermanent},
    {"SQLITE_AUTH", C::kPermissionDenied, kPermanent},
    {"SQLITE_ERROR", C::kInvalidArgument, kPermanent},
});

bool contains_icase(std::string_view haystack, std::string_view needle) noexcept {
  if (needle.size() > haystack.size()) return false;
  const auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != haystack.end();
}

const SqlstateFaultRow* find_sqlstate(std::string_view key) noexcept {
  for (const auto& row : kSqlstateRows) {
    if (row.sqlstate == key) return &row;
  }
  return nullptr;
}

Status make_status(const Classification& c, std::string_view message) {
  return Status(c.code, std::string(message.empty() ? c.name : message), c.fault);
}

}  // namespace

Classification classify_sqlite(int extended_code) noexcept {
  const auto find = [](int code) -> const SqliteFaultRow* {
    for (const auto& row : kSqliteRows) {
      if (row.code == code) return &row;
    }
    return nullptr;
  };
  const SqliteFaultRow* row = find(extended_code);
  if (row == nullptr) row = find(extended_code & 0xff);
  if (row == nullptr) return {Code::kUnknown, kPermanentUnknown, "SQLITE_UNKNOWN"};
  return {row->canonical, row->fault, row->name};
}

Classification classify_sqlstate(std::string_view sqlstate) noexcept {
  const SqlstateFaultRow* row = find_sqlstate(sqlstate);
  if (row == nullptr && sqlstate.size() == 5) row = find_sqlstate(sqlstate.substr(0, 2));
  if (row == nullptr) return {Code::kUnknown, kPermanentUnknown, "unknown_sqlstate"};
  return {row->canonical, row->fault, row->name};
}

Classification classify_pg_connect_failure() noexcept {
  return {Code::kUnavailable, kConnectRefused, "connection_refused"};
}

Classification classify_d1(std::string_view message) noexcept {
  for (const auto& row : kD1Rows) {
    if (contains_icase(message, row.needle)) return {row.canonical, row.fault, row.needle};
  }
  return {Code::kUnknown, kPermanentUnknown, "D1_ERROR"};
}

Status sqlite_status(int extended_code, std::string_view message) {
  Status s = make_status(classify_sqlite(extended_code), message);
  s.with_sqlite(extended_code);
  return s;
}

namespace {

// PgBouncer answers 08P01 (protocol_violation, permanent from PostgreSQL) for its own
// refusals too, before the query reaches a server: classified by what they mean. The
// SQLSTATE the Status carries stays 08P01.
std::string_view pooler_meaning(std::string_view sqlstate, std::string_view message) noexcept {
  if (sqlstate != "08P01") return sqlstate;
  if (pooler_cannot_reach_server(sqlstate, message)) return "08001";
  // Over the pooler's limits: overload, nothing applied.
  for (std::string_view m : {"no more connections allowed", "query_wait_timeout"}) {
    if (message.find(m) != std::string_view::npos) return "53300";
  }
  // The server connection it took for the client's transaction would not take the client's
  // settings (PgBouncer's varcache_apply(), met while the server restarts): the client is
  // disconnected before its first statement is passed on. Nothing was applied; a new
  // connection may get a good server connection.
  if (message.find("invalid server parameter") != std::string_view::npos) return "08003";
  return sqlstate;
}

}  // namespace

bool pooler_cannot_reach_server(std::string_view sqlstate, std::string_view message) noexcept {
  if (sqlstate != "08P01") return false;
  // server_login_retry: logins to the server have been failing.
  for (std::string_view m : {"server_login_retry", "pgbouncer cannot connect to server"}) {
    if (message.find(m) != std::string_view::npos) return true;
  }
  return false;
}

Status postgres_status(std::string_view sqlstate, std::string_view message) {
  Status s = make_status(classify_sqlstate(pooler_meaning(sqlstate, message)), message);
  s.with_sqlstate(sqlstate);
  return s;
}

Status d1_status(std::string_view message) {
  Status s = make_status(classify_d1(message), message);
  s.with_backend(Backend::kD1);
  return s;
}

std::span<const SqliteFaultRow> sqlite_fault_table() noexcept {
  return kSqliteRows;
}
std::span<const SqlstateFaultRow> sqlstate_fault_table() noexcept {
  return kSqlstateRows;
}
std::span<const D1FaultRow> d1_fault_table() noexcept {
  return kD1Rows;
}

}  // namespace holdfast
