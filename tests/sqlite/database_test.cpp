// Database, Statement and Transaction on real SQLite files: the API, the defaults, and bad
// input that must come back as a Status naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "holdfast/sqlite.hpp"
#include "holdfast/sqlite/statement.hpp"
#include "sqlite_faults.hpp"

namespace holdfast::sqlite {
namespace {

using ::testing::HasSubstr;
using testing::RawConnection;
using ::testing::StartsWith;
using testing::TempDir;

constexpr int kSqliteError = 1;
constexpr int kCantOpen = 14;
constexpr int kMisuse = 21;
constexpr int kMismatch = 20;
constexpr int kRange = 25;
constexpr int kNotADatabase = 26;
constexpr int kConstraintUnique = 2067;
constexpr int kConstraintForeignKey = 787;
constexpr int kConstraintDatatype = 3091;

Database open_db(const std::string& path, Options options = {}) {
  options.path = path;
  Result<Database> db = Database::open(options);
  EXPECT_TRUE(db.ok()) << db.status().to_string();
  return std::move(db).value();
}

struct DatabaseTest : ::testing::Test {
  TempDir dir;
  std::string path = dir.file("club.db");
  Database db = open_db(path);

  void SetUp() override {
    ASSERT_TRUE(db.execute_script(R"sql(
      CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, photo BLOB);
      CREATE TABLE payments(id INTEGER PRIMARY KEY,
                            user INTEGER NOT NULL REFERENCES users(id),
                            cents INTEGER NOT NULL, note TEXT);
      INSERT INTO users(id, name) VALUES (1, 'ala'), (2, 'ola');
    )sql")
                    .ok());
  }

  std::int64_t count(const char* table) {
    Result<RawConnection> raw = RawConnection::open(path);
    EXPECT_TRUE(raw.ok());
    Result<std::int64_t> n = raw->query_int(std::string("SELECT count(*) FROM ") + table);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    return n.value_or(-1);
  }
};

// --- Opening -------------------------------------------------------------------------

TEST_F(DatabaseTest, OpensInWalWithSynchronousNormalAndForeignKeysOnEveryConnection) {
  EXPECT_EQ(db.query_one<std::string>("PRAGMA journal_mode")->value_or(""), "wal");
  // Read on a read connection: the settings are the same there.
  EXPECT_EQ(db.query_one<std::int64_t>("PRAGMA synchronous")->value_or(-1), 1);
  EXPECT_EQ(db.query_one<std::int64_t>("PRAGMA foreign_keys")->value_or(-1), 1);
  EXPECT_EQ(db.query_one<std::int64_t>("PRAGMA query_only")->value_or(-1), 1);
  Result<Exec> orphan = db.execute("INSERT INTO payments(user, cents) VALUES (99, 100)");
  ASSERT_FALSE(orphan.ok());
  EXPECT_EQ(orphan.status().sqlite_code(), kConstraintForeignKey);
}

TEST(DatabaseOpen, AMissingFileWithCreateFalseIsAStatusNamingTheFile) {
  TempDir dir;
  Options options;
  options.path = dir.file("nope.db");
  options.create = false;
  Result<Database> db = Database::open(options);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().sqlite_code(), kCantOpen);
  EXPECT_THAT(std::string(db.status().message()), HasSubstr(options.path));
  EXPECT_THAT(std::string(db.status().message()), HasSubstr("does not exist"));
  EXPECT_FALSE(db.status().fault().transient());
}

TEST(DatabaseOpen, AFileInAMissingDirectoryCannotBeOpened) {
  TempDir dir;
  Options options;
  options.path = dir.file("no/such/dir/club.db");
  Result<Database> db = Database::open(options);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().sqlite_code() & 0xff, kCantOpen);
  EXPECT_THAT(std::string(db.status().message()), HasSubstr("cannot open database"));
  EXPECT_THAT(std::string(db.status().message()), HasSubstr(options.path));
}

TEST(DatabaseOpen, AFileThatIsNotADatabaseIsNamedAsSuch) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  std::ofstream(path) << "these are my notes, not a database; they are long enough to have a "
                         "header SQLite would read. "
                      << std::string(200, 'x');
  Options options;
  options.path = path;
  Result<Database> db = Database::open(options);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().sqlite_code(), kNotADatabase);
  EXPECT_THAT(std::string(db.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(db.status().message()), HasSubstr("not a database"));
}

TEST(DatabaseOpen, AReadOnlyFileIsReportedAsNotWritable) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write to any file";
  TempDir dir;
  const std::string path = dir.file("club.db");
  { ASSERT_TRUE(RawConnection::open(path)->exec("CREATE TABLE t(x)").ok()); }
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  Options options;
  options.path = path;
  options.journal_mode = JournalMode::kKeep;
  Result<Database> db = Database::open(options);
  ASSERT_FALSE(db.ok());
  EXPECT_THAT(std::string(db.status().message()), HasSubstr("not writable"));
}

TEST(DatabaseOpen, BadConfigurationThrowsNamingTheField) {
  Options options;
  options.path = ":memory:";
  options.read_connections = 0;
  EXPECT_THAT([&] { (void)Database::open(options); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("read_connections")));
  options.read_connections = 1;
  options.busy_timeout = std::chrono::milliseconds(-1);
  EXPECT_THAT([&] { (void)Database::open(options); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("busy_timeout")));
  options.path.clear();
  options.busy_timeout = {};
  EXPECT_THAT([&] { (void)Database::open(options); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("path")));
}

TEST(DatabaseOpen, ReadOnlyOpensWithoutChangingTheFileAndRefusesWrites) {
  TempDir dir;
  const std::string path = dir.file("club.db");
  {
    ASSERT_TRUE(
        RawConnection::open(path)->exec("CREATE TABLE t(x); INSERT INTO t VALUES (7)").ok());
  }
  Options options;
  options.path = path;
  options.read_only = true;
  Database db = open_db(path, options);
  EXPECT_EQ(db.query_one<std::int64_t>("SELECT x FROM t")->value_or(0), 7);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal")) << "the journal mode was changed";
  Result<Exec> w = db.execute("INSERT INTO t VALUES (8)");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("read-only"));
}

TEST(DatabaseOpen, InMemoryDatabaseIsSharedByAllItsConnections) {
  Options options;
  options.read_connections = 3;
  Database db = open_db(":memory:", options);
  ASSERT_TRUE(db.execute("CREATE TABLE t(x)").ok());
  ASSERT_TRUE(db.execute("INSERT INTO t VALUES (42)").ok());
  // Several threads at once use several read connections, all seeing the writer's row.
  std::atomic<int> seen{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        if (db.query_one<std::int64_t>("SELECT x FROM t")->value_or(0) == 42) ++seen;
      }
    });
  }
  for (auto& t : readers)
    t.join();
  EXPECT_EQ(seen.load(), 150);
  // Closing idle connections keeps the in-memory database alive.
  EXPECT_GE(db.close_idle_connections(), 1);
  EXPECT_EQ(db.query_one<std::int64_t>("SELECT x FROM t")->value_or(0), 42);
}

// --- Statements and bad input --------------------------------------------------------

TEST_F(DatabaseTest, BindsByIndexAndByNameAndReadsTypedColumns) {
  const std::string note = "court 3";
  ASSERT_TRUE(db.execute("INSERT INTO payments(user, cents, note) VALUES (?, :cents, ?)", 1,
                         named(":cents", 1250), note)
                  .ok());
  ASSERT_TRUE(db.execute("INSERT INTO payments(user, cents, note) VALUES (?, ?, ?)", 2, 900,
                         std::optional<std::string>())
                  .ok());
  Result<std::vector<std::tuple<std::string, std::int64_t, std::optional<std::string>>>> rows =
      db.query<std::string, std::int64_t, std::optional<std::string>>(
          "SELECT u.name, p.cents, p.note FROM payments p JOIN users u ON u.id = p.user "
          "ORDER BY p.id");
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0], std::make_tuple(std::string("ala"), std::int64_t{1250},
                                        std::optional<std::string>("court 3")));
  EXPECT_EQ((*rows)[1],
            std::make_tuple(std::string("ola"), std::int64_t{900}, std::optional<std::string>()));
}

TEST_F(DatabaseTest, EveryBindableTypeIsStoredAsSqliteStoresIt) {
  const std::string empty;
  const std::vector<std::byte> bytes = {std::byte{7}, std::byte{0}};
  const std::uint64_t fits = 9'000'000'000'000'000'000ull;
  // Each value, and the storage class and text SQLite reports for it.
  using Row = std::tuple<std::string, std::string>;
  const auto stored = [&](const auto& value) -> Row {
    Result<std::vector<Row>> r =
        db.query<std::string, std::string>("SELECT typeof(?1), coalesce(quote(?1), '')", value);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() && r->size() == 1 ? r->front() : Row{};
  };
  EXPECT_EQ(stored(true), Row("integer", "1"));
  EXPECT_EQ(stored(static_cast<unsigned char>(200)), Row("integer", "200"));
  EXPECT_EQ(stored(fits), Row("integer", "9000000000000000000"));
  EXPECT_EQ(stored(-2.5f), Row("real", "-2.5"));
  EXPECT_EQ(stored(empty), Row("text", "''"));  // "" is text, not NULL
  EXPECT_EQ(stored("court 3"), Row("text", "'court 3'"));
  EXPECT_EQ(stored(bytes), Row("blob", "X'0700'"));
  EXPECT_EQ(stored(Blob{}), Row("blob", "X''"));  // an empty blob is a blob
  EXPECT_EQ(stored(null), Row("null", "NULL"));
  EXPECT_EQ(stored(nullptr), Row("null", "NULL"));
  EXPECT_EQ(stored(std::optional<int>()), Row("null", "NULL"));
  EXPECT_EQ(stored(std::optional<int>(4)), Row("integer", "4"));
  EXPECT_EQ(stored(named("?1", 5)), Row("integer", "5"));

  // An unsigned value above SQLite's signed 64 bits is refused, naming the parameter.
  Result<Exec> big = db.execute("INSERT INTO payments(user, cents) VALUES (1, ?)",
                                std::uint64_t{9'300'000'000'000'000'000ull});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().sqlite_code(), kMismatch);
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("parameter 1 of 'INSERT INTO payments(user, cents) VALUES (1, ?)' does "
                        "not fit SQLite's signed 64-bit integer"));
  EXPECT_EQ(count("payments"), 0);
}

TEST_F(DatabaseTest, BlobsRoundTrip) {
  const std::array<std::byte, 4> photo = {std::byte{0}, std::byte{1}, std::byte{0xfe},
                                          std::byte{0}};
  ASSERT_TRUE(db.execute("UPDATE users SET photo = ? WHERE id = 1", Blob{photo}).ok());
  Result<std::optional<std::vector<std::byte>>> back =
      db.query_one<std::vector<std::byte>>("SELECT photo FROM users WHERE id = 1");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(**back, std::vector<std::byte>(photo.begin(), photo.end()));
}

TEST_F(DatabaseTest, AStatementCanBeSteppedResetAndRunAgainWithNewBindings) {
  Result<Transaction> tx = db.begin();
  ASSERT_TRUE(tx.ok()) << tx.status().to_string();
  {
    Result<Statement> st = tx->statement("SELECT name FROM users WHERE id >= :from ORDER BY id");
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(st->parameter_count(), 1);
    EXPECT_EQ(st->parameter_index(":from"), 1);
    ASSERT_TRUE(st->bind(":from", 1).ok());
    std::vector<std::string> names;
    for (;;) {
      Result<bool> row = st->step();
      ASSERT_TRUE(row.ok());
      if (!*row) break;
      names.push_back(st->column<std::string>(0));
    }
    EXPECT_EQ(names, (std::vector<std::string>{"ala", "ola"}));
    st->reset();
    ASSERT_TRUE(st->bind(1, 2).ok());
    ASSERT_TRUE(st->step().value());
    EXPECT_EQ(st->row().text(0), "ola");
    EXPECT_EQ(st->row().type(0), Type::kText);
    EXPECT_EQ(st->row().name(0), "name");
  }
  EXPECT_TRUE(tx->commit().ok());
}

TEST_F(DatabaseTest, BadSqlIsAStatusWithTheEnginesMessageAndTheSql) {
  Result<Exec> r = db.execute("SELEC name FROM users");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code(), kSqliteError);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("syntax error"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("SELEC name"));
  EXPECT_FALSE(r.status().fault().transient());

  Result<Query> missing = db.prepare("SELECT * FROM no_such_table");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no such table: no_such_table"));
}

TEST_F(DatabaseTest, AWrongNumberOfValuesIsRefusedBeforeAnythingRuns) {
  Result<Exec> r = db.execute("INSERT INTO payments(user, cents) VALUES (?, ?)", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code(), kRange);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("has 2 parameters, 1 value was given"));
  EXPECT_EQ(count("payments"), 0);

  Result<Exec> named_wrong = db.execute("INSERT INTO payments(user, cents) VALUES (:user, :cents)",
                                        named(":user", 1), named(":amount", 5));
  ASSERT_FALSE(named_wrong.ok());
  EXPECT_THAT(std::string(named_wrong.status().message()),
              HasSubstr("no parameter named ':amount'"));
  EXPECT_EQ(count("payments"), 0);
}

TEST_F(DatabaseTest, AColumnReadAsTheWrongTypeNamesTheColumnAndItsType) {
  Result<std::optional<std::int64_t>> r =
      db.query_one<std::int64_t>("SELECT name FROM users WHERE id = 1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code(), kMismatch);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("column 0 ('name') holds TEXT"));

  Result<std::optional<std::string>> null =
      db.query_one<std::string>("SELECT photo FROM users WHERE id = 1");
  ASSERT_FALSE(null.ok());
  EXPECT_THAT(std::string(null.status().message()), HasSubstr("NULL"));

  Result<std::optional<std::int8_t>> big = db.query_one<std::int8_t>("SELECT 1000");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("range"));

  Result<std::vector<std::tuple<std::int64_t, std::string>>> few =
      db.query<std::int64_t, std::string>("SELECT id FROM users");
  ASSERT_FALSE(few.ok());
  EXPECT_THAT(std::string(few.status().message()), HasSubstr("returns 1 column, 2 were asked"));
}

TEST_F(DatabaseTest, AValueOfTheWrongTypeForAStrictTableIsRefusedByTheEngine) {
  ASSERT_TRUE(db.execute("CREATE TABLE scores(points INTEGER NOT NULL) STRICT").ok());
  const std::string points = "many";
  Result<Exec> r = db.execute("INSERT INTO scores VALUES (?)", points);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code(), kConstraintDatatype);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("scores.points"));
  EXPECT_EQ(count("scores"), 0);
}

TEST_F(DatabaseTest, SeveralStatementsInOneCallAreRefusedNotHalfRun) {
  Result<Exec> r =
      db.execute("INSERT INTO users(name) VALUES ('ela'); DELETE FROM users WHERE id = 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("more than one statement"));
  EXPECT_EQ(count("users"), 2);
  // A trailing comment or semicolon is not a second statement.
  EXPECT_TRUE(db.query_one<std::int64_t>("SELECT count(*) FROM users; -- all of them").ok());
}

TEST_F(DatabaseTest, TransactionControlIsRefusedOutsideTransaction) {
  Result<Exec> begin = db.execute("BEGIN");
  ASSERT_FALSE(begin.ok());
  EXPECT_THAT(std::string(begin.status().message()), HasSubstr("transaction control"));
  Result<Exec> savepoint = db.execute("SAVEPOINT a");
  ASSERT_FALSE(savepoint.ok());
  EXPECT_THAT(std::string(savepoint.status().message()), HasSubstr("inside a Transaction"));
  // The writer is still in autocommit: a write goes through on its own.
  EXPECT_TRUE(db.execute("INSERT INTO users(name) VALUES ('ela')").ok());
  EXPECT_EQ(count("users"), 3);
}

TEST_F(DatabaseTest, AQueryFromAnotherDatabaseIsRefused) {
  Database other = open_db(dir.file("other.db"));
  ASSERT_TRUE(other.execute("CREATE TABLE users(id INTEGER)").ok());
  Result<Query> q = other.prepare("SELECT count(*) FROM users");
  ASSERT_TRUE(q.ok());
  Result<std::optional<std::int64_t>> r = db.query_one<std::int64_t>(*q);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sqlite_code(), kMisuse);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("another Database"));
}

TEST_F(DatabaseTest, ForEachWalksEveryRowAndStopsAtTheFunctionsError) {
  std::vector<std::string> names;
  ASSERT_TRUE(db.for_each("SELECT name FROM users ORDER BY id", [&](const Row& row) {
                  names.emplace_back(row.text(0));
                }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"ala", "ola"}));

  int calls = 0;
  Status stopped = db.for_each("SELECT name FROM users ORDER BY id", [&](const Row&) -> Status {
    ++calls;
    return Status(Code::kCancelled, "enough");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(stopped.code(), Code::kCancelled);
  EXPECT_EQ(stopped.stop_reason(), StopReason::kNotSafeToRepeat);
}

TEST_F(DatabaseTest, SqlBeyondTheStatementCacheStillRunsPreparedPerUse) {
  Options options;
  options.statement_cache = 2;
  Database small = open_db(dir.file("small.db"), options);
  ASSERT_TRUE(small.execute("CREATE TABLE t(x)").ok());         // 1st cached text
  Result<Query> a = small.prepare("INSERT INTO t VALUES (?)");  // 2nd
  Result<Query> b = small.prepare("SELECT count(*) FROM t");    // 3rd: beyond
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->cached());
  EXPECT_FALSE(b->cached());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(small.execute(*a, i).ok());
  EXPECT_EQ(small.query_one<std::int64_t>(*b)->value_or(0), 3);
}

// --- Transactions --------------------------------------------------------------------

TEST_F(DatabaseTest, ATransactionDestroyedWithoutCommitIsRolledBack) {
  {
    Result<Transaction> tx = db.begin();
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(tx->execute("INSERT INTO users(name) VALUES ('ela')").ok());
    EXPECT_TRUE(tx->is_open());
  }
  EXPECT_EQ(count("users"), 2);
  // The writer is free again.
  EXPECT_TRUE(db.execute("INSERT INTO users(name) VALUES ('ula')").ok());
  EXPECT_EQ(count("users"), 3);
}

TEST_F(DatabaseTest, AFailedTransactionLeavesNoPartialRows) {
  int calls = 0;
  Status s = db.transaction([&](Transaction& tx) -> Status {
    ++calls;
    for (const char* name : {"ela", "ula", "ala"}) {  // 'ala' exists: UNIQUE fails
      Result<Exec> r = tx.execute("INSERT INTO users(name) VALUES (?)", name);
      if (!r.ok()) {
        EXPECT_EQ(r.status().txn_state(), TxnState::kStillOpen);
        return r.status();
      }
    }
    return Status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.sqlite_code(), kConstraintUnique);
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(count("users"), 2);
}

TEST_F(DatabaseTest, ATransactionFunctionMayReturnAValue) {
  Result<std::int64_t> id = db.transaction([&](Transaction& tx) -> Result<std::int64_t> {
    Result<Exec> r = tx.execute("INSERT INTO users(name) VALUES ('ela')");
    if (!r.ok()) return r.status();
    return r->last_insert_rowid;
  });
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(*id, 3);
  EXPECT_EQ(count("users"), 3);
}

TEST_F(DatabaseTest, InsideATransactionSavepointsWorkAndBeginIsRefused) {
  Result<Transaction> tx = db.begin();
  ASSERT_TRUE(tx.ok());
  ASSERT_TRUE(tx->execute("SAVEPOINT before_ela").ok());
  ASSERT_TRUE(tx->execute("INSERT INTO users(name) VALUES ('ela')").ok());
  ASSERT_TRUE(tx->execute("ROLLBACK TO before_ela").ok());
  Result<Exec> nested = tx->execute("BEGIN");
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.status().txn_state(), TxnState::kStillOpen);
  ASSERT_TRUE(tx->commit().ok());
  EXPECT_FALSE(tx->is_open());
  EXPECT_EQ(count("users"), 2);
  Result<Exec> late = tx->execute("INSERT INTO users(name) VALUES ('ula')");
  ASSERT_FALSE(late.ok());
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("already finished"));
}

TEST_F(DatabaseTest, AScriptIsAllOrNothing) {
  Status s = db.execute_script(R"sql(
    INSERT INTO users(name) VALUES ('ela');
    INSERT INTO users(name) VALUES ('ola');  -- UNIQUE fails here
  )sql");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.sqlite_code(), kConstraintUnique);
  EXPECT_EQ(s.txn_state(), TxnState::kRolledBack);
  EXPECT_EQ(count("users"), 2);
  Status control = db.execute_script("INSERT INTO users(name) VALUES ('ela'); COMMIT;");
  ASSERT_FALSE(control.ok());
  EXPECT_THAT(std::string(control.message()), HasSubstr("must not contain"));
  EXPECT_EQ(count("users"), 2);
}

TEST_F(DatabaseTest, WritersOfManyThreadsAreAllApplied) {
  constexpr int kThreads = 4;
  constexpr int kEach = 25;
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (!db.execute("INSERT INTO payments(user, cents) VALUES (1, ?)", t * 1000 + i).ok()) {
          ++failures;
        }
      }
    });
  }
  for (auto& w : writers)
    w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(count("payments"), kThreads * kEach);
}

}  // namespace
}  // namespace holdfast::sqlite
