#include "holdfast/log/database_sink.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fake_log_store.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast {
namespace {

using namespace std::chrono_literals;
using std::chrono::September;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_log::FakeLogStore;

// 2026-09-11T06:20:00.000Z: the origin's incident.
const WallTime kIncident =
    std::chrono::sys_days{std::chrono::year{2026} / September / 11} + 6h + 20min;

Status overloaded() {
  return sqlite_status(5, "database is locked");
}
Status read_only() {
  return sqlite_status(8, "attempt to write a readonly database");
}

DatabaseSink::Options test_options() {
  DatabaseSink::Options o;
  // The writer moves only when a test flushes, logs an ERROR or fills half the queue.
  o.linger = std::chrono::hours(1);
  return o;
}

std::vector<std::string> messages(const std::vector<LogRecord>& rows) {
  std::vector<std::string> out;
  for (const LogRecord& r : rows)
    out.push_back(r.message);
  return out;
}

// A Logger on virtual time writing only to a DatabaseSink over a FakeLogStore.
struct Fixture {
  ManualClock clock;
  FollowingWallClock wall{clock, kIncident};
  FakeLogStore store;
  std::shared_ptr<DatabaseSink> sink;
  Logger log;

  explicit Fixture(DatabaseSink::Options o = test_options())
      : sink(make_sink(o)), log(Logger::Options{&clock, &wall, false, {}}) {
    log.add_sink(sink);
  }
  std::shared_ptr<DatabaseSink> make_sink(DatabaseSink::Options o) {
    o.clock = &clock;
    o.wall = &wall;
    return std::make_shared<DatabaseSink>(store, o);
  }
  void flush() { ASSERT_TRUE(sink->flush()) << "the writer did not finish"; }
};

constexpr std::string_view kGap30 =
    "Log persistence paused for 30 s while the database was overloaded; skipped ";

TEST(DatabaseSink, StoresEntriesInTheBackgroundWithLevelContextMessageAndCreatedAt) {
  Fixture f;
  f.log.info("payments", "charged", {{"user", 42}, {"note", "two words"}});
  f.clock.advance(1500ms);
  f.log.warn("schedule", "slow render");
  EXPECT_TRUE(f.store.rows().empty()) << "the caller's thread never writes";
  f.flush();
  const auto rows = f.store.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].level, Level::kInfo);
  EXPECT_EQ(rows[0].context, "payments");
  EXPECT_EQ(rows[0].message, "charged user=42 note=\"two words\"");
  EXPECT_EQ(rows[0].created_at, kIncident);
  EXPECT_EQ(rows[1].level, Level::kWarn);
  EXPECT_EQ(rows[1].created_at, kIncident + 1500ms);
  EXPECT_EQ(f.sink->stats().stored, 2u);
  EXPECT_EQ(f.sink->stats().accepted, 2u);
}

TEST(DatabaseSink, DebugNeverReachesTheDatabase) {
  Fixture f;
  EXPECT_FALSE(f.sink->accepts(Level::kDebug));
  f.log.debug("retry", "schedule.games: attempt 1 failed");
  f.flush();
  EXPECT_TRUE(f.store.rows().empty());
  EXPECT_EQ(f.store.write_calls(), 0);
  EXPECT_EQ(f.sink->stats().accepted, 0u);
}

TEST(DatabaseSink, MinLevelWarnKeepsInfoOutOfTheTable) {
  auto o = test_options();
  o.min_level = Level::kWarn;
  Fixture f(o);
  f.log.info("a", "info");
  f.log.warn("a", "warn");
  f.flush();
  EXPECT_THAT(messages(f.store.rows()), ElementsAre("warn"));
}

TEST(DatabaseSink, WritesInBatchesOfAtMostBatchSizeOneStoreCallEach) {
  auto o = test_options();
  o.batch_size = 4;
  o.queue_capacity = 16;  // room for all ten: nothing is dropped whenever the writer runs
  Fixture f(o);
  for (int i = 0; i < 10; ++i)
    f.log.info("bulk", "entry", {{"i", i}});
  f.flush();
  const auto sizes = f.store.stored_sizes();
  std::size_t total = 0;
  for (std::size_t n : sizes) {
    EXPECT_LE(n, 4u);
    total += n;
  }
  EXPECT_EQ(total, 10u);
  EXPECT_GE(sizes.size(), 3u);
  EXPECT_EQ(f.store.rows().back().message, "entry i=9");
}

TEST(DatabaseSink, NewlinesStayInTheStoredMessage) {
  Fixture f;
  f.log.error("pg", "ERROR: deadlock detected\nDETAIL: Process 7 waits");
  f.flush();
  EXPECT_EQ(f.store.rows().at(0).message, "ERROR: deadlock detected\nDETAIL: Process 7 waits");
}

TEST(DatabaseSink, ALongMessageIsCutAtAUtf8BoundaryAndMarked) {
  auto o = test_options();
  o.max_message_bytes = 64;
  Fixture f(o);
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "\xC5\x82";  // "ł", two bytes each
  f.log.info("pl", text);
  f.flush();
  const std::string stored = f.store.rows().at(0).message;
  EXPECT_LE(stored.size(), 64u);
  ASSERT_THAT(stored, ::testing::EndsWith(" [truncated]"));
  const std::string kept = stored.substr(0, stored.size() - 12);
  EXPECT_EQ(kept.size() % 2, 0u) << "a two-byte character was split";
  EXPECT_EQ(kept, text.substr(0, kept.size()));
}

// --- The overload pause (the origin's rules) ---

TEST(DatabaseSinkPause, Pauses30sStoresOneErrorPer5sAndWritesTheGapLineFirstAfterwards) {
  Fixture f;
  f.store.fail_next(overloaded());
  f.log.info("schedule", "render 1");
  f.flush();
  EXPECT_TRUE(f.sink->paused());
  EXPECT_EQ(f.store.write_calls(), 1);

  f.log.info("schedule", "render 2");
  f.log.warn("schedule", "slow");
  f.log.error("payments", "failed at once");  // 0 s into the pause
  f.flush();
  EXPECT_EQ(f.store.write_calls(), 1) << "nothing may be written yet";

  f.clock.advance(5s);
  f.log.error("payments", "failed A");
  f.log.error("payments", "failed B");
  f.flush();
  EXPECT_THAT(messages(f.store.rows()), ElementsAre("failed A"));

  f.clock.advance(24s);  // 29 s into the pause
  f.log.info("schedule", "render 3");
  f.flush();
  EXPECT_TRUE(f.sink->paused());

  f.clock.advance(1s);  // 30 s: the pause is over
  EXPECT_FALSE(f.sink->paused());
  f.log.info("schedule", "render 4");
  f.flush();

  const auto rows = f.store.rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].message, std::string(kGap30) + "6 entries (INFO 3, WARN 1, ERROR 2)");
  EXPECT_EQ(rows[1].level, Level::kWarn);
  EXPECT_EQ(rows[1].context, "logger");
  EXPECT_EQ(rows[1].created_at, kIncident + 30s) << "dated like the entry it precedes";
  EXPECT_EQ(rows[2].message, "render 4");

  const DatabaseSinkStats s = f.sink->stats();
  EXPECT_EQ(s.skipped[Level::kInfo], 3u);
  EXPECT_EQ(s.skipped[Level::kWarn], 1u);
  EXPECT_EQ(s.skipped[Level::kError], 2u);
  EXPECT_EQ(s.stored, 2u);
  EXPECT_EQ(s.reports, 1u);
  EXPECT_EQ(s.pauses, 1u);
  EXPECT_EQ(s.failed_writes, 1u);
  EXPECT_FALSE(s.paused);
}

TEST(DatabaseSinkPause, ErrorsAreStoredAtMostOncePer5sDuringThePause) {
  Fixture f;
  f.store.fail_next(overloaded());
  f.log.info("schedule", "render");
  f.flush();
  for (int second = 1; second < 30; ++second) {
    f.clock.advance(1s);
    f.log.error("payments", "failed", {{"second", second}});
    f.flush();
  }
  EXPECT_THAT(messages(f.store.rows()),
              ElementsAre("failed second=5", "failed second=10", "failed second=15",
                          "failed second=20", "failed second=25"));
  EXPECT_EQ(f.sink->stats().skipped[Level::kError], 24u);
}

TEST(DatabaseSinkPause, ThePauseEndsExactly30sAfterTheFailure) {
  Fixture f;
  f.store.fail_next(overloaded());
  f.log.warn("schedule", "first");
  f.flush();
  f.clock.advance(30s - 1ms);
  f.log.info("schedule", "still paused");
  f.flush();
  EXPECT_TRUE(f.store.rows().empty());
  f.clock.advance(1ms);
  f.log.info("schedule", "resumed");
  f.flush();
  EXPECT_THAT(messages(f.store.rows()),
              ElementsAre(std::string(kGap30) + "2 entries (INFO 1, WARN 1, ERROR 0)", "resumed"));
}

TEST(DatabaseSinkPause, TheFailedBatchIsCountedAsSkippedAndNeverRetried) {
  Fixture f;
  f.store.fail_next(overloaded());
  f.log.info("a", "one");
  f.log.warn("a", "two");
  f.log.error("a", "three");  // wakes the writer: one batch of three
  f.flush();
  EXPECT_THAT(f.store.attempted_sizes(), ElementsAre(3u));
  f.clock.advance(30s);
  f.log.info("a", "four");
  f.flush();
  EXPECT_THAT(messages(f.store.rows()),
              ElementsAre(std::string(kGap30) + "3 entries (INFO 1, WARN 1, ERROR 1)", "four"));
  EXPECT_THAT(f.store.attempted_sizes(), ElementsAre(3u, 2u));
}

TEST(DatabaseSinkPause, APausedErrorWriteThatFailsAgainRestartsThePause) {
  Fixture f;
  f.store.fail_next(overloaded(), 2);
  f.log.info("a", "first");
  f.flush();
  f.clock.advance(5s);
  f.log.error("a", "error at 5 s");  // allowed, and fails with overload again
  f.flush();
  f.clock.advance(25s);  // 30 s after the first failure, 25 s after the second
  f.log.info("a", "at 30 s");
  f.flush();
  EXPECT_TRUE(f.store.rows().empty());
  EXPECT_TRUE(f.sink->paused());
  f.clock.advance(5s);
  f.log.info("a", "at 35 s");
  f.flush();
  EXPECT_THAT(messages(f.store.rows()),
              ElementsAre("Log persistence paused for 35 s while the database was overloaded; "
                          "skipped 3 entries (INFO 2, WARN 0, ERROR 1)",
                          "at 35 s"));
  EXPECT_EQ(f.sink->stats().pauses, 1u);
}

TEST(DatabaseSinkPause, AD1OverloadMessagePausesToo) {
  Fixture f;
  f.store.fail_next(d1_status("D1 DB is overloaded. Requests queued for too long."));
  f.log.info("a", "x");
  f.flush();
  EXPECT_TRUE(f.sink->paused());
}

TEST(DatabaseSinkPause, AnOverThePauseGapLineIsStoredAtShutdownWhenNothingElseCame) {
  ManualClock clock;
  FakeLogStore store;
  {
    auto o = test_options();
    o.clock = &clock;
    DatabaseSink sink(store, o);
    store.fail_next(overloaded());
    sink.write(LogEntry{Level::kInfo, "a", "lost to the pause", {}, clock.now(), kIncident});
    ASSERT_TRUE(sink.flush());
    clock.advance(30s);
  }
  EXPECT_THAT(messages(store.rows()),
              ElementsAre(std::string(kGap30) + "1 entry (INFO 1, WARN 0, ERROR 0)"));
}

// --- Failures that are not overload ---

TEST(DatabaseSinkFailure, ANonOverloadFailureIsCountedReportedOnceOnTheConsoleAndThenInTheTable) {
  const Level before = console::level();
  console::set_level(Level::kInfo);
  Fixture f;
  f.store.fail_next(read_only(), 2);
  ::testing::internal::CaptureStderr();
  f.log.info("a", "one");
  f.flush();
  f.log.warn("a", "two");
  f.flush();
  f.log.info("a", "three");
  f.flush();
  const std::string err = ::testing::internal::GetCapturedStderr();
  console::set_level(before);

  std::size_t reports = 0;
  for (auto at = err.find("Log persistence failed"); at != std::string::npos;
       at = err.find("Log persistence failed", at + 1)) {
    ++reports;
  }
  EXPECT_EQ(reports, 1u) << err;
  EXPECT_THAT(err, HasSubstr("Log persistence works again; lost 2 entries"));
  EXPECT_FALSE(f.sink->paused()) << "a read-only disk is not overload";

  const auto rows = f.store.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_THAT(
      rows[0].message,
      ::testing::StartsWith("Log persistence failed; lost 2 entries (INFO 1, WARN 1, ERROR 0): "));
  EXPECT_THAT(rows[0].message, HasSubstr("readonly"));
  EXPECT_EQ(rows[1].message, "three");
  const DatabaseSinkStats s = f.sink->stats();
  EXPECT_EQ(s.lost[Level::kInfo], 1u);
  EXPECT_EQ(s.lost[Level::kWarn], 1u);
  EXPECT_EQ(s.failed_writes, 2u);
}

TEST(DatabaseSinkFailure, AStoreThatThrowsNeverReachesTheCaller) {
  Fixture f;
  f.store.throw_next(3);
  EXPECT_NO_THROW(f.log.error("a", "one"));
  f.flush();
  EXPECT_NO_THROW(f.log.error("a", "two"));
  f.flush();
  EXPECT_EQ(f.sink->stats().lost[Level::kError], 2u);
  EXPECT_EQ(f.log.sink_failures(), 0u);
  EXPECT_FALSE(f.sink->paused());
}

TEST(DatabaseSinkFailure, ABrokenStoreLosesEverythingQuietlyAndNeverThrows) {
  Fixture f;
  f.store.fail_always(Status(Code::kInternal, "disk I/O error"));
  for (int i = 0; i < 100; ++i)
    EXPECT_NO_THROW(f.log.warn("a", "entry", {{"i", i}}));
  f.flush();
  EXPECT_EQ(f.sink->stats().lost[Level::kWarn], 100u);
  EXPECT_EQ(f.sink->stats().stored, 0u);
}

// --- The bounded queue ---

TEST(DatabaseSinkQueue, WhenFullItDropsTheLowestLevelsFirstAndCountsThem) {
  auto o = test_options();
  o.queue_capacity = 4;
  o.batch_size = 4;
  Fixture f(o);
  f.store.close_gate();
  f.log.error("q", "e0");  // the writer takes it and blocks in the store
  ASSERT_TRUE(f.store.wait_until_blocked());

  f.log.info("q", "i1");
  f.log.info("q", "i2");
  f.log.warn("q", "w1");
  f.log.warn("q", "w2");   // full
  f.log.info("q", "i3");   // dropped: nothing lower to evict
  f.log.warn("q", "w3");   // evicts i1
  f.log.error("q", "e1");  // evicts i2
  f.log.error("q", "e2");  // evicts w1
  f.log.error("q", "e3");  // evicts w2
  f.log.warn("q", "w4");   // dropped
  f.log.error("q", "e4");  // evicts w3
  f.log.error("q", "e5");  // dropped: only ERRORs are queued
  const DatabaseSinkStats s = f.sink->stats();
  EXPECT_EQ(s.dropped[Level::kInfo], 3u);
  EXPECT_EQ(s.dropped[Level::kWarn], 4u);
  EXPECT_EQ(s.dropped[Level::kError], 1u);
  EXPECT_EQ(s.queued, 4u);

  f.store.open_gate();
  f.flush();
  EXPECT_THAT(messages(f.store.rows()),
              ElementsAre("e0", "Log queue was full; dropped 8 entries (INFO 3, WARN 4, ERROR 1)",
                          "e1", "e2", "e3", "e4"));
}

TEST(DatabaseSinkQueue, LoggingNeverWaitsForAStoreThatHangs) {
  auto o = test_options();
  o.queue_capacity = 8;
  o.batch_size = 4;
  Fixture f(o);
  f.store.close_gate();
  f.log.error("q", "stuck");
  ASSERT_TRUE(f.store.wait_until_blocked());
  for (int i = 0; i < 1000; ++i)
    f.log.info("q", "while the store hangs");
  EXPECT_EQ(f.sink->stats().dropped[Level::kInfo], 1000u - 8u);
  f.store.open_gate();
  f.flush();
}

TEST(DatabaseSinkQueue, ManyThreadsLoggingAtOnceLoseNothingUncounted) {
  auto o = test_options();
  o.queue_capacity = 64;
  o.batch_size = 8;
  Fixture f(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&f, t] {
      for (int i = 0; i < 2000; ++i) {
        f.log.log(i % 10 == 0 ? Level::kError : Level::kInfo, "t", "entry", {{"t", t}, {"i", i}});
      }
    });
  }
  for (auto& th : threads)
    th.join();
  f.flush();
  const DatabaseSinkStats s = f.sink->stats();
  EXPECT_EQ(s.stored + s.dropped.total(), 8000u) << "every entry is stored or counted";
  EXPECT_EQ(f.store.rows().size(), s.stored + s.reports);
  EXPECT_EQ(s.queued, 0u);
}

// --- Lifetime ---

TEST(DatabaseSinkLifetime, TheDestructorStoresWhatIsQueued) {
  ManualClock clock;
  FakeLogStore store;
  {
    auto o = test_options();
    o.clock = &clock;
    DatabaseSink sink(store, o);
    for (int i = 0; i < 5; ++i) {
      sink.write(LogEntry{Level::kInfo, "a", "queued", {}, clock.now(), kIncident});
    }
  }
  EXPECT_EQ(store.rows().size(), 5u);
}

TEST(DatabaseSinkLifetime, ASinkCanOwnItsStore) {
  auto owned = std::make_unique<FakeLogStore>();
  FakeLogStore* store = owned.get();
  auto o = test_options();
  DatabaseSink sink(std::move(owned), o);
  sink.write(LogEntry{Level::kWarn, "a", "owned", {}, TimePoint{}, kIncident});
  ASSERT_TRUE(sink.flush());
  EXPECT_EQ(store->rows().size(), 1u);
  EXPECT_THROW(DatabaseSink(std::unique_ptr<LogStore>()), std::invalid_argument);
}

TEST(DatabaseSinkLifetime, BadOptionsNameTheField) {
  FakeLogStore store;
  auto error_of = [&](auto change) {
    DatabaseSink::Options o;
    change(o);
    try {
      DatabaseSink sink(store, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of([](auto& o) { o.queue_capacity = 0; }), HasSubstr("queue_capacity"));
  EXPECT_THAT(error_of([](auto& o) { o.batch_size = 0; }), HasSubstr("batch_size"));
  EXPECT_THAT(error_of([](auto& o) { o.batch_size = 2000; }), HasSubstr("batch_size"));
  EXPECT_THAT(error_of([](auto& o) { o.min_level = Level::kDebug; }), HasSubstr("min_level"));
  EXPECT_THAT(error_of([](auto& o) { o.overload_pause = -1s; }), HasSubstr("overload_pause"));
  EXPECT_THAT(error_of([](auto& o) { o.paused_error_interval = -1s; }),
              HasSubstr("paused_error_interval"));
  EXPECT_THAT(error_of([](auto& o) { o.max_message_bytes = 10; }), HasSubstr("max_message_bytes"));
  EXPECT_THAT(error_of([](auto& o) { o.linger = 0ms; }), HasSubstr("linger"));
  EXPECT_EQ(error_of([](auto&) {}), "no error");
}

}  // namespace
}  // namespace holdfast
