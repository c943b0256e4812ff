// Replicas on a real streaming hot standby (scripts/pg-test-server.sh with
// HOLDFAST_PG_STANDBY=1): reads go to the standby, writes to the primary; while the
// standby is down the primary answers reads at once, and reads return to the standby once
// a probe finds it back; a request's reads see its own writes (the standby answers them only
// once it has replayed them: replay is paused for real with pg_wal_replay_pause()); a
// standby whose replay lags beyond max_replica_lag opens its breaker. Who answered is what
// the server says: pg_is_in_recovery().
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/detail/read_route.hpp"
#include "holdfast/pg/lsn.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::ReplayPause;
using pgtest::rows_and_who_sql;
using pgtest::server_url;
using pgtest::standby_url;
using pgtest::unique;

constexpr const char* kWho =
    "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END";

DatabaseOptions replicated(const std::string& primary, const std::string& standby) {
  DatabaseOptions o;
  o.url = primary;
  o.replica_urls = {standby};
  o.application_name = unique("hf_replicated");
  o.shield.breaker.consecutive_failures = 2;
  o.shield.breaker.open_initial = std::chrono::milliseconds(200);
  o.shield.breaker.open_max = std::chrono::milliseconds(400);
  return o;
}

// Who answered a read: "standby", "primary" or "error".
std::string who(Database& db) {
  RequestScope scope(std::chrono::seconds(2));
  auto r = db.read(kWho);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::string(r->text(0, 0)) : std::string("error");
}

// Several replicas share the reads in turn, as the Client's standbys do; one that is down
// leaves its reads to the others, and none fails. The test's one standby is listed twice:
// two replicas to the Database.
TEST(PgReplicas, ReadsAreSpreadOverTheReplicasInTurnAndADownOneLeavesThemToTheOthers) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  DatabaseOptions twice = replicated(server_url(), standby_url());
  twice.replica_urls = {standby_url(), standby_url()};
  Database db(twice);
  ASSERT_EQ(db.replica_count(), 2u);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(who(db), "standby");
  EXPECT_EQ(db.replica_shield(0).metrics().snapshot().successes, 10u);
  EXPECT_EQ(db.replica_shield(1).metrics().snapshot().successes, 10u);

  DatabaseOptions down = replicated(server_url(), standby_url());
  down.replica_urls = {"postgresql://postgres@127.0.0.1:1/postgres", standby_url()};
  Database one_down(down);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(who(one_down), "standby");
  EXPECT_EQ(one_down.replica_shield(1).metrics().snapshot().successes, 20u);
}

TEST(PgReplicas, ReadsGoToTheHotStandbyAndWritesToThePrimary) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_replicated");
  admin.exec("CREATE TABLE " + table + " (id int)");

  Database db(replicated(server_url(), standby_url()));
  ASSERT_EQ(db.replica_count(), 1u);
  EXPECT_EQ(who(db), "standby");
  auto wrote = db.write(std::string(kWho) + " || (SELECT count(*) FROM " + table + ")");
  ASSERT_TRUE(wrote.ok()) << wrote.status().to_string();
  EXPECT_EQ(wrote->text(0, 0), "primary0");
  ASSERT_TRUE(db.write("INSERT INTO " + table + " VALUES (1)").ok());
  EXPECT_EQ(admin.count("SELECT count(*) FROM " + table), 1);
  // Streamed to the standby, where reads find it.
  EXPECT_TRUE(pgtest::eventually([&] {
    auto r = db.read("SELECT count(*) FROM " + table);
    return r.ok() && r->text(0, 0) == "1";
  }));
  EXPECT_EQ(standby.count("SELECT count(*) FROM " + table), 1);
  EXPECT_EQ(db.replica_pool(0).stats().connects, 1u);
  admin.exec("DROP TABLE " + table);
}

// "<rows>/<who answered>" for `table`, read inside the current request.
std::string rows_and_who(Database& db, const std::string& table) {
  auto r = db.read(rows_and_who_sql(table));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::string(r->text(0, 0)) : std::string("error");
}

TEST(PgReplicas, ARequestReadsItsOwnWritesFromTheStandbyOnlyOnceItHasReplayedThem) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_own_writes");
  admin.exec("CREATE TABLE " + table + " (id int PRIMARY KEY)");
  ASSERT_TRUE(pgtest::eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = $1", {table}) == 1;
  }));
  DatabaseOptions o = replicated(server_url(), standby_url());
  o.max_replica_lag = std::chrono::seconds(60);  // this test is about own writes, not lag
  o.idempotency_table = unique("hf_keys");
  Database db(o);
  ASSERT_TRUE(db.create_idempotency_table().ok());

  Lsn written;
  {
    ReplayPause pause(standby);
    ASSERT_TRUE(pause.paused());
    {
      RequestScope request;
      EXPECT_TRUE(request_lsn().empty());
      ASSERT_TRUE(db.write("INSERT INTO " + table + " VALUES (1)").ok());
      written = request_lsn();
      EXPECT_FALSE(written.empty());
      // The standby has not replayed the write: the primary answers, with the row.
      EXPECT_EQ(rows_and_who(db, table), "1/primary");
    }
    {
      // A request that wrote nothing reads the standby, stale as it is.
      RequestScope request;
      EXPECT_TRUE(request_lsn().empty());
      EXPECT_EQ(rows_and_who(db, table), "0/standby");
    }
    {
      // A request that carries the earlier write's position (a signed-in session).
      RequestScope request;
      require_lsn(written);
      EXPECT_EQ(rows_and_who(db, table), "1/primary");
    }
    {
      // transaction() and once() record their commits' positions too.
      RequestScope request;
      ASSERT_TRUE(db.transaction([&](Transaction& tx) {
                      return tx.query("INSERT INTO " + table + " VALUES (2)").status();
                    }).ok());
      EXPECT_GT(request_lsn(), written);
      EXPECT_EQ(rows_and_who(db, table), "2/primary");
    }
    {
      RequestScope request;
      ASSERT_TRUE(db.once(unique("key"), [&](Transaction& tx) {
                      return tx.query("INSERT INTO " + table + " VALUES (3)").status();
                    }).ok());
      EXPECT_EQ(rows_and_who(db, table), "3/primary");
    }
    EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
  }
  // Replayed: the standby answers the request that carries the position.
  EXPECT_TRUE(pgtest::eventually([&] {
    RequestScope request;
    require_lsn(written);
    return rows_and_who(db, table) == "3/standby";
  }));
  EXPECT_EQ(Lsn::parse(written.to_string())->value, written.value);
  admin.exec("DROP TABLE " + table);
  admin.exec("DROP TABLE " + db.options().idempotency_table);
}

// A write whose WAL ends exactly on a page boundary: pg_current_wal_insert_lsn() then points
// past the next page's header, where the standby's replay never stops, and the request's
// reads would stay on the primary until someone else writes. Its position is the boundary,
// and once replayed the standby answers the request's reads.
TEST(PgReplicas, AWriteWhoseWalEndsOnAPageBoundaryIsReadFromTheStandbyOnceReplayed) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_page_end");
  admin.exec("CREATE TABLE " + table + " (id int)");
  ASSERT_TRUE(pgtest::eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = $1", {table}) == 1;
  }));
  DatabaseOptions o = replicated(server_url(), standby_url());
  o.max_replica_lag = std::chrono::seconds(60);  // about own writes, not lag
  Database db(o);
  const std::string insert = "INSERT INTO " + table + " VALUES (1)";
  const auto write = [&] {
    RequestScope request;
    EXPECT_TRUE(db.write(insert).ok());
    return request_lsn();
  };
  write();  // the first may carry the page's full image; the next ones are alike
  const std::uint64_t page = pgtest::wal_page_size(admin);
  std::uint64_t bytes = 0;  // one write's WAL, measured on a write within one page
  std::uint64_t inserted = 0;
  Lsn written;
  for (int i = 0; i < 30 && inserted % page != 24; ++i) {
    const bool filled = bytes != 0 && pgtest::fill_wal_page_but(admin, bytes);
    const std::uint64_t before = pgtest::wal_insert_position(admin);
    written = write();
    inserted = pgtest::wal_insert_position(admin);
    if (before / page == inserted / page) bytes = inserted - before;
    if (!filled) inserted = 0;
  }
  ASSERT_EQ(inserted % page, 24u) << "no write ended on a page boundary";
  EXPECT_EQ(written.value, inserted - 24) << "the request waits for a position no replay reaches";
  EXPECT_TRUE(pgtest::eventually(
      [&] {
        RequestScope request;
        require_lsn(written);
        return rows_and_who(db, table).ends_with("/standby");
      },
      std::chrono::milliseconds(3000)))
      << "the request's reads never went to the standby";
  admin.exec("DROP TABLE " + table);
}

TEST(PgReplicas, AForgedTimelineInOneRequestsPositionLeavesOtherRequestsOnTheStandby) {
  // A client may send any position back (the panel's cookie). One of a timeline far in the
  // future concerns that client alone: the others' reads still go to the standby.
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(pgtest::server_url());
  const std::string table = unique("hf_forged");
  admin.exec("CREATE TABLE " + table + " (id int)");
  Database db(replicated(pgtest::server_url(), pgtest::standby_url()));
  const auto who_sees = [&](Lsn position) {
    RequestScope request;
    require_lsn(position);
    auto r = db.read(kWho);
    return r.ok() ? std::string(r->text(0, 0)) : r.status().to_string();
  };
  EXPECT_EQ(who_sees(Lsn{1, 4294967295u}), "standby") << "position 0/1: replayed long ago";
  Lsn written;
  {
    RequestScope request;
    ASSERT_TRUE(db.write("INSERT INTO " + table + " VALUES (1)").ok());
    written = request_lsn();
  }
  ASSERT_NE(written.timeline, 0u);
  EXPECT_TRUE(pgtest::eventually([&] { return who_sees(written) == "standby"; }));
  admin.exec("DROP TABLE " + table);
}

// A standby that stopped replaying (the primary restarted and it has not streamed again yet)
// is not asked again for every read that needs a newer write: after finding it behind, such
// reads go straight to the primary for a hold that grows while its replay stays put. Reads
// that need nothing newer keep going to the standby.
TEST(PgReplicas, AStandbyFoundBehindTheRequestsWritesIsNotAskedByEveryRead) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_catch_up");
  admin.exec("CREATE TABLE " + table + " (id int PRIMARY KEY)");
  ASSERT_TRUE(pgtest::eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = $1", {table}) == 1;
  }));
  DatabaseOptions o = replicated(server_url(), standby_url());
  o.max_replica_lag = std::chrono::seconds(60);  // about own writes, not lag
  Database db(o);
  const auto replica_attempts = [&] { return db.replica_shield(0).metrics().snapshot().attempts; };
  Lsn written;
  {
    ReplayPause pause(standby);
    ASSERT_TRUE(pause.paused());
    {
      RequestScope request(std::chrono::seconds(30));
      ASSERT_TRUE(db.write("INSERT INTO " + table + " VALUES (1)").ok());
      written = request_lsn();
      const std::uint64_t before = replica_attempts();
      constexpr int kReads = 40;
      for (int i = 0; i < kReads; ++i)
        EXPECT_EQ(rows_and_who(db, table), "1/primary");
      // The first read found the standby behind; the holds (50 ms, 100 ms, 200 ms, ...)
      // keep all but a few of the others off it, however slowly this machine reads.
      const std::uint64_t asked = replica_attempts() - before;
      EXPECT_GE(asked, 1u);
      EXPECT_LE(asked, 6u) << "every read that needs the write asked the standby again";
    }
    {
      RequestScope other;  // needs no write: the standby answers, stale as it is
      EXPECT_EQ(rows_and_who(db, table), "0/standby");
    }
  }
  // Replaying again: within the longest hold (1 s) reads that need the write use the standby.
  EXPECT_TRUE(pgtest::eventually(
      [&] {
        RequestScope request;
        require_lsn(written);
        return rows_and_who(db, table) == "1/standby";
      },
      std::chrono::seconds(5)));
  admin.exec("DROP TABLE " + table);
}

// A table on the shared primary, streamed to the standby, and a Database that reads it
// with its primary down (nothing listens on port 1) and the standby as its replica.
struct PrimaryDown {
  explicit PrimaryDown(const std::string& prefix)
      : table(unique(prefix)), sql(rows_and_who_sql(table)) {
    admin.exec("CREATE TABLE " + table + " (id int PRIMARY KEY)");
    streamed = pgtest::eventually([&] {
      return standby.count("SELECT count(*) FROM pg_class WHERE relname = $1", {table}) == 1;
    });
    DatabaseOptions o = replicated("postgresql://postgres@127.0.0.1:1/postgres", standby_url());
    o.max_replica_lag = std::chrono::seconds(60);  // about own writes, not lag
    db = std::make_unique<Database>(o);
  }
  ~PrimaryDown() { admin.exec("DROP TABLE " + table); }
  PrimaryDown(const PrimaryDown&) = delete;
  PrimaryDown& operator=(const PrimaryDown&) = delete;

  // Inserts a row on the real primary; the WAL position of that write.
  Lsn insert() {
    admin.exec("INSERT INTO " + table + " VALUES (1)");
    return *Lsn::parse(admin.exec(detail::kWalPositionSql).text(0, 0));
  }
  // Whether the standby has replayed the row.
  bool replayed() { return standby.count("SELECT count(*) FROM " + table) == 1; }

  Admin admin{server_url()};
  Admin standby{standby_url()};
  const std::string table;
  const std::string sql;
  bool streamed = false;  // the table reached the standby
  std::unique_ptr<Database> db;
};

// When the primary goes down, the reads of a request that wrote just before (a worker
// who has just paid) may find the standby behind that write. The primary cannot answer;
// the standby, which receives the primary's last WAL as it goes, is asked once more,
// whatever hold it was given, and answers with the write: a fresh page, not a stale one.
TEST(PgReplicas, WhenThePrimaryCannotAnswerAStandbyThatWasBehindIsAskedAgain) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  PrimaryDown down("hf_behind_down");
  ASSERT_TRUE(down.streamed);
  const auto read = [&](Lsn need) {
    RequestScope request(std::chrono::seconds(2));
    require_lsn(need);
    return down.db->read(down.sql);
  };
  Lsn written;
  {
    ReplayPause pause(down.standby);
    ASSERT_TRUE(pause.paused());
    written = down.insert();
    // Behind and stuck: no answer (a stale page is the caller's to give), and each read
    // holds the standby off longer (up to 1 s) for the reads that need the write.
    for (int i = 0; i < 6; ++i) {
      auto r = read(written);
      ASSERT_FALSE(r.ok()) << r->text(0, 0);
    }
  }
  // Replayed now, within the standby's hold: the first read skips it, the primary fails,
  // and the standby is asked again.
  ASSERT_TRUE(pgtest::eventually([&] { return down.replayed(); }));
  auto r = read(written);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->text(0, 0), "1/standby");
}

// A read that needs a row the paused standby has not replayed: it finds the standby
// behind and the primary down, and waits 950 ms to retry the primary (a refusing server
// is waited for up to a second). Meanwhile replay resumes, another read sees the standby
// past the row, and `meanwhile` runs. The read's result, with its stats in `stats`.
Result<Rows> read_while_the_standby_catches_up(PrimaryDown& down, RetryStats& stats,
                                               const std::function<void()>& meanwhile) {
  Database& db = *down.db;
  const RetryPolicy slow =
      RetryPolicy().backoff(Backoff::steps({std::chrono::milliseconds(950)}, Jitter::none()));
  ReplayPause pause(down.standby);
  EXPECT_TRUE(pause.paused());
  const Lsn written = down.insert();
  Result<Rows> got = Status(Code::kUnknown, "not read");
  std::thread request([&] {
    RequestScope scope(std::chrono::seconds(5));
    require_lsn(written);
    ReadOptions r;
    r.policy = &slow;
    r.stats = &stats;
    got = db.read(down.sql, {}, r);
  });
  EXPECT_TRUE(pgtest::eventually([&] { return db.read_pool().stats().connect_failures >= 1; }));
  pause.resume();
  EXPECT_TRUE(pgtest::eventually([&] {
    RequestScope other;  // needs no write: reports how far the standby has replayed
    auto r = db.read(down.sql);
    return r.ok() && r->text(0, 0) == "1/standby";
  }));
  meanwhile();
  request.join();
  return got;
}

// The same read, while it waits to retry the primary: once other reads have seen the
// standby past the request's writes, the standby answers instead of the next attempt on
// the primary.
TEST(PgReplicas, AReadWaitingToRetryThePrimaryIsAnsweredByAStandbyThatCaughtUp) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  PrimaryDown down("hf_caught_up");
  ASSERT_TRUE(down.streamed);
  RetryStats stats;
  Result<Rows> got = read_while_the_standby_catches_up(down, stats, [] {});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->text(0, 0), "1/standby");
  EXPECT_EQ(down.db->read_pool().stats().connect_failures, 1u) << "the primary was tried again";
  EXPECT_EQ(stats.stop, StopReason::kNone);
}

// If that standby then cannot answer after all (its breaker opened), the read fails as
// the standby did: unavailable, a failure the page can answer with its stale copy, never
// holdfast's own cancellation of the retries.
TEST(PgReplicas, AStandbyThatCaughtUpButCannotAnswerLeavesItsOwnFailure) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  PrimaryDown down("hf_caught_up_shut");
  ASSERT_TRUE(down.streamed);
  RetryStats stats;
  Result<Rows> got = read_while_the_standby_catches_up(
      down, stats, [&] { down.db->replica_shield(0).breaker().isolate(); });
  ASSERT_FALSE(got.ok()) << got->text(0, 0);
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().to_string();
  EXPECT_NE(stats.stop, StopReason::kCancelled);
}

TEST(PgReplicas, AStandbyWhoseReplayLagsBeyondTheBoundOpensItsBreaker) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_lagging");
  admin.exec("CREATE TABLE " + table + " (id int)");
  ASSERT_TRUE(pgtest::eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = $1", {table}) == 1;
  }));
  DatabaseOptions o = replicated(server_url(), standby_url());
  o.max_replica_lag = std::chrono::milliseconds(300);
  Database db(o);
  EXPECT_EQ(who(db), "standby");
  {
    ReplayPause pause(standby);
    ASSERT_TRUE(pause.paused());
    // WAL the standby receives and does not replay.
    admin.exec("INSERT INTO " + table + " VALUES (1)");
    const auto paused_at = std::chrono::steady_clock::now();
    while (db.replica_shield(0).breaker().state() == BreakerState::kClosed &&
           pgtest::seconds_since(paused_at) < 5.0) {
      EXPECT_NE(who(db), "error");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_NE(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
    EXPECT_GE(pgtest::seconds_since(paused_at), 0.3);
    // Lagging, the standby answers nothing: the primary does.
    EXPECT_EQ(who(db), "primary");
  }
  // Replaying again: a probe finds it healthy and reads return to it.
  EXPECT_TRUE(pgtest::eventually([&] { return who(db) == "standby"; }, std::chrono::seconds(5)));
  EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
  admin.exec("DROP TABLE " + table);
}

// The background health probe judges a standby as its reads do: answering is not enough, it
// must also keep up with its replay. While replay is paused the probe keeps its breaker open;
// once it replays again the probe closes it.
TEST(PgReplicas, TheHealthProbeKeepsALaggingStandbysBreakerOpenUntilItReplaysAgain) {
  HOLDFAST_REQUIRE_PG_STANDBY();
  Admin admin(server_url());
  Admin standby(standby_url());
  const std::string table = unique("hf_probe_lag");
  admin.exec("CREATE TABLE " + table + " (id int)");
  ASSERT_TRUE(pgtest::eventually([&] {
    return standby.count("SELECT count(*) FROM pg_class WHERE relname = $1", {table}) == 1;
  }));
  DatabaseOptions o = replicated(server_url(), standby_url());
  o.max_replica_lag = std::chrono::milliseconds(300);
  o.health_probe_interval = std::chrono::milliseconds(50);
  Database db(o);
  EXPECT_EQ(who(db), "standby");
  const auto state = [&] { return db.replica_shield(0).breaker().state(); };
  {
    ReplayPause pause(standby);
    ASSERT_TRUE(pause.paused());
    admin.exec("INSERT INTO " + table + " VALUES (1)");  // received, not replayed
    const auto paused_at = std::chrono::steady_clock::now();
    while (state() == BreakerState::kClosed && pgtest::seconds_since(paused_at) < 5.0) {
      EXPECT_NE(who(db), "error");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_NE(state(), BreakerState::kClosed);
    // Many probe intervals later, still lagging: the probe has not closed the breaker.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    EXPECT_NE(state(), BreakerState::kClosed) << "the probe found a lagging standby healthy";
    EXPECT_EQ(who(db), "primary");
  }
  // Replaying again: the probe closes the breaker without a request having to try.
  EXPECT_TRUE(pgtest::eventually([&] { return state() == BreakerState::kClosed; },
                                 std::chrono::seconds(5)));
  EXPECT_EQ(who(db), "standby");
  admin.exec("DROP TABLE " + table);
}

TEST(PgReplicas, WhileTheStandbyIsStoppedThePrimaryAnswersReadsAtOnceAndTheyReturnAfterIt) {
  HOLDFAST_REQUIRE_PG_SERVER();
  pgtest::PrivateServer cluster(20, /*with_standby=*/true);
  ASSERT_FALSE(cluster.standby_url().empty()) << "the private primary + standby did not start";
  Database db(replicated(cluster.url(), cluster.standby_url()));
  EXPECT_EQ(who(db), "standby");

  ASSERT_TRUE(cluster.standby_down());
  // Reads keep being answered by the primary, at once, until the standby's breaker opens.
  // The pool retries a failed connect only after a short backoff, so how many reads that
  // takes depends on their pace: read for up to 3 s, 20 ms apart.
  const auto reading_since = std::chrono::steady_clock::now();
  int reads = 0;
  while (db.replica_shield(0).breaker().state() == BreakerState::kClosed &&
         pgtest::seconds_since(reading_since) < 3.0) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(who(db), "primary");
    EXPECT_LT(pgtest::seconds_since(start), 0.5) << "a read waited for the stopped standby";
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
  EXPECT_GE(reads, 1);
  EXPECT_GE(db.replica_pool(0).stats().connect_failures, 1u);
  // While it is open, too.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(who(db), "primary");
  EXPECT_LT(pgtest::seconds_since(start), 0.1);

  // Back: a read admitted as the breaker's probe finds it healthy, and reads return to it.
  ASSERT_TRUE(cluster.standby_up());
  EXPECT_TRUE(pgtest::eventually([&] { return who(db) == "standby"; }, std::chrono::seconds(5)));
  EXPECT_EQ(db.replica_shield(0).breaker().state(), BreakerState::kClosed);
}

}  // namespace
}  // namespace holdfast::pg
