// The read/write verdict (docs/adr/0002-sqlite-read-classification.md) and the read path's
// safety net: PRAGMA query_only=1 refuses what a misjudged "read" would write.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "holdfast/core/classify.hpp"
#include "holdfast/sqlite.hpp"
#include "sqlite_faults.hpp"

namespace holdfast::sqlite {
namespace {

using ::testing::HasSubstr;
using testing::RawConnection;
using testing::TempDir;

constexpr int kReadOnly = 8;

struct Case {
  const char* sql;
  Access access;
  Effect effect;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.sql;
}

class Classification : public ::testing::TestWithParam<Case> {
 protected:
  static Database& db() {
    static Database* db = [] {
      Options options;
      options.path = ":memory:";
      auto* d = new Database(Database::open(options).value());
      EXPECT_TRUE(d->execute_script("CREATE TABLE t(x INTEGER, y TEXT); CREATE INDEX tx ON t(x);"
                                    "CREATE VIEW v AS SELECT x FROM t;")
                      .ok());
      return d;
    }();
    return *db;
  }
};

TEST_P(Classification, TheEngineDecidesReadOrWrite) {
  const Case& c = GetParam();
  Result<AccessVerdict> v = db().judge_access(c.sql);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->access, c.access) << to_string(v->effect) << ": " << v->reason();
  EXPECT_EQ(v->effect, c.effect) << v->reason();
}

INSTANTIATE_TEST_SUITE_P(
    Statements, Classification,
    ::testing::Values(
        // Reads: one statement, read-only by the engine, no transaction or connection control.
        Case{"SELECT x FROM t WHERE x = ?", Access::kRead, Effect::kRead},
        Case{"  select * from v  ", Access::kRead, Effect::kRead},
        Case{"WITH a AS (SELECT 1) SELECT * FROM a", Access::kRead, Effect::kRead},
        Case{"SELECT 1; -- a trailing comment is no statement", Access::kRead, Effect::kRead},
        Case{"PRAGMA user_version", Access::kRead, Effect::kRead},
        Case{"SELECT * FROM pragma_table_info('t')", Access::kRead, Effect::kRead},
        Case{"EXPLAIN QUERY PLAN SELECT * FROM t WHERE x = 1", Access::kRead, Effect::kExplain},
        Case{"EXPLAIN DELETE FROM t", Access::kRead, Effect::kExplain},
        // What the origin's keyword rule got wrong: a WITH that writes ...
        Case{"WITH a AS (SELECT 1) INSERT INTO t(x) SELECT * FROM a", Access::kWrite,
             Effect::kWrite},
        // ... a PRAGMA that switches off the read connection's protection ...
        Case{"PRAGMA query_only=0", Access::kWrite, Effect::kPragmaSetting},
        Case{"PRAGMA foreign_keys(OFF)", Access::kWrite, Effect::kPragmaSetting},
        Case{"PRAGMA user_version=7", Access::kWrite, Effect::kPragmaSetting},
        // ... and a read followed by a write.
        Case{"SELECT 1; DELETE FROM t", Access::kWrite, Effect::kMultipleStatements},
        // Writes the engine reports.
        Case{"INSERT INTO t(x) VALUES (1) RETURNING x", Access::kWrite, Effect::kWrite},
        Case{"UPDATE t SET y = 'a'", Access::kWrite, Effect::kWrite},
        Case{"VACUUM", Access::kWrite, Effect::kWrite},
        Case{"REINDEX tx", Access::kWrite, Effect::kWrite},
        Case{"PRAGMA wal_checkpoint", Access::kWrite, Effect::kWrite},
        // sqlite3_stmt_readonly() is true for it, yet it may run ANALYZE (sqlite_stat1).
        Case{"PRAGMA optimize", Access::kWrite, Effect::kPragmaThatWrites},
        Case{"pragma main.OPTIMIZE", Access::kWrite, Effect::kPragmaThatWrites},
        Case{"PRAGMA optimize(0x10002)", Access::kWrite, Effect::kPragmaSetting},
        Case{"CREATE TEMP TABLE scratch(x)", Access::kWrite, Effect::kWrite},
        // sqlite3_stmt_readonly() is true for these, yet they change the connection.
        Case{"BEGIN", Access::kWrite, Effect::kTransactionControl},
        Case{"COMMIT", Access::kWrite, Effect::kTransactionControl},
        Case{"ROLLBACK", Access::kWrite, Effect::kTransactionControl},
        Case{"SAVEPOINT s", Access::kWrite, Effect::kSavepoint},
        Case{"RELEASE s", Access::kWrite, Effect::kSavepoint},
        Case{"ATTACH ':memory:' AS aux", Access::kWrite, Effect::kConnectionState},
        Case{"DETACH aux", Access::kWrite, Effect::kConnectionState},
        Case{"PRAGMA table_info(t)", Access::kWrite, Effect::kPragmaSetting}));

TEST(ClassificationErrors, SqlThatDoesNotPrepareIsAnErrorNotAVerdict) {
  Options options;
  options.path = ":memory:";
  Database db = Database::open(options).value();
  Result<AccessVerdict> bad = db.judge_access("SELEC 1");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("syntax error"));
  Result<AccessVerdict> empty = db.judge_access("  -- nothing here\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("no SQL statement"));
}

// A user function that writes through its own connection: the engine cannot see it, so
// sqlite3_stmt_readonly() calls "SELECT bump()" read-only.
void bump(sqlite3_context* ctx, int, sqlite3_value**) {
  sqlite3* db = sqlite3_context_db_handle(ctx);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, "INSERT INTO hits(n) VALUES (1)", nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    sqlite3_result_error(ctx, err != nullptr ? err : "insert failed", -1);
    sqlite3_result_error_code(ctx, rc);
    sqlite3_free(err);
    return;
  }
  sqlite3_result_int(ctx, 1);
}

TEST(ReadPath, AFunctionThatWritesIsRefusedByQueryOnlyAndNeverApplied) {
  TempDir dir;
  Options options;
  options.path = dir.file("club.db");
  options.on_connect = [](sqlite3* db, Role) -> Status {
    const int rc =
        sqlite3_create_function(db, "bump", 0, SQLITE_UTF8, nullptr, &bump, nullptr, nullptr);
    return rc == SQLITE_OK ? Status() : sqlite_status(rc, "create_function");
  };
  Result<ResilientDatabase> db = ResilientDatabase::open(options);
  ASSERT_TRUE(db.ok()) << db.status().to_string();
  ASSERT_TRUE(db->execute("CREATE TABLE hits(n INTEGER)").ok());
  ASSERT_EQ(db->judge_access("SELECT bump()")->access, Access::kRead);

  Result<std::optional<std::int64_t>> r = db->query_one<std::int64_t>("SELECT bump()");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code() & 0xff, kReadOnly) << r.status().to_string();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("readonly database"));
  EXPECT_FALSE(r.status().fault().transient());
  EXPECT_EQ(r.status().attempts(), 1) << "a refused write is not retried";
  EXPECT_EQ(RawConnection::open(options.path)->query_int("SELECT count(*) FROM hits").value_or(-1),
            0);
  // On the write path the same function does write: the refusal above was query_only's.
  ASSERT_TRUE(db->database()
                  .transaction([](Transaction& tx) {
                    return tx.query_one<std::int64_t>("SELECT bump()").status();
                  })
                  .ok());
  EXPECT_EQ(RawConnection::open(options.path)->query_int("SELECT count(*) FROM hits").value_or(-1),
            1);
}

TEST(ReadPath, PragmaOptimizeIsAWriteAndRunsOnTheWriter) {
  TempDir dir;
  Options options;
  options.path = dir.file("club.db");
  options.read_connections = 1;  // the connection that ran the query would run the PRAGMA
  Database db = Database::open(options).value();
  ASSERT_TRUE(db.execute_script(R"sql(
    CREATE TABLE t(a INTEGER, b INTEGER);
    CREATE INDEX ta ON t(a);
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
    INSERT INTO t SELECT i % 50, i FROM n;
  )sql")
                  .ok());
  ASSERT_TRUE(db.query_one<std::int64_t>("SELECT count(*) FROM t WHERE a = ?", 3).ok());
  // PRAGMA optimize is read-only to sqlite3_stmt_readonly(), but it may run ANALYZE, which
  // writes sqlite_stat1: judged a write, it goes to the writer instead of failing on a read
  // connection (query_only).
  Result<AccessVerdict> v = db.judge_access("PRAGMA optimize");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->access, Access::kWrite);
  EXPECT_EQ(v->effect, Effect::kPragmaThatWrites);
  // Whether it analyzes anything is SQLite's choice; either way it is not refused.
  Result<Exec> r = db.execute("PRAGMA optimize");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST(ReadPath, ClassifyingPragmaQueryOnlyOffDoesNotSwitchOffTheReadConnection) {
  TempDir dir;
  Options options;
  options.path = dir.file("club.db");
  options.read_connections = 1;
  Database db = Database::open(options).value();
  ASSERT_TRUE(db.execute("CREATE TABLE t(x)").ok());
  // SQLite applies PRAGMA query_only while merely preparing it. Classification happens on a
  // read connection and must not switch its protection off.
  for (const char* sql : {"PRAGMA query_only=0", "PRAGMA query_only(false)",
                          "EXPLAIN PRAGMA query_only=0", "SELECT 1; PRAGMA query_only=0"}) {
    ASSERT_EQ(db.judge_access(sql)->access, Access::kWrite) << sql;
  }
  EXPECT_EQ(db.query_one<std::int64_t>("PRAGMA query_only")->value_or(-1), 1);
  // And a statement misjudged as a read still cannot write there.
  Result<std::optional<std::int64_t>> c = db.query_one<std::int64_t>("SELECT count(*) FROM t");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(**c, 0);
}

}  // namespace
}  // namespace holdfast::sqlite
