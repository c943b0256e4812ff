#include "holdfast/core/shield.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/health_probe.hpp"
#include "quiet_options.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

Status overload() {
  return sqlite_status(5, "database is locked");
}
Status syntax_error() {
  return sqlite_status(1, "near \"SELEC\": syntax error");
}
// A lost connection: the attempt may have been applied.
Status connection_lost() {
  return postgres_status("", "server closed the connection");
}

using holdfast::test_support::quiet_options;

// Opens the breaker the way the database would: five requests that met lock contention
// (SQLITE_BUSY) in a row.
void trip(Shield& shield) {
  for (int i = 0; i < 5; ++i) {
    RetryWindow window(seconds(6), shield.clock());
    Shield::Call call(shield, shield.reads(), Operation::read(), &window, Random(99));
    Shield::Admission a = call.admit(shield.clock().now());
    ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt);
    (void)call.failed(std::move(a.permit), overload(), shield.clock().now(), {});
  }
  ASSERT_EQ(shield.breaker().state(), BreakerState::kOpen);
}

// The database answers a health probe: true when that closed the breaker (and woke the
// requests waiting for it).
bool probe_succeeds(Shield& shield) {
  HealthProbe::Options po;
  po.background = false;
  HealthProbe probe(
      shield.breaker(), [] { return Status(); }, po);
  return probe.probe_now().closed;
}

TEST(Shield, RejectsANegativeQueueWaitOrProbeWait) {
  Shield::Options o;
  o.queue_wait = milliseconds(-1);
  try {
    Shield s("main", o);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("queue_wait"));
  }
  o = Shield::Options{};
  o.probe_wait = milliseconds(-1);
  try {
    Shield s("main", o);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("probe_wait"));
  }
}

TEST(Shield, TheSuccessPathMakesOneAttemptAndWaitsForNothing) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  RetryStats stats;
  Result<int> r = shield.run(
      Operation::read("one"), [] { return Result<int>(7); }, &stats);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(stats.attempts, 1);
  EXPECT_EQ(stats.stop, StopReason::kNone);
  EXPECT_EQ(clock.total_slept(), Duration::zero());
  EXPECT_EQ(shield.metrics().snapshot().successes, 1u);
  EXPECT_EQ(shield.breaker().window_counts(clock.now()).calls, 1u);
}

TEST(Shield, ReadsAreRetriedOnTheOriginScheduleAndFeedTheThrottle) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  int calls = 0;
  RetryStats stats;
  Status s = shield.run(
      Operation::read(), [&] { return ++calls < 3 ? overload() : Status(); }, &stats);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(stats.attempts, 3);
  EXPECT_GE(stats.slept, milliseconds(100 + 300));  // 200 ms and 600 ms, each -50%
  EXPECT_LE(stats.slept, milliseconds(300 + 900));  // ... and +50%
  EXPECT_EQ(stats.slept, clock.total_slept());
  EXPECT_DOUBLE_EQ(shield.throttle().tokens(), 10.0 - 2.0 + 0.1);
  const Metrics::Snapshot m = shield.metrics().snapshot();
  EXPECT_EQ(m.attempts, 3u);
  EXPECT_EQ(m.retries, 2u);
  EXPECT_EQ(m.faults[static_cast<int>(RetryScope::kStatement)][1], 2u);
}

TEST(Shield, AWriteThatMayHaveBeenAppliedIsNeverRepeated) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  int calls = 0;
  Status w = shield.run(Operation::write("payment"), [&] { return ++calls, connection_lost(); });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(w.stop_reason(), StopReason::kNotSafeToRepeat);
  // The same fault on a read is retried.
  calls = 0;
  Status r =
      shield.run(Operation::read(), [&] { return ++calls < 2 ? connection_lost() : Status(); });
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(calls, 2);
}

TEST(Shield, APermanentFaultStopsAtOnceAndNeverTouchesTheBreakerOrThrottle) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  for (int i = 0; i < 50; ++i) {
    RetryStats stats;
    Status s = shield.run(
        Operation::read(), [] { return syntax_error(); }, &stats);
    EXPECT_EQ(s.stop_reason(), StopReason::kPermanent);
    EXPECT_EQ(stats.attempts, 1);
  }
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(shield.throttle().tokens(), 10.0);
}

TEST(Shield, ACancelledAttemptStopsWithCancelled) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  Status s = shield.run(Operation::read(), [] { return Status(Code::kCancelled, "client left"); });
  EXPECT_EQ(s.stop_reason(), StopReason::kCancelled);
  EXPECT_EQ(shield.breaker().window_counts(clock.now()).calls, 0u);
}

TEST(Shield, WhileTheDatabaseIsBusyStopsWithThrottledWhenTheThrottleRefusesARetry) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.throttle.floor_per_second = 0;
  // A limit of two whatever the latency (100 x the normal would shrink it below two).
  o.limit.min = 2;
  o.limit.initial = 2;
  o.limit.max = 2;
  Shield shield("main", o, clock);
  for (int i = 0; i < 5; ++i)
    shield.throttle().record_failure();
  // Busy: the database answers slower than normal, and another call holds a place.
  for (int i = 0; i < o.limit.short_samples; ++i)
    shield.limit().record(milliseconds(5), false);
  shield.limit().record(milliseconds(500), false);
  ASSERT_TRUE(shield.limit().tight());
  shield.limit().acquire();
  shield.limit().record(milliseconds(500), false);
  ASSERT_TRUE(shield.limit().busy());
  int calls = 0;
  RetryStats stats;
  Status s = shield.run(
      Operation::read(), [&] { return ++calls, overload(); }, &stats);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kThrottled);
  EXPECT_EQ(stats.stop, StopReason::kThrottled);
  EXPECT_EQ(s.attempts(), 1);
  EXPECT_EQ(s.sqlite_code(), 5) << "the last underlying error is kept";
  EXPECT_EQ(shield.metrics().snapshot().throttled, 1u);
  EXPECT_EQ(clock.total_slept(), Duration::zero()) << "refused before sleeping";
  shield.limit().release();
}

TEST(Shield, WithRoomToSpareARetryGoesWhateverTheThrottleSays) {
  // A brownout: the database refuses some attempts at once but has capacity to spare.
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.throttle.floor_per_second = 0;
  Shield shield("main", o, clock);
  for (int i = 0; i < 10; ++i)
    shield.throttle().record_failure();
  ASSERT_FALSE(shield.throttle().above_half());
  int calls = 0;
  Status s = shield.run(Operation::read(), [&] {
    return ++calls == 1 ? postgres_status("53300", "sorry, too many clients already") : Status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(calls, 2);
}

TEST(Shield, StopsWhenTheWindowIsSpent) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.reads.max_attempts(100);
  o.breaker.consecutive_failures = 0;  // keep the breaker out of this
  o.throttle.floor_per_second = 1000;  // and the throttle
  Shield shield("main", o, clock);
  RequestScope scope(seconds(6), clock);
  const TimePoint start = clock.now();
  Status s = shield.run(Operation::read(), [] { return overload(); });
  EXPECT_EQ(s.stop_reason(), StopReason::kWindowSpent);
  EXPECT_LE(clock.now() - start, seconds(6));
  EXPECT_EQ(shield.metrics().snapshot().windows_spent, 1u);
}

TEST(Shield, WhileOpenARequestWaitsForAProbeThatFitsItsWindowAndBecomesIt) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  trip(shield);
  const TimePoint opened = clock.now();
  RequestScope scope(seconds(6), clock);
  RetryStats stats;
  Result<int> r = shield.run(
      Operation::read(),
      [&] {
        EXPECT_EQ(clock.now(), opened + milliseconds(250));
        EXPECT_EQ(shield.breaker().state(), BreakerState::kHalfOpen) << "this attempt is the probe";
        return Result<int>(1);
      },
      &stats);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(stats.attempts, 1);
  EXPECT_EQ(stats.slept, milliseconds(250));
  EXPECT_EQ(shield.metrics().snapshot().breaker_waits, 1u);
}

TEST(Shield, AfterARefusedConnectionARequestFailsAtOnceWithRetryAfter) {
  // Not lock contention: the database is down. Waiting for the probe would not pay.
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  for (int i = 0; i < 5; ++i) {
    RetryWindow window(seconds(6), clock);
    Shield::Call call(shield, shield.reads(), Operation::read(), &window, Random(7));
    Shield::Admission a = call.admit(clock.now());
    ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt);
    const Classification refused = classify_pg_connect_failure();
    (void)call.failed(std::move(a.permit), Status(refused.code, "refused", refused.fault),
                      clock.now(), {});
  }
  ASSERT_EQ(shield.breaker().state(), BreakerState::kOpen);
  RequestScope scope(seconds(6), clock);
  const TimePoint start = clock.now();
  Status s = shield.run(Operation::read(), [] { return Status(); });
  EXPECT_EQ(s.stop_reason(), StopReason::kBreakerOpen);
  EXPECT_EQ(clock.now(), start) << "answered at once";
  EXPECT_EQ(s.retry_after(), milliseconds(250));
}

// A clock whose coarse reading lags by up to a tick, as Linux's CLOCK_MONOTONIC_COARSE
// does (4 ms), over a ManualClock.
class TickingClock final : public Clock {
 public:
  TickingClock(ManualClock& precise, Duration tick) : precise_(precise), tick_(tick) {}
  [[nodiscard]] TimePoint now() const noexcept override { return precise_.now(); }
  [[nodiscard]] TimePoint coarse_now() const noexcept override {
    const Duration t = precise_.now().time_since_epoch();
    return TimePoint(t - t % tick_);
  }
  bool sleep_until(TimePoint deadline, const Signal* wake, std::uint64_t seen) override {
    return precise_.sleep_until(deadline, wake, seen);
  }

 private:
  ManualClock& precise_;
  Duration tick_;
};

// A client told "retry after N" that waits N is admitted then, wherever the open period
// ends within a tick of the coarse clock: it is not told to retry after a sliver of the
// tick again and again, which would spend its calls in a busy loop.
TEST(Shield, AClientThatWaitsOutTheRetryAfterOfAnOpenBreakerIsAdmitted) {
  for (int offset_us = 0; offset_us < 4000; offset_us += 100) {
    ManualClock precise;
    TickingClock clock(precise, milliseconds(4));
    precise.advance(std::chrono::microseconds(offset_us));
    Shield::Options o = quiet_options();
    o.probe_wait = Duration::zero();  // a refusal is answered at once
    Shield shield("main", o, clock);
    trip(shield);
    precise.advance(std::chrono::microseconds(1700));  // into the open period
    int refusals = 0;
    for (;;) {
      RequestScope scope(seconds(6), clock);
      Status s = shield.run(Operation::read(), [] { return Status(); });
      if (s.ok()) break;
      ASSERT_EQ(s.stop_reason(), StopReason::kBreakerOpen) << s.to_string();
      ASSERT_LT(++refusals, 3) << "offset " << offset_us << " us: " << s.to_string();
      precise.advance(s.retry_after());
    }
  }
}

TEST(Shield, AProbeThatRanOutOfItsCallersWindowDoesNotGrowTheOpenPeriod) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  trip(shield);
  const Duration before = shield.breaker().open_duration();
  clock.advance(milliseconds(250));
  RetryWindow window(seconds(1), clock);
  window.open(clock.now());
  Shield::Call call(shield, shield.reads(), Operation::read(), &window, Random(5));
  Shield::Admission a = call.admit(clock.now());
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt);
  ASSERT_TRUE(a.permit.is_probe());
  clock.advance(seconds(1));  // the attempt's timeout was the rest of the window
  (void)call.failed(std::move(a.permit), connection_lost(), clock.now(), seconds(1));
  EXPECT_EQ(shield.breaker().state(), BreakerState::kHalfOpen) << "no evidence either way";
  EXPECT_EQ(shield.breaker().open_duration(), before);
  // A caller whose window cannot carry an attempt does not take the probe at all.
  RetryWindow short_window(seconds(6), clock);
  short_window.open(clock.now() - seconds(6) + milliseconds(10));
  Shield::Call late(shield, shield.reads(), Operation::read(), &short_window, Random(6));
  Shield::Admission b = late.admit(clock.now());
  EXPECT_EQ(b.kind, Shield::Admission::Kind::kStop);
  EXPECT_TRUE(shield.breaker().acquire(clock.now()).is_probe()) << "the probe is still free";
}

TEST(Shield, ARequestWhoseWindowCannotFitTheNextProbeFailsAtOnce) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(10);
  o.breaker.open_max = seconds(10);
  Shield shield("main", o, clock);
  trip(shield);
  RequestScope scope(seconds(6), clock);
  const TimePoint start = clock.now();
  int calls = 0;
  RetryStats stats;
  Status s = shield.run(
      Operation::read("schedule"), [&] { return ++calls, Status(); }, &stats);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(clock.now(), start) << "no waiting";
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.stop_reason(), StopReason::kBreakerOpen);
  EXPECT_EQ(s.retry_after(), seconds(10));
  EXPECT_FALSE(s.fault().overload);
  EXPECT_EQ(breaker_result(s), CallResult::kNeutral) << "our shedding never feeds a breaker";
  EXPECT_THAT(s.message(), HasSubstr("circuit breaker of 'main' is open"));
  EXPECT_EQ(stats.attempts, 0);
  EXPECT_EQ(stats.stop, StopReason::kBreakerOpen);
  EXPECT_EQ(shield.metrics().snapshot().breaker_rejected, 1u);
  // And an outer retry loop does not retry it either (it has a stop reason).
  int outer = 0;
  Status again = retry(shield.reads(), Operation::read(), [&] { return ++outer, s; });
  EXPECT_EQ(outer, 1);
  EXPECT_EQ(again.stop_reason(), StopReason::kBreakerOpen);
}

TEST(Shield, AnIsolatedBreakerFailsRequestsAtOnce) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  shield.breaker().isolate();
  Status s = shield.run(Operation::read(), [] { return Status(); });
  EXPECT_EQ(s.stop_reason(), StopReason::kBreakerOpen);
  EXPECT_EQ(s.retry_after(), shield.breaker().options().open_max);
}

TEST(Shield, ASingleAttemptShieldMakesOneAttemptPerCallAndNeverOpensItsBreaker) {
  ManualClock clock;
  const TimePoint start = clock.now();
  Shield shield("baseline", Shield::Options::single_attempt(), clock);
  for (int i = 0; i < 200; ++i) {
    RequestScope request(seconds(6), clock);
    int attempts = 0;
    Status s = shield.run(Operation::read(), [&] {
      ++attempts;
      return overload();
    });
    ASSERT_EQ(attempts, 1) << "call " << i;
    ASSERT_EQ(s.code(), overload().code()) << "the driver's own error, not a shed: " << i;
  }
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(clock.now(), start) << "nothing waited";
}

TEST(Shield, TheNonBlockingCallSaysWhatToWaitForAndTheProbeWakesIt) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(4);
  o.breaker.open_max = seconds(4);
  o.probe_wait = seconds(4);
  Shield shield("main", o, clock);
  trip(shield);
  const TimePoint opened = clock.now();
  RetryWindow w1(seconds(6), clock);
  RetryWindow w2(seconds(6), clock);
  Shield::Call first(shield, shield.reads(), Operation::read(), &w1, Random(1));
  Shield::Call second(shield, shield.reads(), Operation::read(), &w2, Random(2));
  Shield::Admission a1 = first.admit(clock.now());
  Shield::Admission a2 = second.admit(clock.now());
  ASSERT_EQ(a1.kind, Shield::Admission::Kind::kWait);
  ASSERT_EQ(a2.kind, Shield::Admission::Kind::kWait);
  EXPECT_EQ(a1.until, opened + seconds(4));
  EXPECT_NE(a1.wake, a2.wake) << "each waiter sleeps on its own signal";
  EXPECT_TRUE(w1.is_open()) << "being refused opens the request's window";
  EXPECT_EQ(shield.waiting(), 2);

  // A health probe succeeds one second in: both are woken at once, each with a place.
  clock.advance(seconds(1));
  ASSERT_TRUE(probe_succeeds(shield));
  EXPECT_NE(a1.wake->generation(), a1.seen);
  EXPECT_NE(a2.wake->generation(), a2.seen);
  EXPECT_TRUE(first.woken());
  EXPECT_EQ(shield.waiting(), 0);
  Shield::Admission again = first.admit(clock.now());
  ASSERT_EQ(again.kind, Shield::Admission::Kind::kAttempt);
  first.succeeded(std::move(again.permit));
  EXPECT_EQ(first.stats().attempts, 1);
}

// Three requests wait for the probe; it succeeds; with a limit of two, two go at once and
// the third goes the moment one of them is done — not on a timer of its own. A newcomer
// queues behind it: the freed place goes to the first in line, and only to it.
TEST(Shield, WaitersReleasedByAProbeGoAsTheLimitHasRoomThenOnePerFreedPlace) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.limit.min = 1;
  o.limit.initial = 2;
  o.limit.max = 2;
  Shield shield("main", o, clock);
  trip(shield);
  RetryWindow w1(seconds(6), clock);
  RetryWindow w2(seconds(6), clock);
  RetryWindow w3(seconds(6), clock);
  RetryWindow w4(seconds(6), clock);
  Shield::Call first(shield, shield.reads(), Operation::read(), &w1, Random(1));
  Shield::Call second(shield, shield.reads(), Operation::read(), &w2, Random(2));
  Shield::Call third(shield, shield.reads(), Operation::read(), &w3, Random(3));
  Shield::Call fresh(shield, shield.reads(), Operation::read(), &w4, Random(4));
  for (Shield::Call* c : {&first, &second, &third})
    ASSERT_EQ(c->admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  clock.advance(milliseconds(100));
  ASSERT_TRUE(probe_succeeds(shield));
  EXPECT_TRUE(first.woken());
  EXPECT_TRUE(second.woken());
  EXPECT_FALSE(third.woken()) << "the limit has room for two";

  Shield::Admission a1 = first.admit(clock.now());
  Shield::Admission a2 = second.admit(clock.now());
  ASSERT_EQ(a1.kind, Shield::Admission::Kind::kAttempt);
  ASSERT_EQ(a2.kind, Shield::Admission::Kind::kAttempt);
  EXPECT_EQ(shield.limit().in_flight(), 2);
  Shield::Admission a4 = fresh.admit(clock.now());
  ASSERT_EQ(a4.kind, Shield::Admission::Kind::kWait) << "it may not overtake the third";
  EXPECT_EQ(shield.waiting(), 2);

  clock.advance(milliseconds(2));
  first.succeeded(std::move(a1.permit));
  EXPECT_TRUE(third.woken()) << "the freed place went to the first in line";
  EXPECT_FALSE(fresh.woken()) << "and only to it";
  Shield::Admission a3 = third.admit(clock.now());
  ASSERT_EQ(a3.kind, Shield::Admission::Kind::kAttempt);
  EXPECT_EQ(shield.limit().in_flight(), 2);
  second.succeeded(std::move(a2.permit));
  EXPECT_TRUE(fresh.woken());
  a4 = fresh.admit(clock.now());
  ASSERT_EQ(a4.kind, Shield::Admission::Kind::kAttempt);
  third.succeeded(std::move(a3.permit));
  fresh.succeeded(std::move(a4.permit));
  EXPECT_EQ(shield.limit().in_flight(), 0);
  EXPECT_EQ(shield.metrics().snapshot().breaker_rejected, 0u);
}

TEST(Shield, APlaceComesBackWhenTheAttemptFailsOrTheCallIsGone) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.limit.min = 1;
  o.limit.initial = 1;
  o.limit.max = 1;
  Shield shield("main", o, clock);
  RetryWindow w1(seconds(6), clock);
  RetryWindow w2(seconds(6), clock);
  RetryWindow w3(seconds(6), clock);
  Shield::Call failing(shield, shield.reads(), Operation::read(), &w1, Random(1));
  std::optional<Shield::Call> gone;
  gone.emplace(shield, shield.reads(), Operation::read(), &w2, Random(2));
  Shield::Call waiter(shield, shield.reads(), Operation::read(), &w3, Random(3));
  // The database answers slower than normal (a millisecond): the limit counts and checks
  // from now on; the waits it expects (a few ms) fit in the line.
  for (int i = 0; i < o.limit.short_samples; ++i)
    shield.limit().record(milliseconds(1), false);
  shield.limit().record(milliseconds(10), false);
  Shield::Admission a = failing.admit(clock.now());
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt);
  // The limit of one is taken: the others queue.
  ASSERT_EQ(gone->admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  ASSERT_EQ(waiter.admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  // The attempt fails with a fault that is retried: its place goes to the first waiter.
  const RetryDecision v = failing.failed(std::move(a.permit), overload(), clock.now(), {});
  EXPECT_TRUE(v.retry);
  EXPECT_TRUE(gone->woken());
  // That request goes away holding the place (an exception, a cancelled request): the
  // place goes on to the next.
  gone.reset();
  EXPECT_TRUE(waiter.woken());
  Shield::Admission c = waiter.admit(clock.now());
  ASSERT_EQ(c.kind, Shield::Admission::Kind::kAttempt);
  waiter.succeeded(std::move(c.permit));
  EXPECT_EQ(shield.limit().in_flight(), 0);
  EXPECT_EQ(shield.waiting(), 0);
}

TEST(Shield, SixteenBlockedRequestsAreAllReleasedByTheSuccessfulProbe) {
  // The panel's concurrency (DESIGN.md §4): every request waits for the probe, and all
  // go at once (16 is within the limit) the moment it succeeds.
  ManualClock clock(ManualClock::Mode::kBlocking);
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(4);
  o.breaker.open_max = seconds(4);
  o.probe_wait = seconds(4);
  Shield shield("main", o, clock);
  trip(shield);
  const TimePoint opened = clock.now();
  constexpr int kRequests = 16;
  std::vector<std::thread> requests;
  std::vector<Status> results(kRequests, Status(Code::kUnknown, "not run"));
  std::vector<TimePoint> attempted(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    requests.emplace_back([&, i] {
      RequestScope scope(seconds(6), clock);
      results[static_cast<std::size_t>(i)] = shield.run(Operation::read(), [&, i] {
        attempted[static_cast<std::size_t>(i)] = clock.now();
        return Status();
      });
    });
  }
  clock.wait_for_sleepers(kRequests);
  clock.advance(seconds(1));
  ASSERT_TRUE(probe_succeeds(shield));
  for (auto& t : requests)
    t.join();
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(results[static_cast<std::size_t>(i)].ok()) << i;
    EXPECT_EQ(attempted[static_cast<std::size_t>(i)], opened + seconds(1)) << i;
  }
  EXPECT_EQ(shield.metrics().snapshot().breaker_rejected, 0u);
}

TEST(Shield, ABlockedRequestIsReleasedByTheSuccessfulProbeNotByItsOwnTimer) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(4);
  o.breaker.open_max = seconds(4);
  o.probe_wait = seconds(4);
  Shield shield("main", o, clock);
  trip(shield);
  const TimePoint opened = clock.now();
  std::atomic<bool> done{false};
  TimePoint attempted_at{};
  Status result(Code::kUnknown, "not run");
  std::thread request([&] {
    RequestScope scope(seconds(6), clock);
    result = shield.run(Operation::read(), [&] {
      attempted_at = clock.now();
      return Status();
    });
    done = true;
  });
  clock.wait_for_sleepers(1);  // the request sleeps until the probe due at +4 s
  clock.advance(seconds(1));
  EXPECT_FALSE(done.load());
  ASSERT_TRUE(probe_succeeds(shield));
  request.join();  // woken by the probe: no virtual time passes
  ASSERT_TRUE(result.ok()) << result.to_string();
  EXPECT_EQ(attempted_at, opened + seconds(1)) << "not at its own timer (+4 s)";
  EXPECT_EQ(clock.now(), opened + seconds(1));
}

TEST(Shield, AnAttemptThatThrowsCountsAsNeutralAndFreesItsProbeLease) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  trip(shield);
  clock.advance(milliseconds(500));
  EXPECT_THROW(shield.run(Operation::read(), []() -> Status { throw std::runtime_error("bug"); }),
               std::runtime_error);
  EXPECT_EQ(shield.breaker().state(), BreakerState::kHalfOpen);
  EXPECT_TRUE(shield.breaker().acquire(clock.now()).is_probe()) << "the lease was freed";
}

TEST(Shield, TheCallersPolicyOverloadIsUsed) {
  ManualClock clock;
  Shield shield("main", quiet_options(), clock);
  RetryPolicy once = RetryPolicy::no_retry();
  once.clock(clock);
  int calls = 0;
  Status s = shield.run(once, Operation::read(), [&] { return ++calls, overload(); });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kAttemptsExhausted);
}

TEST(Shield, WritesUseTheWritesPolicyAndReadsTheReadsPolicy) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.writes.max_attempts(2);
  Shield shield("main", o, clock);
  EXPECT_EQ(&shield.policy_for(Operation::read()), &shield.reads());
  EXPECT_EQ(&shield.policy_for(Operation::idempotent_write()), &shield.reads());
  EXPECT_EQ(&shield.policy_for(Operation::write()), &shield.writes());
  EXPECT_EQ(&shield.reads().clock(), &clock);
  EXPECT_EQ(&shield.writes().clock(), &clock);
  int calls = 0;
  Status s = shield.run(Operation::write(), [&] { return ++calls, overload(); });
  EXPECT_EQ(calls, 2) << "SQLITE_BUSY applied nothing: a write may be retried";
  EXPECT_EQ(s.stop_reason(), StopReason::kAttemptsExhausted);
}

}  // namespace
}  // namespace holdfast
