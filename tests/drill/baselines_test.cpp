#include <gtest/gtest.h>

#include <vector>

#include "baselines/origin_breaker.hpp"
#include "baselines/parameters.hpp"
#include "baselines/runner.hpp"
#include "baselines/strategy.hpp"
#include "holdfast/core/classify.hpp"

namespace holdfast::baselines {
namespace {

using std::chrono::seconds;

Status busy() {
  return sqlite_status(5, "database is locked");  // SQLITE_BUSY: transient
}

// A call that always fails with `failure`, recording when each attempt was made.
struct Failing {
  Clock* clock;
  Status failure;
  std::vector<TimePoint> at;
  Status operator()() {
    at.push_back(clock->now());
    return failure;
  }
};

TEST(BaselineNames, EveryStrategyParsesBackFromItsName) {
  for (Strategy s : kAllStrategies) {
    Strategy parsed = s == Strategy::kNone ? Strategy::kHoldfast : Strategy::kNone;
    ASSERT_TRUE(parse_strategy(to_string(s), parsed)) << to_string(s);
    EXPECT_EQ(parsed, s);
  }
  Strategy untouched = Strategy::kNaive;
  EXPECT_FALSE(parse_strategy("tenacity", untouched));
  EXPECT_EQ(untouched, Strategy::kNaive);
  EXPECT_EQ(strategy_names(), "none, naive, backoff, origin-breaker, holdfast");
}

TEST(OriginBreaker, OpensAtFiveFailuresInARowAndLetsCallsThroughAfterThirtySeconds) {
  ManualClock clock;
  OriginBreaker breaker(clock);
  for (int i = 0; i < 4; ++i)
    breaker.record_failure();
  EXPECT_EQ(breaker.state(), OriginBreaker::State::kClosed);
  EXPECT_TRUE(breaker.can_attempt());
  breaker.record_failure();
  EXPECT_EQ(breaker.state(), OriginBreaker::State::kOpen);
  clock.advance(seconds(29));
  EXPECT_FALSE(breaker.can_attempt());
  clock.advance(seconds(1));
  EXPECT_TRUE(breaker.can_attempt());
  EXPECT_EQ(breaker.state(), OriginBreaker::State::kHalfOpen);
  breaker.record_success();
  EXPECT_EQ(breaker.state(), OriginBreaker::State::kClosed);
}

TEST(OriginBreaker, ASuccessZeroesTheCount) {
  ManualClock clock;
  OriginBreaker breaker(clock);
  for (int i = 0; i < 4; ++i)
    breaker.record_failure();
  breaker.record_success();
  for (int i = 0; i < 4; ++i)
    breaker.record_failure();
  EXPECT_EQ(breaker.state(), OriginBreaker::State::kClosed);
}

TEST(BaselineRunner, BackoffMakesThreeAttemptsWaitingOneThenTwoSeconds) {
  ManualClock clock;
  Runner runner(Strategy::kBackoff, clock);
  Failing call{&clock, busy(), {}};
  const TimePoint start = clock.now();
  const Status s = runner.run(Operation::read("test.read"), call);
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(call.at.size(), 3u);
  EXPECT_EQ(call.at[0] - start, seconds(0));
  EXPECT_EQ(call.at[1] - call.at[0], seconds(1));
  EXPECT_EQ(call.at[2] - call.at[1], seconds(2));
  EXPECT_EQ(runner.attempts(), 3u);
  EXPECT_EQ(runner.breaker(), nullptr);
}

TEST(BaselineRunner, NaiveMakesFourAttemptsWithoutWaiting) {
  ManualClock clock;
  Runner runner(Strategy::kNaive, clock);
  Failing call{&clock, busy(), {}};
  const TimePoint start = clock.now();
  EXPECT_FALSE(runner.run(Operation::read("test.read"), call).ok());
  ASSERT_EQ(call.at.size(), 4u);
  for (TimePoint t : call.at)
    EXPECT_EQ(t, start);
  EXPECT_EQ(runner.attempts(), 4u);
}

TEST(BaselineRunner, NoneAndHoldfastCallOnce) {
  ManualClock clock;
  for (Strategy s : {Strategy::kNone, Strategy::kHoldfast}) {
    Runner runner(s, clock);
    Failing call{&clock, busy(), {}};
    EXPECT_FALSE(runner.run(Operation::read("test.read"), call).ok());
    EXPECT_EQ(call.at.size(), 1u) << to_string(s);
    EXPECT_EQ(runner.attempts(), 1u) << to_string(s);
  }
}

TEST(BaselineRunner, AFailureTheDriverGaveUpOnIsStillRetried) {
  // A driver making one attempt per call marks its failure given up; holdfast's loops would
  // never retry it (docs/adr/0001), a baseline's loop does.
  ManualClock clock;
  Runner runner(Strategy::kBackoff, clock);
  Status given_up = busy();
  given_up.with_stop(StopReason::kAttemptsExhausted, 1);
  Failing call{&clock, given_up, {}};
  const Status s = runner.run(Operation::read("test.read"), call);
  EXPECT_EQ(call.at.size(), 3u);
  EXPECT_EQ(s.stop_reason(), StopReason::kAttemptsExhausted);
  EXPECT_EQ(s.attempts(), 3);
}

TEST(BaselineRunner, WritesAreRetriedLikeReads) {
  // A plain retry decorator knows nothing of idempotency.
  ManualClock clock;
  Runner runner(Strategy::kNaive, clock);
  Failing call{&clock, busy(), {}};
  EXPECT_FALSE(runner.run(Operation::write("test.write"), call).ok());
  EXPECT_EQ(call.at.size(), 4u);
}

TEST(BaselineRunner, APermanentFailureIsNotRetried) {
  ManualClock clock;
  Runner runner(Strategy::kNaive, clock);
  Failing call{&clock, sqlite_status(2067, "UNIQUE constraint failed"), {}};
  EXPECT_FALSE(runner.run(Operation::read("test.read"), call).ok());
  EXPECT_EQ(call.at.size(), 1u);
}

TEST(BaselineRunner, TheOriginBreakerRefusesAtOnceAfterFiveFailedCalls) {
  ManualClock clock;
  Runner runner(Strategy::kOriginBreaker, clock);
  ASSERT_NE(runner.breaker(), nullptr);
  Failing call{&clock, busy(), {}};
  for (int i = 0; i < kBreakerThreshold; ++i) {
    EXPECT_FALSE(runner.run(Operation::read("test.read"), call).ok());
  }
  EXPECT_EQ(call.at.size(), 5u * kBackoffAttempts) << "each call the whole Tenacity loop";
  EXPECT_EQ(runner.breaker()->state(), OriginBreaker::State::kOpen);
  const Status refused = runner.run(Operation::read("test.read"), call);
  EXPECT_EQ(refused.code(), Code::kUnavailable);
  EXPECT_NE(refused.message().find("Circuit OPEN"), std::string_view::npos);
  EXPECT_EQ(call.at.size(), 5u * kBackoffAttempts) << "refused without an attempt";
  EXPECT_EQ(runner.attempts(), 5u * kBackoffAttempts);
  // 30 s after the last failure one call goes through and its success closes the breaker.
  clock.advance(kBreakerRecovery);
  const Status ok = runner.run(Operation::read("test.read"), [] { return Status(); });
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(runner.breaker()->state(), OriginBreaker::State::kClosed);
}

TEST(BaselineParameters, TheSimulatorAndThePanelShareOnePolicyPerBaseline) {
  const RetryPolicy backoff = retry_policy(Strategy::kBackoff);
  EXPECT_EQ(backoff.max_attempts(), 3);
  EXPECT_EQ(backoff.backoff().nominal(1), seconds(1));
  EXPECT_EQ(backoff.backoff().nominal(2), seconds(2));
  EXPECT_EQ(backoff.backoff().nominal(9), seconds(10));
  EXPECT_EQ(backoff.backoff().jitter().kind(), Jitter::Kind::kNone);
  EXPECT_EQ(retry_policy(Strategy::kOriginBreaker).max_attempts(), 3);
  EXPECT_EQ(retry_policy(Strategy::kBackoff, 4).max_attempts(), 4);
  const RetryPolicy naive = retry_policy(Strategy::kNaive);
  EXPECT_EQ(naive.max_attempts(), 4);
  EXPECT_EQ(naive.backoff().max_delay(), Duration::zero());
  EXPECT_EQ(retry_policy(Strategy::kNone).max_attempts(), 1);
}

}  // namespace
}  // namespace holdfast::baselines
