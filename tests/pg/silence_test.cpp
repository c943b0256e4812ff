// Silence is a fault (DESIGN.md §10): a real server frozen with SIGSTOP (postmaster and
// backends, as a paused VM), and a long lock on a working one, against pg::Database.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"
#include "pg_test_support.hpp"

namespace holdfast {
namespace {

using pgtest::Admin;
using pgtest::eventually;
using pgtest::Freeze;
using pgtest::PrivateServer;
using pgtest::seconds_since;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

constexpr Duration kWindow = seconds(6);

struct Answer {
  Status status;
  double seconds = 0;
};

// Runs `call` as one request with the origin's 6 s window, on a thread of its own.
template <class F>
std::thread request(Answer& out, F call) {
  return std::thread([&out, call] {
    RequestScope scope(kWindow);
    const auto start = Steady::now();
    out.status = call();
    out.seconds = seconds_since(start);
  });
}

TEST(Silence, AFrozenServerIsFoundSilentAndEveryCallIsAnsweredWellInsideItsWindow) {
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server;
  ASSERT_FALSE(server.url().empty());
  {
    Admin admin(server.url());
    admin.exec("CREATE TABLE games (id int PRIMARY KEY, name text)");
    admin.exec("INSERT INTO games VALUES (1, 'tennis')");
  }
  pg::DatabaseOptions o;
  o.url = server.url();
  o.application_name = "silence-victim";
  pg::Database db(o);
  ASSERT_TRUE(db.read("SELECT name FROM games WHERE id = 1").ok());
  ASSERT_TRUE(db.write("UPDATE games SET name = 'squash' WHERE id = 1").ok());

  Freeze freeze(server.postmaster_pid());
  ASSERT_TRUE(freeze.frozen());
  // Reads and a write meet the frozen server; more come while it is found silent.
  std::vector<Answer> answers(6);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < 4; ++i) {
    threads.push_back(request(
        answers[i], [&db] { return db.read("SELECT name FROM games WHERE id = 1").status(); }));
  }
  threads.push_back(request(answers[4], [&db] {
    return db.write("UPDATE games SET name = 'padel' WHERE id = 1").status();
  }));
  std::this_thread::sleep_for(milliseconds(1500));
  threads.push_back(request(
      answers[5], [&db] { return db.read("SELECT name FROM games WHERE id = 1").status(); }));
  for (std::thread& t : threads)
    t.join();

  EXPECT_TRUE(db.silent());
  EXPECT_NE(db.shield().breaker().state(), BreakerState::kClosed);
  EXPECT_GE(db.shield().metrics().snapshot().silences, 1u);
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (i == 4) continue;  // the write: below
    const Answer& a = answers[i];
    EXPECT_FALSE(a.status.ok()) << i;
    // Answered because the server was found silent, not at the end of the window.
    EXPECT_NE(a.status.code(), Code::kDeadlineExceeded) << i << ": " << a.status.to_string();
    EXPECT_LT(a.seconds, 6.0) << i << ": " << a.status.to_string();
  }
  // The write in flight waits for its deadline (its outcome could still have become known)
  // and no longer: the window, the client's grace and the cancel's.
  EXPECT_FALSE(answers[4].status.ok());
  EXPECT_LT(answers[4].seconds, 6.0 + 0.05 + 0.2 + 0.3) << answers[4].status.to_string();
  // The request that came once the silence was known was answered at once, with when to
  // come back, and never reached the server.
  EXPECT_EQ(answers[5].status.stop_reason(), StopReason::kBreakerOpen)
      << answers[5].status.to_string();
  EXPECT_GT(answers[5].status.retry_after(), Duration::zero());
  // The write that met the silence may have been applied: it says so, and is not repeated.
  EXPECT_NE(answers[4].status.fault().outcome, Outcome::kNotApplied)
      << answers[4].status.to_string();

  // Thawed, the server is found again without any request having to wait for it.
  freeze.thaw();
  EXPECT_TRUE(eventually([&] { return !db.silent(); }, milliseconds(5000)));
  EXPECT_TRUE(eventually(
      [&] {
        RequestScope scope(kWindow);
        return db.read("SELECT name FROM games WHERE id = 1").ok();
      },
      milliseconds(5000)));
  EXPECT_EQ(db.shield().breaker().state(), BreakerState::kClosed);
  // The write that met the silence was applied once or not at all.
  Admin admin(server.url());
  const std::string name(admin.exec("SELECT name FROM games WHERE id = 1").text(0, 0));
  EXPECT_TRUE(name == "squash" || name == "padel") << name;
}

TEST(Silence, ACancelThatAFrozenServerNeverAnswersDoesNotHoldTheCaller) {
  // Without the watch, the window alone bounds the call: at its end the cancel goes out on
  // another thread (libpq's PQcancel would block until the thaw) and the connection is
  // abandoned.
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server;
  ASSERT_FALSE(server.url().empty());
  pg::DatabaseOptions o;
  o.url = server.url();
  o.silence_after = Duration::zero();
  pg::Database db(o);
  ASSERT_TRUE(db.read("SELECT 1").ok());

  Freeze freeze(server.postmaster_pid());
  ASSERT_TRUE(freeze.frozen());
  Answer answer;
  std::atomic<bool> done{false};
  std::thread t([&] {
    RequestScope scope(seconds(1));
    const auto start = Steady::now();
    answer.status = db.read("SELECT 1").status();
    answer.seconds = seconds_since(start);
    done = true;
  });
  // Answered while the server is still frozen (it stays frozen for 5 s).
  const bool answered_while_frozen = eventually([&] { return done.load(); }, milliseconds(5000));
  freeze.thaw();
  t.join();
  EXPECT_TRUE(answered_while_frozen) << "the call waited for the thaw";
  EXPECT_FALSE(answer.status.ok());
  EXPECT_EQ(answer.status.fault().outcome, Outcome::kUnknown) << answer.status.to_string();
  // And the pool is not left with a stuck connection: the next call works.
  EXPECT_TRUE(eventually([&] { return db.read("SELECT 1").ok(); }, milliseconds(5000)));
}

TEST(Silence, ACommitInFlightWhenTheServerFreezesIsAnsweredWithinItsWindowAsUnknown) {
  // The server freezes between the transaction's statements and its COMMIT. The COMMIT waits
  // for its deadline (its outcome could still have become known), and asking the server what
  // became of the transaction is pointless while it is known to be silent: the answer comes
  // at the window's end, not kMinResolveTime (2 s) later.
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server;
  ASSERT_FALSE(server.url().empty());
  Admin(server.url()).exec("CREATE TABLE in_doubt (id int)");
  pg::DatabaseOptions o;
  o.url = server.url();
  pg::Database db(o);
  ASSERT_TRUE(db.read("SELECT 1").ok());

  std::optional<Freeze> freeze;
  pg::TransactionReport report;
  Answer answer;
  {
    RequestScope scope(kWindow);
    const auto start = Steady::now();
    pg::TransactionOptions t;
    t.report = &report;
    answer.status = db.transaction(
        [&](pg::Transaction& tx) -> Status {
          if (Status s = tx.query("INSERT INTO in_doubt VALUES (1)").status(); !s.ok()) return s;
          freeze.emplace(server.postmaster_pid());  // the COMMIT meets a frozen server
          return Status();
        },
        t);
    answer.seconds = seconds_since(start);
  }
  ASSERT_TRUE(freeze.has_value() && freeze->frozen());
  freeze->thaw();
  EXPECT_FALSE(answer.status.ok());
  EXPECT_EQ(answer.status.fault().outcome, Outcome::kUnknown) << answer.status.to_string();
  EXPECT_EQ(report.commits_in_doubt, 1) << answer.status.to_string();
  EXPECT_LT(answer.seconds, 6.0 + 0.05 + 0.25 + 0.3) << answer.status.to_string();
}

TEST(Silence, AWriteInFlightWhenTheServerFreezesIsAnsweredAsUnknownOnceTheSilenceIsFound) {
  // Issue 45, item 3: with reads on a standby, the primary's only work in flight at a freeze is
  // a write, sent before anything could tell. Once the check confirms the silence (about
  // silence_after + silence_check_timeout), the write is answered: its outcome is unknown (it
  // was sent), and waiting out the window would not make it known while the server is frozen.
  HOLDFAST_REQUIRE_PG_SERVER();
  PrivateServer server;
  ASSERT_FALSE(server.url().empty());
  Admin(server.url()).exec("CREATE TABLE in_flight (id int)");
  pg::DatabaseOptions o;
  o.url = server.url();
  pg::Database db(o);
  ASSERT_TRUE(db.read("SELECT 1").ok());

  Answer answer;
  std::thread writer = request(answer, [&] {
    return db.write("INSERT INTO in_flight SELECT 1 FROM pg_sleep(0.5)").status();
  });
  std::this_thread::sleep_for(milliseconds(150));  // the INSERT is running on the server
  std::optional<Freeze> freeze;
  freeze.emplace(server.postmaster_pid());
  writer.join();
  ASSERT_TRUE(freeze->frozen());
  freeze->thaw();
  EXPECT_FALSE(answer.status.ok());
  EXPECT_EQ(answer.status.fault().outcome, Outcome::kUnknown) << answer.status.to_string();
  // 0.5 s of quiet, a 0.5 s check, and a margin; not the 6 s window.
  EXPECT_LT(answer.seconds, 1.5) << answer.status.to_string();
}

// A table with one row, a Database on the test server that has read it, and a transaction of
// another connection that holds the table locked until release(). Dropped at the end.
struct LockedTable {
  explicit LockedTable(const std::string& prefix) : table(pgtest::unique(prefix)) {
    admin.exec("CREATE TABLE " + table + " (id int)");
    admin.exec("INSERT INTO " + table + " VALUES (1)");
    EXPECT_TRUE(db.read("SELECT count(*) FROM " + table).ok());
    holder.exec("BEGIN");
    holder.exec("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE");
  }
  ~LockedTable() {
    release();
    admin.exec("DROP TABLE " + table);
  }
  LockedTable(const LockedTable&) = delete;
  LockedTable& operator=(const LockedTable&) = delete;
  void release() {
    if (!released) holder.exec("COMMIT");
    released = true;
  }

  const std::string table;
  Admin admin{pgtest::server_url()};
  pg::Database db{[] {
    pg::DatabaseOptions o;
    o.url = pgtest::server_url();
    return o;
  }()};
  Admin holder{pgtest::server_url()};
  bool released = false;
};

TEST(Silence, AReadWaitingOnALongLockIsSlowNotSilent) {
  // The server still answers (the check, other work): the watch must not call it silent,
  // and the read that waits on the lock gets its rows when the lock goes.
  HOLDFAST_REQUIRE_PG_SERVER();
  LockedTable locked("silence_lock");
  pg::Database& db = locked.db;
  const std::string& table = locked.table;
  Answer answer;
  std::thread t =
      request(answer, [&] { return db.read("SELECT count(*) FROM " + table).status(); });
  std::this_thread::sleep_for(milliseconds(2500));  // several suspicions' worth
  EXPECT_FALSE(db.silent());
  locked.release();
  t.join();
  EXPECT_TRUE(answer.status.ok()) << answer.status.to_string();
  EXPECT_FALSE(db.silent());
  EXPECT_EQ(db.shield().breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(db.shield().metrics().snapshot().silences, 0u);
}

TEST(Silence, AReadWaitingOnALongLockIsCheckedWhileOtherReadsAreAnswered) {
  // Each wait is judged by its own quiet time (ADR 0058), as the asio Client judges: a read
  // that waits on a lock while other reads are answered is checked every silence_after (a
  // pooler that cannot get a query a server connection answers the others), the server
  // answers the checks, and the read gets its rows when the lock goes.
  HOLDFAST_REQUIRE_PG_SERVER();
  LockedTable locked("silence_lock_busy");
  pg::Database& db = locked.db;
  const std::string& table = locked.table;
  Answer answer;
  std::thread t =
      request(answer, [&] { return db.read("SELECT count(*) FROM " + table).status(); });
  int others = 0;
  const auto start = Steady::now();
  while (seconds_since(start) < 2.5) {  // other reads, answered every 20 ms
    RequestScope scope(seconds(1));
    EXPECT_TRUE(db.read("SELECT 1").ok());
    ++others;
    std::this_thread::sleep_for(milliseconds(20));
  }
  const std::uint64_t checks = db.silence_checks();
  EXPECT_GE(checks, 2u) << "the read that heard nothing was never checked";
  EXPECT_LE(checks, 6u) << "checked more often than every silence_after";
  EXPECT_GT(others, 20);
  EXPECT_FALSE(db.silent());
  locked.release();
  t.join();
  EXPECT_TRUE(answer.status.ok()) << answer.status.to_string();
  EXPECT_EQ(db.shield().metrics().snapshot().silences, 0u);
}

}  // namespace
}  // namespace holdfast
