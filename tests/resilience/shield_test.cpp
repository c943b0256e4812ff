#include "holdfast/shield.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "holdfast/classify.hpp"
#include "holdfast/health_probe.hpp"

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

Shield::Options quiet_options() {
  Shield::Options o;
  o.reads.seed(11).on_retry([](const RetryEvent&) {});
  o.writes.seed(12).on_retry([](const RetryEvent&) {});
  return o;
}

// Opens the breaker the way the database would: five overload faults in a row.
void trip(Shield& shield) {
  for (int i = 0; i < 5; ++i) {
    shield.breaker().acquire(shield.clock().now()).record(overload());
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

TEST(Shield, RejectsANegativeWakeJitter) {
  Shield::Options o;
  o.wake_jitter = milliseconds(-1);
  try {
    Shield s("main", o);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("wake_jitter"));
  }
}

TEST(Shield, RejectsAReleaseConcurrencyBelowOne) {
  Shield::Options o;
  o.release_concurrency = 0;
  try {
    Shield s("main", o);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("release_concurrency"));
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

TEST(Shield, StopsWithThrottledWhenTheThrottleRefusesARetry) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.throttle.floor_per_second = 0;
  Shield shield("main", o, clock);
  for (int i = 0; i < 5; ++i)
    shield.throttle().record_failure();
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
        EXPECT_EQ(clock.now(), opened + milliseconds(500));
        EXPECT_EQ(shield.breaker().state(), BreakerState::kHalfOpen) << "this attempt is the probe";
        return Result<int>(1);
      },
      &stats);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(stats.attempts, 1);
  EXPECT_EQ(stats.slept, milliseconds(500));
  EXPECT_EQ(shield.metrics().snapshot().breaker_waits, 1u);
}

TEST(Shield, ARequestWhoseWindowCannotFitTheNextProbeFailsAtOnce) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(10);
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
  EXPECT_EQ(s.retry_after(), seconds(30));
}

TEST(Shield, TheNonBlockingCallSaysWhatToWaitForAndTheProbeWakesIt) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(4);
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
  EXPECT_EQ(a1.wake, &shield.signal());
  EXPECT_TRUE(w1.is_open()) << "being refused opens the request's window";
  EXPECT_GE(a1.jitter, Duration::zero());
  EXPECT_LE(a1.jitter, milliseconds(50));
  EXPECT_NE(a1.jitter, a2.jitter) << "waiters are spread out";

  // A health probe succeeds one second in: the waiters' signal moves at once.
  clock.advance(seconds(1));
  ASSERT_TRUE(probe_succeeds(shield));
  EXPECT_NE(a1.wake->generation(), a1.seen);
  clock.advance(a1.jitter);
  Shield::Admission again = first.admit(clock.now());
  ASSERT_EQ(again.kind, Shield::Admission::Kind::kAttempt);
  first.succeeded(std::move(again.permit));
  EXPECT_EQ(first.stats().attempts, 1);
}

// Three requests wait for the probe; it succeeds; with two gate slots two go at once and
// the third goes the moment one of them is done — not on a timer of its own.
TEST(Shield, WaitersReleasedByAProbeGoThroughTheGateAFewAtATime) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.release_concurrency = 2;
  Shield shield("main", o, clock);
  trip(shield);
  RetryWindow w1(seconds(6), clock);
  RetryWindow w2(seconds(6), clock);
  RetryWindow w3(seconds(6), clock);
  Shield::Call first(shield, shield.reads(), Operation::read(), &w1, Random(1));
  Shield::Call second(shield, shield.reads(), Operation::read(), &w2, Random(2));
  Shield::Call third(shield, shield.reads(), Operation::read(), &w3, Random(3));
  for (Shield::Call* c : {&first, &second, &third})
    ASSERT_EQ(c->admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  clock.advance(milliseconds(100));
  ASSERT_TRUE(probe_succeeds(shield));

  Shield::Admission a1 = first.admit(clock.now());
  Shield::Admission a2 = second.admit(clock.now());
  Shield::Admission a3 = third.admit(clock.now());
  ASSERT_EQ(a1.kind, Shield::Admission::Kind::kAttempt);
  ASSERT_EQ(a2.kind, Shield::Admission::Kind::kAttempt);
  ASSERT_EQ(a3.kind, Shield::Admission::Kind::kWait);
  EXPECT_EQ(a3.wake, &shield.signal());
  EXPECT_EQ(a3.until,
            clock.now() - milliseconds(100) + seconds(6) - shield.reads().last_attempt_time())
      << "it waits for a slot as long as its window lets it";
  // A request that never waited is not held back by the gate.
  RetryWindow w4(seconds(6), clock);
  Shield::Call fresh(shield, shield.reads(), Operation::read(), &w4, Random(4));
  Shield::Admission a4 = fresh.admit(clock.now());
  ASSERT_EQ(a4.kind, Shield::Admission::Kind::kAttempt);
  fresh.succeeded(std::move(a4.permit));
  EXPECT_EQ(a3.wake->generation(), a3.seen) << "only a gate slot or the breaker wakes it";

  clock.advance(milliseconds(2));
  first.succeeded(std::move(a1.permit));
  EXPECT_NE(a3.wake->generation(), a3.seen) << "a slot came back";
  Shield::Admission again = third.admit(clock.now());
  ASSERT_EQ(again.kind, Shield::Admission::Kind::kAttempt);
  third.succeeded(std::move(again.permit));
  second.succeeded(std::move(a2.permit));
  EXPECT_EQ(shield.metrics().snapshot().breaker_rejected, 0u);
}

TEST(Shield, AGateSlotComesBackWhenTheAttemptFailsOrTheCallIsGone) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.release_concurrency = 1;
  Shield shield("main", o, clock);
  trip(shield);
  RetryWindow w1(seconds(6), clock);
  RetryWindow w2(seconds(6), clock);
  RetryWindow w3(seconds(6), clock);
  Shield::Call failing(shield, shield.reads(), Operation::read(), &w1, Random(1));
  std::optional<Shield::Call> gone;
  gone.emplace(shield, shield.reads(), Operation::read(), &w2, Random(2));
  Shield::Call waiter(shield, shield.reads(), Operation::read(), &w3, Random(3));
  for (Shield::Call* c : {&failing, &*gone, &waiter})
    ASSERT_EQ(c->admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  ASSERT_TRUE(probe_succeeds(shield));

  Shield::Admission a = failing.admit(clock.now());
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt);
  ASSERT_EQ(gone->admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  // The attempt fails with a fault that is retried: its slot comes back at once.
  const Shield::Verdict v = failing.failed(std::move(a.permit), overload(), clock.now(), {});
  EXPECT_EQ(v.kind, Shield::Verdict::Kind::kRetry);
  Shield::Admission b = gone->admit(clock.now());
  ASSERT_EQ(b.kind, Shield::Admission::Kind::kAttempt);
  ASSERT_EQ(waiter.admit(clock.now()).kind, Shield::Admission::Kind::kWait);
  // Its request goes away holding the slot (an exception, a cancelled request): the slot
  // comes back with it.
  b = Shield::Admission{};
  gone.reset();
  Shield::Admission c = waiter.admit(clock.now());
  ASSERT_EQ(c.kind, Shield::Admission::Kind::kAttempt);
  waiter.succeeded(std::move(c.permit));
}

TEST(Shield, SixteenBlockedRequestsAreAllReleasedByTheSuccessfulProbe) {
  // The panel's concurrency (DESIGN.md §4): every request waits for the probe, and all
  // go through the release gate at once (16 < its 32 slots) the moment it succeeds.
  ManualClock clock(ManualClock::Mode::kBlocking);
  Shield::Options o = quiet_options();
  o.breaker.open_initial = seconds(4);
  o.wake_jitter = Duration::zero();
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
  // The jitter is checked with the non-blocking Call above; here it would make the woken
  // thread sleep again at a moment this test cannot observe.
  o.wake_jitter = Duration::zero();
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
