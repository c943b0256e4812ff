#include "holdfast/core/classify.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#ifdef HOLDFAST_HAVE_SQLITE3_H
#include <sqlite3.h>
#endif

namespace holdfast {
namespace {

constexpr Fault kPermanent{RetryScope::kNone, Outcome::kNotApplied, Pace::kFast, false};
constexpr Fault kLock{RetryScope::kStatement, Outcome::kNotApplied, Pace::kFast, true};
constexpr Fault kTxn{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false};
constexpr Fault kOverload{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true};
constexpr Fault kLost{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, true};
constexpr Fault kRefused{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true};

TEST(ClassifyTables, EveryRowIsConsistent) {
  std::set<int> codes;
  for (const auto& row : sqlite_fault_table()) {
    EXPECT_TRUE(codes.insert(row.code).second) << "duplicate " << row.name;
    const Classification c = classify_sqlite(row.code);
    EXPECT_EQ(c.name, row.name);
    EXPECT_EQ(c.fault, row.fault) << row.name;
    // Bad input and broken files never count as overload: they must not trip a breaker.
    if (!row.fault.transient()) {
      EXPECT_FALSE(row.fault.overload) << row.name;
    }
    EXPECT_NE(row.canonical, Code::kOk) << row.name;
  }
  std::set<std::string_view> states;
  for (const auto& row : sqlstate_fault_table()) {
    EXPECT_TRUE(states.insert(row.sqlstate).second) << "duplicate " << row.sqlstate;
    EXPECT_TRUE(row.sqlstate.empty() || row.sqlstate.size() == 2 || row.sqlstate.size() == 5);
    const Classification c = classify_sqlstate(row.sqlstate);
    EXPECT_EQ(c.fault, row.fault) << row.sqlstate;
    if (!row.fault.transient()) {
      EXPECT_FALSE(row.fault.overload) << row.sqlstate;
    }
  }
  for (const auto& row : d1_fault_table()) {
    const std::string message = "D1_ERROR: " + std::string(row.needle) + ".";
    EXPECT_EQ(classify_d1(message).fault, row.fault) << row.needle;
  }
}

#ifdef HOLDFAST_HAVE_SQLITE3_H
TEST(ClassifySqlite, EveryCodeInTheTableMatchesSqlite3H) {
#define ROW(name) \
  { #name, name }
  const std::map<std::string, int> header = {
      ROW(SQLITE_ERROR),
      ROW(SQLITE_ERROR_MISSING_COLLSEQ),
      ROW(SQLITE_ERROR_RETRY),
      ROW(SQLITE_ERROR_SNAPSHOT),
      ROW(SQLITE_INTERNAL),
      ROW(SQLITE_PERM),
      ROW(SQLITE_ABORT),
      ROW(SQLITE_ABORT_ROLLBACK),
      ROW(SQLITE_BUSY),
      ROW(SQLITE_BUSY_RECOVERY),
      ROW(SQLITE_BUSY_SNAPSHOT),
      ROW(SQLITE_BUSY_TIMEOUT),
      ROW(SQLITE_LOCKED),
      ROW(SQLITE_LOCKED_SHAREDCACHE),
      ROW(SQLITE_LOCKED_VTAB),
      ROW(SQLITE_NOMEM),
      ROW(SQLITE_READONLY),
      ROW(SQLITE_READONLY_RECOVERY),
      ROW(SQLITE_READONLY_CANTLOCK),
      ROW(SQLITE_READONLY_ROLLBACK),
      ROW(SQLITE_READONLY_DBMOVED),
      ROW(SQLITE_READONLY_CANTINIT),
      ROW(SQLITE_READONLY_DIRECTORY),
      ROW(SQLITE_INTERRUPT),
      ROW(SQLITE_IOERR),
      ROW(SQLITE_IOERR_READ),
      ROW(SQLITE_IOERR_SHORT_READ),
      ROW(SQLITE_IOERR_WRITE),
      ROW(SQLITE_IOERR_FSYNC),
      ROW(SQLITE_IOERR_DIR_FSYNC),
      ROW(SQLITE_IOERR_TRUNCATE),
      ROW(SQLITE_IOERR_FSTAT),
      ROW(SQLITE_IOERR_UNLOCK),
      ROW(SQLITE_IOERR_RDLOCK),
      ROW(SQLITE_IOERR_DELETE),
      ROW(SQLITE_IOERR_BLOCKED),
      ROW(SQLITE_IOERR_NOMEM),
      ROW(SQLITE_IOERR_ACCESS),
      ROW(SQLITE_IOERR_CHECKRESERVEDLOCK),
      ROW(SQLITE_IOERR_LOCK),
      ROW(SQLITE_IOERR_CLOSE),
      ROW(SQLITE_IOERR_DIR_CLOSE),
      ROW(SQLITE_IOERR_SHMOPEN),
      ROW(SQLITE_IOERR_SHMSIZE),
      ROW(SQLITE_IOERR_SHMLOCK),
      ROW(SQLITE_IOERR_SHMMAP),
      ROW(SQLITE_IOERR_SEEK),
      ROW(SQLITE_IOERR_DELETE_NOENT),
      ROW(SQLITE_IOERR_MMAP),
      ROW(SQLITE_IOERR_GETTEMPPATH),
      ROW(SQLITE_IOERR_CONVPATH),
      ROW(SQLITE_IOERR_VNODE),
      ROW(SQLITE_IOERR_AUTH),
      ROW(SQLITE_IOERR_BEGIN_ATOMIC),
      ROW(SQLITE_IOERR_COMMIT_ATOMIC),
      ROW(SQLITE_IOERR_ROLLBACK_ATOMIC),
      ROW(SQLITE_IOERR_DATA),
      ROW(SQLITE_IOERR_CORRUPTFS),
      ROW(SQLITE_CORRUPT),
      ROW(SQLITE_CORRUPT_VTAB),
      ROW(SQLITE_CORRUPT_SEQUENCE),
      ROW(SQLITE_CORRUPT_INDEX),
      ROW(SQLITE_NOTFOUND),
      ROW(SQLITE_FULL),
      ROW(SQLITE_CANTOPEN),
      ROW(SQLITE_CANTOPEN_NOTEMPDIR),
      ROW(SQLITE_CANTOPEN_ISDIR),
      ROW(SQLITE_CANTOPEN_FULLPATH),
      ROW(SQLITE_CANTOPEN_CONVPATH),
      ROW(SQLITE_CANTOPEN_SYMLINK),
      ROW(SQLITE_PROTOCOL),
      ROW(SQLITE_EMPTY),
      ROW(SQLITE_SCHEMA),
      ROW(SQLITE_TOOBIG),
      ROW(SQLITE_CONSTRAINT),
      ROW(SQLITE_CONSTRAINT_CHECK),
      ROW(SQLITE_CONSTRAINT_COMMITHOOK),
      ROW(SQLITE_CONSTRAINT_FOREIGNKEY),
      ROW(SQLITE_CONSTRAINT_FUNCTION),
      ROW(SQLITE_CONSTRAINT_NOTNULL),
      ROW(SQLITE_CONSTRAINT_PRIMARYKEY),
      ROW(SQLITE_CONSTRAINT_TRIGGER),
      ROW(SQLITE_CONSTRAINT_UNIQUE),
      ROW(SQLITE_CONSTRAINT_VTAB),
      ROW(SQLITE_CONSTRAINT_ROWID),
      ROW(SQLITE_CONSTRAINT_PINNED),
      ROW(SQLITE_CONSTRAINT_DATATYPE),
      ROW(SQLITE_MISMATCH),
      ROW(SQLITE_MISUSE),
      ROW(SQLITE_NOLFS),
      ROW(SQLITE_AUTH),
      ROW(SQLITE_AUTH_USER),
      ROW(SQLITE_FORMAT),
      ROW(SQLITE_RANGE),
      ROW(SQLITE_NOTADB),
      ROW(SQLITE_NOTICE),
      ROW(SQLITE_NOTICE_RECOVER_WAL),
      ROW(SQLITE_NOTICE_RECOVER_ROLLBACK),
      ROW(SQLITE_WARNING),
      ROW(SQLITE_WARNING_AUTOINDEX),
  };
#undef ROW
  for (const auto& row : sqlite_fault_table()) {
    const auto it = header.find(std::string(row.name));
    ASSERT_NE(it, header.end()) << row.name << " is not checked against sqlite3.h";
    EXPECT_EQ(it->second, row.code) << row.name;
  }
  EXPECT_EQ(header.size(), sqlite_fault_table().size());
}
#endif

TEST(ClassifySqlite, TheFaultsOfFaultsMd) {
  // Lock contention: nothing applied, retry soon, counts toward the breaker.
  EXPECT_EQ(classify_sqlite(5).fault, kLock);                          // SQLITE_BUSY
  EXPECT_EQ(classify_sqlite(261).fault, kLock);                        // BUSY_RECOVERY
  EXPECT_EQ(classify_sqlite(773).fault, kLock);                        // BUSY_TIMEOUT
  EXPECT_EQ(classify_sqlite(517).fault, kTxn);                         // BUSY_SNAPSHOT: re-run all
  EXPECT_EQ(classify_sqlite(516).fault, kTxn);                         // ABORT_ROLLBACK
  EXPECT_EQ(classify_sqlite(6).fault, kPermanent);                     // plain LOCKED is a bug
  EXPECT_EQ(classify_sqlite(15).fault.scope, RetryScope::kStatement);  // PROTOCOL
  EXPECT_EQ(classify_sqlite(7).fault, kOverload);                      // NOMEM
  EXPECT_EQ(classify_sqlite(2067).code, Code::kAlreadyExists);         // UNIQUE
  EXPECT_EQ(classify_sqlite(2067).fault, kPermanent);
  EXPECT_EQ(classify_sqlite(8).code, Code::kPermissionDenied);       // READONLY (query_only)
  EXPECT_EQ(classify_sqlite(26).fault, kPermanent);                  // NOTADB
  EXPECT_EQ(classify_sqlite(9).code, Code::kCancelled);              // INTERRUPT
  EXPECT_EQ(classify_sqlite(778).fault.outcome, Outcome::kUnknown);  // IOERR_WRITE
  EXPECT_EQ(classify_sqlite(11).code, Code::kDataLoss);              // CORRUPT
}

TEST(ClassifySqlite, AnUnknownExtendedCodeFallsBackToItsPrimaryCode) {
  EXPECT_EQ(classify_sqlite(5 | (77 << 8)).fault, kLock);
  EXPECT_EQ(classify_sqlite(19 | (99 << 8)).fault, kPermanent);
  const Classification unknown = classify_sqlite(250);
  EXPECT_FALSE(unknown.fault.transient());
  EXPECT_EQ(unknown.code, Code::kUnknown);
}

TEST(ClassifyPostgres, SqlstatesByExceptionAndByClass) {
  EXPECT_EQ(classify_sqlstate("40001").fault, kTxn);
  EXPECT_EQ(classify_sqlstate("40P01").fault, kTxn);
  EXPECT_EQ(classify_sqlstate("40999").fault, kTxn);  // class 40
  EXPECT_EQ(classify_sqlstate("40002").fault, kPermanent);
  EXPECT_EQ(classify_sqlstate("55P03").fault, kLock);
  EXPECT_EQ(classify_sqlstate("57014").fault, kOverload);
  EXPECT_EQ(classify_sqlstate("57014").code, Code::kDeadlineExceeded);
  EXPECT_EQ(classify_sqlstate("57P01").fault, kLost);
  EXPECT_EQ(classify_sqlstate("57P03").fault, kRefused);
  EXPECT_EQ(classify_sqlstate("53300").fault, kRefused);
  EXPECT_EQ(classify_sqlstate("53200").fault, kOverload);
  EXPECT_EQ(classify_sqlstate("53100").fault, kPermanent);
  EXPECT_EQ(classify_sqlstate("08006").fault, kLost);
  EXPECT_EQ(classify_sqlstate("08001").fault, kRefused);
  EXPECT_EQ(classify_sqlstate("08123").fault, kLost);  // class 08
  EXPECT_EQ(classify_sqlstate("25006").fault, kPermanent);
  EXPECT_EQ(classify_sqlstate("23505").code, Code::kAlreadyExists);
  EXPECT_EQ(classify_sqlstate("22P02").fault, kPermanent);
  EXPECT_EQ(classify_sqlstate("42601").code, Code::kInvalidArgument);  // syntax, class 42
  EXPECT_EQ(classify_sqlstate("42601").fault, kPermanent);
  EXPECT_EQ(classify_sqlstate("XX001").code, Code::kDataLoss);
}

TEST(ClassifyPostgres, ALostConnectionWithoutSqlstateIsAReconnectWithUnknownOutcome) {
  EXPECT_EQ(classify_sqlstate("").fault, kLost);
  EXPECT_EQ(classify_pg_connect_failure().fault, kRefused);
  const Classification odd = classify_sqlstate("ZZ999");
  EXPECT_FALSE(odd.fault.transient());
  EXPECT_EQ(odd.code, Code::kUnknown);
}

TEST(ClassifyD1, TheOriginsMessages) {
  EXPECT_EQ(classify_d1("D1_ERROR: D1 DB is overloaded. Requests queued for too long.").fault,
            kOverload);
  EXPECT_EQ(classify_d1("D1 DB is overloaded. Too many requests queued.").fault, kOverload);
  EXPECT_EQ(classify_d1("Network connection lost.").fault, kLost);
  EXPECT_EQ(classify_d1("D1_ERROR: SQLITE_BUSY: database is locked").fault, kLock);
  EXPECT_EQ(classify_d1("d1_error: database is locked").fault, kLock);  // any case
  EXPECT_EQ(classify_d1("D1_ERROR: UNIQUE constraint failed: SQLITE_CONSTRAINT").fault, kPermanent);
  EXPECT_EQ(classify_d1("D1 DB storage operation exceeded timeout which caused object to be "
                        "reset.")
                .fault.outcome,
            Outcome::kUnknown);
  EXPECT_FALSE(classify_d1("something else entirely").fault.transient());
}

TEST(Classify, StatusBuildersCarryTheNativeCodeAndTheFault) {
  Status s = sqlite_status(517, "");
  EXPECT_EQ(s.message(), "SQLITE_BUSY_SNAPSHOT");
  EXPECT_EQ(s.sqlite_code(), 517);
  EXPECT_EQ(s.fault(), kTxn);
  Status p = postgres_status("40P01", "deadlock detected");
  EXPECT_EQ(p.sqlstate(), "40P01");
  EXPECT_EQ(p.backend(), Backend::kPostgres);
  // PgBouncer's own refusals come as 08P01 too: the server is unreachable, or the pooler
  // is over its limits. Neither reached PostgreSQL, so both are retried.
  Status down = postgres_status(
      "08P01", "server login has been failing, try again later (server_login_retry)");
  EXPECT_EQ(down.sqlstate(), "08P01");
  EXPECT_EQ(down.fault(), classify_sqlstate("08001").fault);
  EXPECT_EQ(postgres_status("08P01", "no more connections allowed (max_client_conn)").fault(),
            classify_sqlstate("53300").fault);
  EXPECT_EQ(postgres_status("08P01", "query_wait_timeout").fault().overload, true);
  // A server connection that would not take the client's settings (seen in the drill's
  // restart through PgBouncer): the transaction never reached it, a new connection may.
  const Fault unset = postgres_status("08P01", "invalid server parameter").fault();
  EXPECT_EQ(unset.scope, RetryScope::kReconnect);
  EXPECT_EQ(unset.outcome, Outcome::kNotApplied);
  EXPECT_EQ(postgres_status("08P01", "invalid frontend message type 0").fault(),
            classify_sqlstate("08P01").fault);
  Status d = d1_status("D1 DB is overloaded");
  EXPECT_EQ(d.backend(), Backend::kD1);
  EXPECT_TRUE(d.fault().overload);
}

}  // namespace
}  // namespace holdfast
