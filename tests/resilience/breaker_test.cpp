#include "holdfast/core/circuit_breaker.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/random.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Kind = CircuitBreaker::Permit::Kind;

Status overload() {
  return sqlite_status(5, "database is locked");
}  // SQLITE_BUSY
Status syntax_error() {
  return sqlite_status(1, "near \"SELEC\": syntax error");
}
Status constraint() {
  return sqlite_status(2067, "UNIQUE constraint failed: users.email");
}
Status snapshot_conflict() {
  return sqlite_status(517, "database is locked");
}  // txn, not load

// A breaker on virtual time that writes down every transition.
struct Fixture {
  explicit Fixture(CircuitBreaker::Options options = {}) : breaker(options, clock) {
    breaker.add_listener([this](const BreakerTransition& t) { transitions.push_back(t); });
  }
  TimePoint now() const { return clock.now(); }
  Duration since_start() const { return clock.now() - ManualClock::kStart; }

  // One call at the current time that ends with `status` after `latency`.
  void call(const Status& status, Duration latency = Duration::zero()) {
    auto permit = breaker.acquire(now());
    ASSERT_TRUE(permit.admitted()) << "refused in state " << to_string(breaker.state());
    permit.record(status, latency);
  }
  void fail_n(int n) {
    for (int i = 0; i < n; ++i)
      call(overload());
  }
  std::vector<BreakerState> targets() const {
    std::vector<BreakerState> out;
    for (const auto& t : transitions)
      out.push_back(t.to);
    return out;
  }

  ManualClock clock;
  CircuitBreaker breaker;
  std::vector<BreakerTransition> transitions;
};

CircuitBreaker::Options ratio_only() {
  CircuitBreaker::Options o;
  o.consecutive_failures = 0;
  o.busy_consecutive_failures = 0;
  return o;
}

// ---- configuration ---------------------------------------------------------------------

TEST(BreakerOptions, DefaultsAreTheDocumentedOnes) {
  const CircuitBreaker::Options o;
  EXPECT_EQ(o.failure_ratio, 0.5);
  EXPECT_EQ(o.minimum_calls, 20);
  EXPECT_EQ(o.window, seconds(10));
  EXPECT_EQ(o.window_buckets, 10);
  EXPECT_EQ(o.consecutive_failures, 5);        // the origin's threshold
  EXPECT_EQ(o.busy_consecutive_failures, 20);  // minimum_calls' worth, all failed
  EXPECT_EQ(o.slow_call_threshold, Duration::zero());
  EXPECT_EQ(o.open_initial, milliseconds(500));
  EXPECT_EQ(o.open_max, seconds(30));  // the origin's recovery timeout
  EXPECT_EQ(o.half_open_probes, 1);
  EXPECT_EQ(o.probe_successes_to_close, 1);
  EXPECT_EQ(o.probe_lease, seconds(5));
}

TEST(BreakerOptions, EachBadFieldIsRejectedByName) {
  struct Case {
    const char* field;
    std::function<void(CircuitBreaker::Options&)> spoil;
  };
  const std::vector<Case> cases = {
      {"failure_ratio", [](auto& o) { o.failure_ratio = 0.0; }},
      {"failure_ratio", [](auto& o) { o.failure_ratio = 1.5; }},
      {"minimum_calls", [](auto& o) { o.minimum_calls = 0; }},
      {"window", [](auto& o) { o.window = Duration::zero(); }},
      {"window_buckets", [](auto& o) { o.window_buckets = 0; }},
      {"window_buckets", [](auto& o) { o.window_buckets = 65; }},
      {"window", [](auto& o) { o.window = std::chrono::nanoseconds(10); }},
      {"consecutive_failures", [](auto& o) { o.consecutive_failures = -1; }},
      {"busy_consecutive_failures", [](auto& o) { o.busy_consecutive_failures = -1; }},
      {"slow_call_threshold", [](auto& o) { o.slow_call_threshold = milliseconds(-1); }},
      {"open_initial", [](auto& o) { o.open_initial = Duration::zero(); }},
      {"open_max", [](auto& o) { o.open_max = milliseconds(100); }},
      {"half_open_probes", [](auto& o) { o.half_open_probes = 0; }},
      {"probe_successes_to_close", [](auto& o) { o.probe_successes_to_close = 0; }},
      {"probe_lease", [](auto& o) { o.probe_lease = Duration::zero(); }},
  };
  for (const Case& c : cases) {
    CircuitBreaker::Options o;
    c.spoil(o);
    try {
      CircuitBreaker b(o);
      ADD_FAILURE() << "accepted a bad " << c.field;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("Options::") + c.field)) << c.field;
    }
  }
}

// ---- what counts -----------------------------------------------------------------------

TEST(BreakerResult, OnlyOverloadFaultsThatAreNotOurOwnSheddingCountAsFailures) {
  EXPECT_EQ(breaker_result(Status()), CallResult::kSuccess);
  EXPECT_EQ(breaker_result(overload()), CallResult::kFailure);
  EXPECT_EQ(breaker_result(postgres_status("53300", "too many clients")), CallResult::kFailure);
  EXPECT_EQ(breaker_result(syntax_error()), CallResult::kNeutral);
  EXPECT_EQ(breaker_result(constraint()), CallResult::kNeutral);
  EXPECT_EQ(breaker_result(snapshot_conflict()), CallResult::kNeutral);
  EXPECT_EQ(breaker_result(Status(Code::kCancelled, "client went away")), CallResult::kNeutral);
  for (StopReason own : {StopReason::kBreakerOpen, StopReason::kThrottled, StopReason::kWindowSpent,
                         StopReason::kCancelled}) {
    Status s = overload();
    s.with_stop(own, 3);
    EXPECT_EQ(breaker_result(s), CallResult::kNeutral) << to_string(own);
  }
  // An inner loop that ran out of attempts on overload still reports overload.
  Status exhausted = overload();
  exhausted.with_stop(StopReason::kAttemptsExhausted, 5);
  EXPECT_EQ(breaker_result(exhausted), CallResult::kFailure);
}

TEST(Breaker, PermanentFaultsNeverTripIt) {
  Fixture f;
  for (int i = 0; i < 1000; ++i) {
    f.call(i % 2 ? syntax_error() : constraint());
    f.clock.advance(milliseconds(1));
  }
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_TRUE(f.transitions.empty());
  EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 0u) << "neutral results are not calls";
}

TEST(Breaker, OurOwnSheddingNeverTripsIt) {
  Fixture f;
  for (int i = 0; i < 100; ++i) {
    Status shed = overload();
    shed.with_stop(i % 2 ? StopReason::kWindowSpent : StopReason::kThrottled, 2);
    f.call(shed);
  }
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
}

// ---- closed -> open --------------------------------------------------------------------

TEST(Breaker, OpensAfterFiveOverloadFaultsInARowAtLowTraffic) {
  Fixture f;
  f.fail_n(4);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.clock.advance(milliseconds(300));
  f.call(overload(), milliseconds(20));
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  ASSERT_EQ(f.transitions.size(), 1u);
  EXPECT_EQ(f.transitions[0].reason, TransitionReason::kConsecutiveFailures);
  EXPECT_EQ(f.transitions[0].at, ManualClock::kStart + milliseconds(320)) << "at the call's end";
  EXPECT_EQ(f.transitions[0].open_for, milliseconds(500));
  EXPECT_EQ(f.breaker.retry_after(f.transitions[0].at), milliseconds(500));
}

TEST(Breaker, ASuccessBreaksTheRun) {
  Fixture f;
  f.fail_n(4);
  f.call(Status());
  f.fail_n(4);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.fail_n(1);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
}

TEST(Breaker, NeutralResultsNeitherBreakNorExtendTheRun) {
  Fixture f;
  f.fail_n(4);
  f.call(syntax_error());
  { auto dropped = f.breaker.acquire(f.now()); }  // destroyed unrecorded
  f.breaker.acquire(f.now()).cancel();
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 4u);
  f.fail_n(1);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
}

TEST(Breaker, OpensOnTheFailureRatioOnceTheWindowHoldsMinimumCalls) {
  Fixture f(ratio_only());
  for (int i = 0; i < 10; ++i)
    f.call(Status());
  f.fail_n(9);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed) << "19 calls: below minimum_calls";
  f.fail_n(1);  // 20 calls, 10 failures: 50%
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(f.transitions.at(0).reason, TransitionReason::kFailureRatio);
}

TEST(Breaker, StaysClosedJustBelowTheRatio) {
  Fixture f(ratio_only());
  for (int i = 0; i < 11; ++i)
    f.call(Status());
  f.fail_n(9);  // 20 calls, 45%
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 20u);
  EXPECT_EQ(f.breaker.window_counts(f.now()).failures, 9u);
}

TEST(Breaker, CallsOlderThanTheWindowLeaveIt) {
  for (const Duration gap : {Duration(seconds(5)), Duration(seconds(10))}) {
    Fixture f(ratio_only());
    f.fail_n(10);
    f.clock.advance(gap);
    f.fail_n(10);
    if (gap < seconds(10)) {
      EXPECT_EQ(f.breaker.state(), BreakerState::kOpen) << "20 failures inside 10 s";
    } else {
      EXPECT_EQ(f.breaker.state(), BreakerState::kClosed) << "the first 10 left the window";
      EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 10u);
    }
  }
}

TEST(Breaker, AtHigherTrafficTheRatioDecidesNotARunOfFive) {
  Fixture f;
  for (int i = 0; i < 100; ++i)
    f.call(Status());
  f.fail_n(10);  // a run of 10, but only 9% of the window
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
}

TEST(Breaker, AtHigherTrafficTwentyOverloadFaultsInARowOpenItWithoutWaitingForTheRatio) {
  // 125 calls a second for 5 s, all answered; then the database stops answering.
  Fixture f;
  for (int i = 0; i < 625; ++i) {
    f.call(Status(), milliseconds(2));
    f.clock.advance(milliseconds(8));
  }
  for (int i = 0; i < 19; ++i) {
    f.call(overload(), milliseconds(1));
    f.clock.advance(milliseconds(8));
  }
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed) << "19 in a row, 3% of the window";
  f.call(overload(), milliseconds(1));
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  ASSERT_EQ(f.transitions.size(), 1u);
  EXPECT_EQ(f.transitions[0].reason, TransitionReason::kConsecutiveFailures);
  // 20 calls: 160 ms after the first failure, where the ratio (50% of 10 s) needed seconds.
  EXPECT_EQ(f.transitions[0].at, ManualClock::kStart + milliseconds(625 * 8 + 19 * 8 + 1));
}

TEST(Breaker, AtHigherTrafficASuccessBreaksTheRunOfTwenty) {
  Fixture f;
  for (int i = 0; i < 100; ++i)
    f.call(Status());
  f.fail_n(19);
  f.call(Status());
  f.fail_n(19);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.fail_n(1);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  // Turned off, the same run leaves it to the ratio.
  CircuitBreaker::Options o;
  o.busy_consecutive_failures = 0;
  Fixture off(o);
  for (int i = 0; i < 100; ++i)
    off.call(Status());
  off.fail_n(40);
  EXPECT_EQ(off.breaker.state(), BreakerState::kClosed) << "40 of 140: below 50%";
}

// A refused connect names when the pool connects again (retry_after() with no stop
// reason): the server took no call at all.
Status refused_connect() {
  Status s = postgres_status("08P01",
                             "server login has been failing, try again later (server_login_retry)");
  s.with_stop(StopReason::kNone, 0, milliseconds(100));
  return s;
}

TEST(BreakerResult, AFailureThatNamesWhenTheServerTakesCallsAgainIsARefusal) {
  EXPECT_EQ(breaker_result(refused_connect()), CallResult::kRefused);
  // Our own answer while the pool backs off is shedding, not a refusal by the server.
  Status shed = refused_connect();
  shed.with_stop(StopReason::kBreakerOpen, 0, milliseconds(100));
  EXPECT_EQ(breaker_result(shed), CallResult::kNeutral);
  // A pool's probe connect that the server refused once more is the server's refusal, though
  // the request that made it is not retried.
  Status probe = refused_connect();
  probe.with_stop(StopReason::kProbeFailed, 0, milliseconds(100));
  EXPECT_EQ(breaker_result(probe), CallResult::kRefused);
}

// Busy traffic needs twenty overload faults in a row, since a few can be a blip amid
// thousands of successes; five refusals in a row are an outage whatever came before.
TEST(Breaker, AtHigherTrafficFiveRefusalsInARowOpenIt) {
  Fixture f;
  for (int i = 0; i < 100; ++i)
    f.call(Status());
  for (int i = 0; i < 4; ++i)
    f.call(refused_connect());
  f.call(overload());  // not a refusal: the run of refusals starts over
  for (int i = 0; i < 4; ++i)
    f.call(refused_connect());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.call(refused_connect());
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  ASSERT_EQ(f.transitions.size(), 1u);
  EXPECT_EQ(f.transitions[0].reason, TransitionReason::kConsecutiveFailures);
}

TEST(Breaker, ASuccessBreaksARunOfRefusals) {
  Fixture f;
  for (int i = 0; i < 100; ++i)
    f.call(Status());
  for (int i = 0; i < 4; ++i)
    f.call(refused_connect());
  f.call(Status());
  for (int i = 0; i < 4; ++i)
    f.call(refused_connect());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
}

TEST(Breaker, SlowSuccessesCountAsFailuresWhenAThresholdIsSet) {
  CircuitBreaker::Options o;
  o.slow_call_threshold = seconds(1);
  Fixture slow(o);
  EXPECT_TRUE(slow.breaker.measures_latency());
  for (int i = 0; i < 4; ++i)
    slow.call(Status(), seconds(2));
  slow.call(Status(), seconds(1));  // at the threshold: not slow
  EXPECT_EQ(slow.breaker.state(), BreakerState::kClosed);
  slow.call(Status(), seconds(2));
  EXPECT_EQ(slow.breaker.state(), BreakerState::kClosed) << "the fast one broke the run";
  for (int i = 0; i < 4; ++i)
    slow.call(Status(), seconds(2));
  EXPECT_EQ(slow.breaker.state(), BreakerState::kOpen);

  Fixture plain;
  EXPECT_FALSE(plain.breaker.measures_latency());
  for (int i = 0; i < 10; ++i)
    plain.call(Status(), seconds(2));
  EXPECT_EQ(plain.breaker.state(), BreakerState::kClosed);
}

TEST(Breaker, ABrownoutOfTwentyPercentFailuresDoesNotOpenIt) {
  Fixture f;
  Random rng(20260401);
  int run = 0;
  int longest_run = 0;
  int failures = 0;
  // 100 calls a second for ten minutes, each failing from overload with probability 0.2.
  constexpr int kCalls = 60000;
  for (int i = 0; i < kCalls; ++i) {
    const bool fail = rng.uniform() < 0.2;
    f.call(fail ? overload() : Status(), milliseconds(3));
    failures += fail ? 1 : 0;
    run = fail ? run + 1 : 0;
    longest_run = std::max(longest_run, run);
    f.clock.advance(milliseconds(10));
  }
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_TRUE(f.transitions.empty());
  EXPECT_NEAR(failures / static_cast<double>(kCalls), 0.2, 0.01);
  // The brownout has runs that would trip a breaker counting 5 in a row at any traffic
  // (about one every 4,000 calls), but none near the busy rule's 20 (0.2^20: about one in
  // 10^14 calls).
  EXPECT_GE(longest_run, 5);
  EXPECT_LT(longest_run, 20);
}

// ---- open, half-open, and back -----------------------------------------------------------

TEST(Breaker, RefusesWhileOpenAndSaysWhenToComeBack) {
  Fixture f;
  f.fail_n(5);
  const TimePoint opened = f.now();
  f.clock.advance(milliseconds(200));
  auto refused = f.breaker.acquire(f.now());
  EXPECT_FALSE(refused.admitted());
  EXPECT_FALSE(refused.pending());
  EXPECT_EQ(refused.state(), BreakerState::kOpen);
  EXPECT_EQ(refused.retry_after(), milliseconds(300));
  refused.record(overload());  // recording a refusal does nothing
  EXPECT_EQ(f.breaker.retry_after(f.now()), milliseconds(300));
  f.clock.advance_to(opened + milliseconds(500) - std::chrono::nanoseconds(1));
  EXPECT_FALSE(f.breaker.acquire(f.now()).admitted());
}

TEST(Breaker, OpenPeriodDoublesOnEachFailedProbeUpToTheCapAndStartsOverAfterClosing) {
  Fixture f;
  f.fail_n(5);
  std::vector<Duration> periods;
  for (int i = 0; i < 8; ++i) {
    const Duration period = f.breaker.open_duration();
    periods.push_back(period);
    EXPECT_EQ(f.breaker.retry_after(f.now()), period);
    f.clock.advance(period);
    auto probe = f.breaker.acquire(f.now());
    ASSERT_EQ(probe.kind(), Kind::kProbe) << "probe " << i;
    EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
    probe.record(overload());
    EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  }
  EXPECT_THAT(periods, ElementsAre(milliseconds(500), seconds(1), seconds(2), seconds(4),
                                   seconds(8), seconds(16), seconds(30), seconds(30)));
  f.clock.advance(f.breaker.open_duration());
  f.breaker.acquire(f.now()).record(Status());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.breaker.open_duration(), milliseconds(500));
  f.fail_n(5);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(f.breaker.retry_after(f.now()), milliseconds(500)) << "reset on close";

  // Closed, open, then (half-open, open) x 8, half-open, closed, open.
  std::vector<BreakerState> expected = {BreakerState::kOpen};
  for (int i = 0; i < 8; ++i) {
    expected.push_back(BreakerState::kHalfOpen);
    expected.push_back(BreakerState::kOpen);
  }
  expected.push_back(BreakerState::kHalfOpen);
  expected.push_back(BreakerState::kClosed);
  expected.push_back(BreakerState::kOpen);
  EXPECT_EQ(f.targets(), expected);
  for (std::size_t i = 1; i < f.transitions.size(); ++i) {
    EXPECT_EQ(f.transitions[i].generation, f.transitions[i - 1].generation + 1);
  }
}

TEST(Breaker, HalfOpenAdmitsKProbesAndClosesAfterEnoughSuccesses) {
  CircuitBreaker::Options o;
  o.half_open_probes = 2;
  o.probe_successes_to_close = 2;
  Fixture f(o);
  f.fail_n(5);
  f.clock.advance(milliseconds(500));
  auto p1 = f.breaker.acquire(f.now());
  auto p2 = f.breaker.acquire(f.now());
  auto p3 = f.breaker.acquire(f.now());
  EXPECT_EQ(p1.kind(), Kind::kProbe);
  EXPECT_EQ(p2.kind(), Kind::kProbe);
  EXPECT_FALSE(p3.admitted());
  EXPECT_EQ(p3.state(), BreakerState::kHalfOpen);
  EXPECT_EQ(p3.retry_after(), seconds(5)) << "until the first lease expires";
  p1.record(Status());
  EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen) << "one success of two";
  auto p4 = f.breaker.acquire(f.now());
  EXPECT_EQ(p4.kind(), Kind::kProbe) << "the finished probe freed its lease";
  p2.record(Status());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  p4.record(overload());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed) << "a probe from before closing is stale";
}

TEST(Breaker, AHungProbeDoesNotWedgeHalfOpen) {
  Fixture f;
  f.fail_n(5);
  f.clock.advance(milliseconds(500));
  auto hung = f.breaker.acquire(f.now());
  ASSERT_EQ(hung.kind(), Kind::kProbe);
  const TimePoint leased = f.now();

  f.clock.advance(seconds(5) - std::chrono::nanoseconds(1));
  EXPECT_FALSE(f.breaker.acquire(f.now()).admitted()) << "the lease still holds";
  f.clock.advance_to(leased + seconds(5));
  auto after_expiry = f.breaker.acquire(f.now());
  EXPECT_FALSE(after_expiry.admitted());
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(f.transitions.back().reason, TransitionReason::kProbeLeaseExpired);
  EXPECT_EQ(f.transitions.back().open_for, seconds(1)) << "an expired lease is a failed probe";
  EXPECT_EQ(after_expiry.retry_after(), seconds(1));

  f.clock.advance(seconds(1));
  auto fresh = f.breaker.acquire(f.now());
  ASSERT_EQ(fresh.kind(), Kind::kProbe);
  fresh.record(Status());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);

  hung.record(overload());  // the hung probe finally answers: too late to matter
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
}

TEST(Breaker, ADroppedProbeFreesItsLease) {
  Fixture f;
  f.fail_n(5);
  f.clock.advance(milliseconds(500));
  { auto probe = f.breaker.acquire(f.now()); }
  EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
  auto next = f.breaker.acquire(f.now());
  EXPECT_EQ(next.kind(), Kind::kProbe);
  next.cancel();
  EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen) << "cancellation is neutral";
  EXPECT_EQ(f.breaker.acquire(f.now()).kind(), Kind::kProbe);
}

TEST(Breaker, ANeutralProbeResultNeitherClosesNorReopens) {
  Fixture f;
  f.fail_n(5);
  f.clock.advance(milliseconds(500));
  f.breaker.acquire(f.now()).record(syntax_error());
  EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
}

TEST(Breaker, LateResultsFromBeforeAStateChangeAreIgnored) {
  Fixture f;
  std::vector<CircuitBreaker::Permit> in_flight;
  for (int i = 0; i < 10; ++i)
    in_flight.push_back(f.breaker.acquire(f.now()));
  f.fail_n(5);
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  for (auto& p : in_flight)
    p.record(Status());
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen) << "old successes do not close it";

  // And old failures do not count against the next closed period.
  f.clock.advance(milliseconds(500));
  std::vector<CircuitBreaker::Permit> stale;
  f.breaker.acquire(f.now()).record(Status());
  ASSERT_EQ(f.breaker.state(), BreakerState::kClosed);
  for (int i = 0; i < 5; ++i)
    stale.push_back(f.breaker.acquire(f.now()));
  f.breaker.isolate();
  f.breaker.reset();
  for (auto& p : stale)
    p.record(overload());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 0u);
}

TEST(Breaker, LateResultsNeitherCountInTheNewWindowNorBreakItsRuns) {
  Fixture f;
  auto old_success = f.breaker.acquire(f.now());
  auto old_failure = f.breaker.acquire(f.now());
  const TimePoint acquired = f.now();
  f.fail_n(5);
  f.clock.advance(milliseconds(500));
  f.breaker.acquire(f.now()).record(Status());  // the probe closes it
  ASSERT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.clock.advance(seconds(2));
  // An old call that ends now, two seconds into the new closed period: not counted.
  old_failure.record(overload(), f.now() - acquired);
  EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 0u);
  // An old success does not break a new run of failures.
  f.fail_n(4);
  old_success.record(Status(), f.now() - acquired);
  f.fail_n(1);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
}

TEST(Breaker, ClosingForgetsTheWindow) {
  Fixture f(ratio_only());
  f.fail_n(20);
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  f.clock.advance(milliseconds(500));
  f.breaker.acquire(f.now()).record(Status());
  ASSERT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.breaker.window_counts(f.now()).calls, 0u);
  f.call(overload());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed) << "the old failures are gone";
}

TEST(Breaker, IsolateRefusesEverythingUntilReset) {
  Fixture f;
  f.breaker.isolate();
  EXPECT_EQ(f.breaker.state(), BreakerState::kIsolated);
  f.clock.advance(std::chrono::hours(1));
  auto refused = f.breaker.acquire(f.now());
  EXPECT_FALSE(refused.admitted());
  EXPECT_EQ(refused.state(), BreakerState::kIsolated);
  EXPECT_EQ(refused.retry_after(), seconds(30));
  EXPECT_FALSE(f.breaker.acquire_health_probe(f.now()).admitted());
  f.breaker.reset();
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_TRUE(f.breaker.acquire(f.now()).admitted());
  EXPECT_THAT(f.targets(), ElementsAre(BreakerState::kIsolated, BreakerState::kClosed));
  EXPECT_EQ(f.transitions[0].reason, TransitionReason::kIsolated);
  EXPECT_EQ(f.transitions[1].reason, TransitionReason::kReset);
}

TEST(Breaker, ListenersAreCalledOutsideTheLockAndMayCallBack) {
  // A listener that re-enters the breaker would deadlock if it were called under the lock.
  Fixture f;
  std::vector<std::pair<BreakerState, BreakerState>> seen;
  f.breaker.add_listener([&](const BreakerTransition& t) {
    seen.emplace_back(t.from, t.to);
    if (t.to == BreakerState::kOpen) f.breaker.isolate();
    if (t.to == BreakerState::kIsolated) {
      EXPECT_FALSE(f.breaker.acquire(f.now()).admitted());
      f.breaker.reset();
    }
  });
  f.breaker.add_listener([](const BreakerTransition&) { throw std::runtime_error("ignored"); });
  f.fail_n(5);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  using S = BreakerState;
  EXPECT_THAT(seen, ElementsAre(std::pair(S::kClosed, S::kOpen), std::pair(S::kOpen, S::kIsolated),
                                std::pair(S::kIsolated, S::kClosed)));
}

TEST(Breaker, TheSignalMovesWhenAProbeSucceedsButNotWhenOneIsAdmitted) {
  Fixture f;
  f.fail_n(5);
  f.clock.advance(milliseconds(500));
  const std::uint64_t before = f.breaker.signal().generation();
  auto probe = f.breaker.acquire(f.now());
  EXPECT_EQ(f.breaker.signal().generation(), before) << "admitting the probe wakes nobody";
  probe.record(Status());
  EXPECT_NE(f.breaker.signal().generation(), before);
}

TEST(Breaker, RetryAfterPointsAtAnAnnouncedHealthProbe) {
  CircuitBreaker::Options o;
  o.open_initial = seconds(20);
  Fixture f(o);
  f.fail_n(5);
  EXPECT_EQ(f.breaker.retry_after(f.now()), seconds(20));
  const TimePoint t0 = f.now();
  f.breaker.expect_health_probes(t0 + milliseconds(200), milliseconds(500));
  EXPECT_EQ(f.breaker.retry_after(t0), milliseconds(200));
  EXPECT_EQ(f.breaker.acquire(t0).retry_after(), milliseconds(200));
  // The announced moment has passed (that probe may still be running): the next one.
  EXPECT_EQ(f.breaker.retry_after(t0 + milliseconds(200)), milliseconds(500));
  EXPECT_EQ(f.breaker.retry_after(t0 + milliseconds(300)), milliseconds(400));
  // No news for more than two intervals: the prober is gone; back to the open period.
  EXPECT_EQ(f.breaker.retry_after(t0 + milliseconds(1300)), seconds(20) - milliseconds(1300));
  f.breaker.expect_health_probes(TimePoint{}, Duration::zero());
  EXPECT_EQ(f.breaker.retry_after(t0), seconds(20));
}

TEST(Breaker, WhileAHealthProbeIsAnnouncedNoRequestIsMadeTheHalfOpenProbe) {
  CircuitBreaker::Options o;
  o.open_initial = milliseconds(500);
  Fixture f(o);
  f.fail_n(5);
  const TimePoint t0 = f.now();
  f.breaker.expect_health_probes(t0 + milliseconds(200), milliseconds(250));
  // Past the open period, with the prober's news fresh: refused, pointed at its next run.
  f.clock.advance(milliseconds(600));
  auto refused = f.breaker.acquire(f.now());
  EXPECT_FALSE(refused.admitted());
  EXPECT_EQ(refused.retry_after(), milliseconds(100));
  EXPECT_EQ(f.breaker.retry_after(f.now()), milliseconds(100));
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  // The health probe alone closes it.
  auto health = f.breaker.acquire_health_probe(f.now());
  ASSERT_TRUE(health.admitted());
  health.record(Status());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);

  // Open again, and the prober goes quiet for more than two intervals: a request probes,
  // so a breaker whose prober died does not stay open for good.
  f.fail_n(5);
  f.breaker.expect_health_probes(f.now() + milliseconds(200), milliseconds(250));
  f.clock.advance(milliseconds(800));
  EXPECT_EQ(f.breaker.retry_after(f.now()), Duration::zero());
  auto probe = f.breaker.acquire(f.now());
  EXPECT_TRUE(probe.is_probe());
}

TEST(Breaker, AHealthProbeIsAdmittedOnlyWhileOpenAndOneAtATime) {
  CircuitBreaker::Options o;
  o.open_initial = seconds(20);
  Fixture f(o);
  EXPECT_FALSE(f.breaker.acquire_health_probe(f.now()).admitted()) << "closed";
  f.fail_n(5);
  auto first = f.breaker.acquire_health_probe(f.now());
  EXPECT_EQ(first.kind(), Kind::kHealthProbe);
  EXPECT_FALSE(f.breaker.acquire_health_probe(f.now()).admitted()) << "one is out";
  f.clock.advance(seconds(1));
  first.record(overload(), milliseconds(10));
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(f.breaker.retry_after(f.now()), seconds(19)) << "a failure changes nothing";
  auto second = f.breaker.acquire_health_probe(f.now());
  ASSERT_EQ(second.kind(), Kind::kHealthProbe);
  second.record(Status(), milliseconds(10));
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.transitions.back().reason, TransitionReason::kHealthProbeSucceeded);
  EXPECT_EQ(f.transitions.back().at, f.now() + milliseconds(10));
}

// A request that became the half-open probe may take long to answer (a pooler holding
// it): the health probe still runs, and its success closes the breaker at once.
TEST(Breaker, AHealthProbeClosesAHalfOpenBreakerWhoseRequestProbeIsStillOut) {
  Fixture f;
  f.fail_n(5);
  f.clock.advance(seconds(1));  // past the open period
  auto request = f.breaker.acquire(f.now());
  ASSERT_EQ(request.kind(), Kind::kProbe);
  ASSERT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
  EXPECT_FALSE(f.breaker.acquire(f.now()).admitted()) << "its lease is taken";
  auto health = f.breaker.acquire_health_probe(f.now());
  ASSERT_EQ(health.kind(), Kind::kHealthProbe);
  health.record(Status(), milliseconds(5));
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(f.transitions.back().reason, TransitionReason::kHealthProbeSucceeded);
  EXPECT_TRUE(f.breaker.acquire(f.now()).admitted());
  // The request's late answer belongs to the half-open state: it changes nothing.
  request.record(overload(), seconds(3));
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
}

TEST(Breaker, ConcurrentRecordsAreCountedExactly) {
  // More threads than stripes a thread can own: some share a stripe (atomic updates), the
  // others write their own (plain stores). No call may be lost either way.
  ManualClock clock;
  CircuitBreaker breaker(CircuitBreaker::Options{}, clock);
  constexpr int kThreads = 12;
  constexpr int kCalls = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i)
        breaker.acquire(clock.now()).record(Status());
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(breaker.window_counts(clock.now()).calls, std::uint64_t{kThreads * kCalls});
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
}

TEST(Breaker, MovingAPermitMovesTheDutyToRecord) {
  Fixture f;
  f.fail_n(4);
  CircuitBreaker::Permit a = f.breaker.acquire(f.now());
  CircuitBreaker::Permit b = std::move(a);
  EXPECT_FALSE(a.pending());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(b.pending());
  a.record(overload());
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed) << "the moved-from permit records nothing";
  b.record(overload());
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
}

}  // namespace
}  // namespace holdfast
