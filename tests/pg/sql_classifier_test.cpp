// The lexical read-only classifier, without a server.
#include <gtest/gtest.h>

#include <string>

#include "holdfast/pg/sql.hpp"

namespace holdfast::pg {
namespace {

SqlKind kind(std::string_view sql, bool scs = true) {
  return classify_sql(sql, scs).kind;
}

TEST(PgSqlClassifier, PlainQueriesAreReads) {
  for (const char* sql : {
           "SELECT 1",
           "select * from court where id = $1",
           "  (SELECT 1) UNION (SELECT 2)",
           "((SELECT a FROM t))",
           "VALUES (1), (2)",
           "TABLE court",
           "SHOW work_mem",
           "WITH x AS (SELECT 1) SELECT * FROM x",
           "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
           "SELECT n FROM r",
           "SELECT 1;",
           "SELECT 1;  -- done\n",
           "SELECT substring('abc' FROM 1 FOR 2)",
           "SELECT update_time, inserted_by FROM t",
           "SELECT a$b FROM t",
           "SELECT pg_sleep(0.1)",
       }) {
    EXPECT_EQ(kind(sql), SqlKind::kRead) << sql << ": " << classify_sql(sql).explain();
  }
}

TEST(PgSqlClassifier, WordsInsideCommentsLiteralsAndQuotedNamesDoNotCount) {
  for (const char* sql : {
           "SELECT 'delete from t; update t set a = 1' AS text",
           "SELECT 1 -- ; DELETE FROM t",
           "SELECT /* insert /* nested */ still a comment; delete */ 1",
           "SELECT $$ DELETE FROM t; $$",
           "SELECT $body$ a $$ b ; INSERT $body$",
           "SELECT E'it\\'s; delete'",
           "SELECT \"update\", \"into\" FROM \"for update\"",
           "SELECT U&'d\\0061t\\+000061; delete'",
           "SELECT B'1010', X'1F', N'national; drop table t'",
           "SELECT 'it''s; delete'",
       }) {
    EXPECT_EQ(kind(sql), SqlKind::kRead) << sql << ": " << classify_sql(sql).explain();
  }
}

TEST(PgSqlClassifier, DataModificationIsAWrite) {
  for (const char* sql : {
           "INSERT INTO t VALUES (1)",
           "update t set a = 1",
           "DELETE FROM t",
           "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE",
           "TRUNCATE t",
           "COPY t TO STDOUT",
           "CALL p()",
           "DO $$ BEGIN END $$",
       }) {
    const SqlClass c = classify_sql(sql);
    EXPECT_EQ(c.kind, SqlKind::kWrite) << sql;
    EXPECT_FALSE(c.changes_session) << sql;
  }
}

TEST(PgSqlClassifier, DataModifyingWithIsAWrite) {
  const SqlClass c = classify_sql("WITH gone AS (DELETE FROM t RETURNING *) SELECT * FROM gone");
  EXPECT_EQ(c.kind, SqlKind::kWrite);
  EXPECT_EQ(c.reason, "data-modifying statement in WITH");
  EXPECT_EQ(c.detail, "DELETE");
  EXPECT_EQ(c.explain(), "data-modifying statement in WITH (DELETE)");

  EXPECT_EQ(kind("WITH x AS MATERIALIZED (UPDATE t SET a = 1 RETURNING a) SELECT * FROM x"),
            SqlKind::kWrite);
  EXPECT_EQ(kind("WITH x AS NOT MATERIALIZED (INSERT INTO t VALUES (1) RETURNING a) TABLE x"),
            SqlKind::kWrite);
  EXPECT_EQ(kind("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x"), SqlKind::kWrite);
}

TEST(PgSqlClassifier, RowLockingClausesAreWrites) {
  for (const char* clause : {"FOR UPDATE", "for no key update", "FOR SHARE", "For Key Share"}) {
    const std::string sql = std::string("SELECT * FROM t WHERE id = 1 ") + clause + " NOWAIT";
    const SqlClass c = classify_sql(sql);
    EXPECT_EQ(c.kind, SqlKind::kWrite) << sql;
    EXPECT_EQ(c.reason, "row-locking clause") << sql;
    EXPECT_EQ(c.detail, clause) << sql;
  }
}

TEST(PgSqlClassifier, SelectIntoIsAWrite) {
  const SqlClass c = classify_sql("SELECT * INTO new_table FROM t");
  EXPECT_EQ(c.kind, SqlKind::kWrite);
  EXPECT_EQ(c.reason, "SELECT INTO creates a table");
}

TEST(PgSqlClassifier, ExplainIsAReadUnlessItAnalyzesAWrite) {
  EXPECT_EQ(kind("EXPLAIN DELETE FROM t"), SqlKind::kRead);
  EXPECT_EQ(kind("EXPLAIN (ANALYZE false) DELETE FROM t"), SqlKind::kRead);
  EXPECT_EQ(kind("EXPLAIN (ANALYZE off, COSTS) DELETE FROM t"), SqlKind::kRead);
  EXPECT_EQ(kind("EXPLAIN ANALYZE SELECT * FROM t"), SqlKind::kRead);
  EXPECT_EQ(kind("EXPLAIN VERBOSE UPDATE t SET a = 1"), SqlKind::kRead);

  const SqlClass c = classify_sql("EXPLAIN ANALYZE DELETE FROM t");
  EXPECT_EQ(c.kind, SqlKind::kWrite);
  EXPECT_EQ(c.detail, "DELETE");
  EXPECT_EQ(kind("explain analyse verbose insert into t values (1)"), SqlKind::kWrite);
  EXPECT_EQ(kind("EXPLAIN (ANALYZE, BUFFERS) INSERT INTO t VALUES (1)"), SqlKind::kWrite);
  EXPECT_EQ(kind("EXPLAIN (ANALYZE true, FORMAT JSON) UPDATE t SET a = 1"), SqlKind::kWrite);
  EXPECT_EQ(kind("EXPLAIN (ANALYZE) SELECT nextval('s')"), SqlKind::kWrite);
  EXPECT_EQ(kind("EXPLAIN ANALYZE SELECT * FROM t FOR UPDATE"), SqlKind::kWrite);
}

TEST(PgSqlClassifier, FunctionsWithSideEffectsAreWrites) {
  for (const char* sql : {
           "SELECT nextval('order_seq')",
           "SELECT pg_catalog.set_config('default_transaction_read_only', 'off', false)",
           "SELECT pg_advisory_lock(42)",
           "SELECT pg_notify('channel', 'payload')",
           "SELECT pg_terminate_backend(123)",
           "VALUES (setval('s', 10))",
       }) {
    const SqlClass c = classify_sql(sql);
    EXPECT_EQ(c.kind, SqlKind::kWrite) << sql;
    EXPECT_EQ(c.reason, "calls a function with side effects") << sql;
  }
  // A column that happens to share a name is no call.
  EXPECT_EQ(kind("SELECT nextval FROM t"), SqlKind::kRead);
}

TEST(PgSqlClassifier, TransactionAndSessionControlAreWritesThatChangeTheSession) {
  for (const char* sql : {
           "BEGIN",
           "START TRANSACTION READ ONLY",
           "COMMIT",
           "END",
           "ROLLBACK",
           "ABORT",
           "SAVEPOINT s",
           "RELEASE SAVEPOINT s",
           "SET work_mem = '1MB'",
           "SET TRANSACTION READ WRITE",
           "RESET ALL",
           "DISCARD ALL",
           "LISTEN channel",
           "UNLISTEN *",
           "NOTIFY channel",
           "DECLARE c CURSOR FOR SELECT 1",
           "FETCH 10 FROM c",
           "CLOSE c",
           "PREPARE p AS SELECT 1",
           "EXECUTE p",
           "DEALLOCATE p",
           "LOCK TABLE t IN ACCESS EXCLUSIVE MODE",
           "LOAD 'auto_explain'",
       }) {
    const SqlClass c = classify_sql(sql);
    EXPECT_EQ(c.kind, SqlKind::kWrite) << sql;
    EXPECT_TRUE(c.changes_session) << sql;
  }
}

TEST(PgSqlClassifier, SchemaChangesAndMaintenanceAreWrites) {
  for (const char* sql : {"CREATE TABLE t (a int)", "ALTER TABLE t ADD b int", "DROP TABLE t",
                          "VACUUM t", "ANALYZE t", "GRANT SELECT ON t TO u",
                          "REFRESH "
                          "MATERIALIZED "
                          "VIEW v"}) {
    EXPECT_EQ(kind(sql), SqlKind::kWrite) << sql;
  }
}

TEST(PgSqlClassifier, StandardConformingStringsDecideWhatABackslashDoes) {
  // With standard_conforming_strings on, the backslash is a plain character: the literal
  // ends at the second quote and a second statement follows.
  const char* sql = "SELECT 'a\\'; DELETE FROM t; --'";
  EXPECT_EQ(kind(sql, true), SqlKind::kInvalid);
  // Off, the backslash escapes the quote: one literal, one statement.
  EXPECT_EQ(kind(sql, false), SqlKind::kRead);
  // E'' strings always take backslash escapes.
  EXPECT_EQ(kind("SELECT E'a\\'; DELETE FROM t; --'", true), SqlKind::kRead);
}

TEST(PgSqlClassifier, WhatCannotRunIsInvalid) {
  const struct {
    const char* sql;
    const char* reason;
  } cases[] = {
      {"", "empty statement"},
      {"   \n ", "empty statement"},
      {"-- only a comment", "empty statement"},
      {";", "empty statement"},
      {"SELECT 'unterminated", "unterminated string literal"},
      {"SELECT /* unterminated /* nested */", "unterminated /* comment"},
      {"SELECT \"unterminated", "unterminated quoted identifier"},
      {"SELECT $a$ never closed $b$", "unterminated dollar-quoted string"},
      {"SELECT 1; SELECT 2", "more than one statement (holdfast runs one statement per call)"},
      {"INSERT INTO t VALUES (1); DELETE FROM t",
       "more than one statement (holdfast runs one statement per call)"},
  };
  for (const auto& c : cases) {
    const SqlClass got = classify_sql(c.sql);
    EXPECT_EQ(got.kind, SqlKind::kInvalid) << c.sql;
    EXPECT_EQ(got.reason, c.reason) << c.sql;
  }
}

TEST(PgSqlClassifier, ReasonsNameTheDecidingWord) {
  EXPECT_EQ(classify_sql("SELECT 1").explain(), "query (SELECT)");
  EXPECT_EQ(classify_sql("begin").explain(), "transaction control (begin)");
  EXPECT_EQ(classify_sql("SELECT * FROM t FOR NO KEY UPDATE").explain(),
            "row-locking clause (FOR NO KEY UPDATE)");
  EXPECT_EQ(to_string(SqlKind::kRead), "read");
  EXPECT_EQ(to_string(SqlKind::kWrite), "write");
  EXPECT_EQ(to_string(SqlKind::kInvalid), "invalid");
}

}  // namespace
}  // namespace holdfast::pg
