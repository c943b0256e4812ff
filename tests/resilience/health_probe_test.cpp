#include "holdfast/core/health_probe.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "holdfast/core/classify.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Status overload() {
  return sqlite_status(5, "database is locked");
}

CircuitBreaker::Options long_open() {
  CircuitBreaker::Options o;
  o.open_initial = seconds(30);
  return o;
}

void trip(CircuitBreaker& breaker, Clock& clock) {
  for (int i = 0; i < 5; ++i)
    breaker.acquire(clock.now()).record(overload());
  ASSERT_EQ(breaker.state(), BreakerState::kOpen);
}

HealthProbe::Options manual() {
  HealthProbe::Options o;
  o.background = false;
  return o;
}

TEST(HealthProbe, RejectsAnEmptyProbeAndABadInterval) {
  CircuitBreaker breaker;
  EXPECT_THROW(HealthProbe(breaker, HealthProbe::ProbeFn{}, manual()), std::invalid_argument);
  HealthProbe::Options o = manual();
  o.interval = Duration::zero();
  EXPECT_THROW(HealthProbe(
                   breaker, [] { return Status(); }, o),
               std::invalid_argument);
}

TEST(HealthProbe, DoesNothingWhileTheBreakerIsClosed) {
  ManualClock clock;
  CircuitBreaker breaker(long_open(), clock);
  int calls = 0;
  HealthProbe probe(
      breaker, [&] { return ++calls, Status(); }, manual());
  const HealthProbe::ProbeReport out = probe.probe_now();
  EXPECT_FALSE(out.ran);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(probe.runs(), 0u);
}

TEST(HealthProbe, AFailedProbeLeavesTheOpenPeriodAlone) {
  ManualClock clock;
  CircuitBreaker breaker(long_open(), clock);
  trip(breaker, clock);
  HealthProbe probe(
      breaker, [&] { return clock.advance(milliseconds(5)), overload(); }, manual());
  clock.advance(seconds(1));
  const HealthProbe::ProbeReport out = probe.probe_now();
  EXPECT_TRUE(out.ran);
  EXPECT_FALSE(out.status.ok());
  EXPECT_FALSE(out.closed);
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(breaker.retry_after(clock.now()), seconds(29) - milliseconds(5));
  EXPECT_EQ(breaker.open_duration(), seconds(30)) << "not doubled: the probe is out of band";
}

TEST(HealthProbe, ASuccessfulProbeClosesTheBreakerAndWakesWaiters) {
  ManualClock clock;
  CircuitBreaker breaker(long_open(), clock);
  std::vector<BreakerTransition> transitions;
  breaker.add_listener([&](const BreakerTransition& t) { transitions.push_back(t); });
  trip(breaker, clock);
  HealthProbe probe(
      breaker, [] { return Status(); }, manual());
  const std::uint64_t seen = breaker.signal().generation();
  clock.advance(seconds(2));
  const HealthProbe::ProbeReport out = probe.probe_now();
  EXPECT_TRUE(out.ran);
  EXPECT_TRUE(out.closed);
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
  EXPECT_NE(breaker.signal().generation(), seen);
  ASSERT_EQ(transitions.size(), 2u);
  EXPECT_EQ(transitions[1].from, BreakerState::kOpen);
  EXPECT_EQ(transitions[1].reason, TransitionReason::kHealthProbeSucceeded);
  EXPECT_EQ(probe.successes(), 1u);
}

// A request that became the half-open probe can take long to answer (a pooler may hold
// it): the health probe still runs, and closes the breaker when the database answers it
// (ADR 0018).
TEST(HealthProbe, RunsWhileARequestProbesAndClosesTheBreakerWhenTheDatabaseAnswers) {
  ManualClock clock;
  CircuitBreaker breaker(CircuitBreaker::Options{}, clock);
  trip(breaker, clock);
  clock.advance(milliseconds(500));
  auto request_probe = breaker.acquire(clock.now());
  ASSERT_TRUE(request_probe.is_probe());
  int calls = 0;
  HealthProbe probe(
      breaker, [&] { return ++calls, Status(); }, manual());
  const HealthProbe::ProbeReport out = probe.probe_now();
  EXPECT_TRUE(out.ran);
  EXPECT_TRUE(out.closed);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
}

TEST(HealthProbe, AProbeThatThrowsIsAFailedProbe) {
  ManualClock clock;
  CircuitBreaker breaker(long_open(), clock);
  trip(breaker, clock);
  HealthProbe probe(
      breaker, []() -> Status { throw std::runtime_error("driver exploded"); }, manual());
  const HealthProbe::ProbeReport out = probe.probe_now();
  EXPECT_TRUE(out.ran);
  EXPECT_EQ(out.status.code(), Code::kUnknown);
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  EXPECT_TRUE(probe.probe_now().ran) << "the failed probe released its slot";
}

TEST(HealthProbe, TheBackgroundThreadClosesTheBreakerOnTheFirstTickAfterRecovery) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  CircuitBreaker breaker(long_open(), clock);
  const TimePoint t0 = clock.now();
  std::atomic<bool> database_up{false};
  std::vector<TimePoint> probed_at;  // written by the probe thread, read after it sleeps
  HealthProbe::Options o;
  o.interval = milliseconds(500);
  HealthProbe probe(
      breaker,
      [&] {
        probed_at.push_back(clock.now());
        return database_up ? Status() : overload();
      },
      o);
  clock.wait_for_sleepers(1);
  clock.advance(milliseconds(500));  // tick while closed: nothing to do
  clock.wait_for_sleepers(1);
  EXPECT_TRUE(probed_at.empty());

  trip(breaker, clock);  // at t0 + 500 ms, open for 30 s
  EXPECT_EQ(breaker.retry_after(clock.now()), milliseconds(500))
      << "waiters are pointed at the next tick, not at the end of 30 s";
  clock.advance(milliseconds(500));  // t0 + 1 s: the database is still down
  clock.wait_for_sleepers(1);
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  database_up = true;
  clock.advance(milliseconds(500));  // t0 + 1.5 s
  clock.wait_for_sleepers(1);
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
  EXPECT_EQ(probe.runs(), 2u);
  ASSERT_EQ(probed_at.size(), 2u);
  EXPECT_EQ(probed_at[0], t0 + seconds(1));
  EXPECT_EQ(probed_at[1], t0 + milliseconds(1500));
}

TEST(HealthProbe, StopsCleanlyWhileSleeping) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  CircuitBreaker breaker(long_open(), clock);
  trip(breaker, clock);
  {
    HealthProbe probe(breaker, [] { return Status(); });
    clock.wait_for_sleepers(1);
    EXPECT_LT(breaker.retry_after(clock.now()), seconds(1)) << "announced";
  }  // the destructor wakes the sleeping thread and joins it
  EXPECT_EQ(clock.sleepers(), 0u);
  EXPECT_EQ(breaker.state(), BreakerState::kOpen) << "no probe ran";
  EXPECT_EQ(breaker.retry_after(clock.now()), seconds(30)) << "announcement withdrawn";
}

TEST(HealthProbe, StopsCleanlyOnTheSystemClock) {
  CircuitBreaker breaker;
  HealthProbe::Options o;
  o.interval = std::chrono::hours(1);
  HealthProbe probe(
      breaker, [] { return Status(); }, o);
  probe.stop();  // returns at once: the hour-long sleep is interrupted
  probe.stop();
  EXPECT_EQ(probe.runs(), 0u);
}

}  // namespace
}  // namespace holdfast
