// The slow-copy rule (holdfast/detail/slow_copy.hpp, ADR 0041; pg::Database and
// asio::pg::Client both decide with it) on virtual time: when a replica is ejected for
// answering far slower than the primary, how often it is probed, when it comes back, and the
// hedge budget. No server, no sleep.
#include "holdfast/detail/slow_copy.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "holdfast/core/clock.hpp"

namespace holdfast::pg::detail {
namespace {

using std::chrono::milliseconds;

SlowCopyRule rule() {
  SlowCopyRule r;
  r.floor = milliseconds(20);
  r.factor = 4.0;
  r.probe_every = milliseconds(200);
  return r;
}

TEST(SlowCopyRule, TheThresholdIsSeveralTimesThePrimarysLatencyAndNeverBelowTheFloor) {
  EXPECT_EQ(slow_threshold(Duration::zero(), rule()), milliseconds(20));  // primary unknown
  EXPECT_EQ(slow_threshold(milliseconds(2), rule()), milliseconds(20));
  EXPECT_EQ(slow_threshold(milliseconds(10), rule()), milliseconds(40));
}

TEST(SlowCopyRule, ThreeSlowAnswersInARowEjectACopyAndAFastOneBetweenStartsOver) {
  ManualClock clock;
  SlowCopy copy(rule());
  EXPECT_FALSE(copy.slow(clock.now()));
  EXPECT_FALSE(copy.slow(clock.now()));
  EXPECT_FALSE(copy.fast());  // a straggler pair, then a fast answer: nothing happens
  EXPECT_FALSE(copy.slow(clock.now()));
  EXPECT_FALSE(copy.slow(clock.now()));
  EXPECT_FALSE(copy.ejected());
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kRead);
  EXPECT_TRUE(copy.slow(clock.now()));
  EXPECT_TRUE(copy.ejected());
  EXPECT_EQ(copy.ejections(), 1u);
  EXPECT_FALSE(copy.slow(clock.now()));  // already ejected
  EXPECT_EQ(copy.ejections(), 1u);
}

TEST(SlowCopyRule, AnEjectedCopyGetsOneProbeReadPerProbeInterval) {
  ManualClock clock;
  SlowCopy copy(rule());
  for (int i = 0; i < 3; ++i)
    copy.slow(clock.now());
  ASSERT_TRUE(copy.ejected());
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kSkip);
  clock.advance(milliseconds(199));
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kSkip);
  clock.advance(milliseconds(1));
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kProbe);
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kSkip);  // one probe per interval
  clock.advance(milliseconds(200));
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kProbe);
}

TEST(SlowCopyRule, TwoFastProbesInARowBringItBackAndASlowOneBetweenKeepsItOut) {
  ManualClock clock;
  SlowCopy copy(rule());
  for (int i = 0; i < 3; ++i)
    copy.slow(clock.now());
  ASSERT_TRUE(copy.ejected());
  EXPECT_FALSE(copy.fast());
  EXPECT_FALSE(copy.slow(clock.now()));  // still slow: the fast run starts over
  EXPECT_FALSE(copy.fast());
  EXPECT_TRUE(copy.ejected());
  EXPECT_TRUE(copy.fast());
  EXPECT_FALSE(copy.ejected());
  EXPECT_EQ(copy.use(clock.now()), SlowCopy::Use::kRead);
  // Back in use with a clean record: it takes three slow answers again.
  EXPECT_FALSE(copy.slow(clock.now()));
  EXPECT_FALSE(copy.slow(clock.now()));
  EXPECT_TRUE(copy.slow(clock.now()));
}

TEST(SlowCopyRule, AReadAfterThePrimaryFailedUsesAnEjectedCopyAndIsNoProbe) {
  ManualClock clock;
  SlowCopy copy(rule());
  for (int i = 0; i < 3; ++i)
    copy.slow(clock.now());
  ASSERT_TRUE(copy.ejected());
  EXPECT_EQ(copy.use(clock.now(), /*primary_failed=*/false), SlowCopy::Use::kSkip);
  EXPECT_EQ(copy.use(clock.now(), /*primary_failed=*/true), SlowCopy::Use::kRead);
  clock.advance(milliseconds(200));
  // The probe is still due for the next read that did not follow a failure of the primary.
  EXPECT_EQ(copy.use(clock.now(), /*primary_failed=*/true), SlowCopy::Use::kRead);
  EXPECT_EQ(copy.use(clock.now(), /*primary_failed=*/false), SlowCopy::Use::kProbe);
}

TEST(SlowCopyRule, AnswersAreJudgedAgainstThePrimarysRecentLatency) {
  ManualClock clock;
  CopyState replica(rule());
  const Duration primary = milliseconds(10);  // threshold 40 ms
  EXPECT_FALSE(judge_replica(replica, primary, false, milliseconds(39), clock.now()));
  EXPECT_FALSE(replica.slow.suspect());
  EXPECT_EQ(replica.latency.answers(), 1u);
  EXPECT_FALSE(judge_replica(replica, primary, false, milliseconds(41), clock.now()));
  EXPECT_TRUE(replica.slow.suspect());
  // A hedge it lost is slow too, and its latency (never known) is not recorded.
  EXPECT_FALSE(judge_replica(replica, primary, /*lost_hedge=*/true, Duration::zero(), clock.now()));
  EXPECT_EQ(replica.latency.answers(), 2u);
  EXPECT_TRUE(judge_replica(replica, primary, false, milliseconds(100), clock.now()));
  EXPECT_TRUE(replica.slow.ejected());
  // Two fast probes bring it back.
  EXPECT_FALSE(judge_replica(replica, primary, false, milliseconds(5), clock.now()));
  EXPECT_TRUE(replica.slow.ejected());
  EXPECT_FALSE(judge_replica(replica, primary, false, milliseconds(5), clock.now()));
  EXPECT_FALSE(replica.slow.ejected());
}

TEST(SlowCopyRule, AFloorOfZeroTurnsEjectionOffButTheLatencyIsStillLearned) {
  ManualClock clock;
  SlowCopyRule off = rule();
  off.floor = Duration::zero();
  CopyState replica(off);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(
        judge_replica(replica, milliseconds(1), false, std::chrono::seconds(1), clock.now()));
    EXPECT_FALSE(judge_replica(replica, milliseconds(1), true, Duration::zero(), clock.now()));
  }
  EXPECT_FALSE(replica.slow.ejected());
  EXPECT_FALSE(replica.slow.suspect());
  EXPECT_EQ(replica.slow.use(clock.now()), SlowCopy::Use::kRead);
  EXPECT_EQ(replica.latency.answers(), 5u);
}

TEST(SlowCopyRule, TheP95IsKnownFromTheSixteenthAnswerAndFollowsTheLast64) {
  CopyLatency c;
  for (int i = 1; i <= 15; ++i)
    c.record(milliseconds(i));
  EXPECT_EQ(c.p95(), Duration::zero());
  c.record(milliseconds(16));
  EXPECT_EQ(c.p95(), milliseconds(16));  // ceil(0.95 x 16) = the 16th of 16
  for (int i = 0; i < 64; ++i)
    c.record(milliseconds(2));
  EXPECT_EQ(c.p95(), milliseconds(2));  // the old answers left the ring
  for (int i = 0; i < 16; ++i)
    c.record(milliseconds(300));
  EXPECT_EQ(c.p95(), milliseconds(300));  // 16 of 64 slow: above the 95th percentile
}

TEST(SlowCopyRule, TheRecentLatencyIsAnEwmaOfTheAnswers) {
  CopyLatency c;
  EXPECT_EQ(c.recent(), Duration::zero());
  c.record(milliseconds(8));
  EXPECT_EQ(c.recent(), milliseconds(8));
  c.record(milliseconds(16));
  EXPECT_EQ(c.recent(), milliseconds(9));  // 8 + (16 - 8) / 8
}

TEST(SlowCopyRule, TheBudgetStartsWithTenHedgesAndEachReadEarnsAShareOfOneUpToTenSaved) {
  HedgeBudget b(0.02);
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(b.spend()) << i;
  EXPECT_FALSE(b.spend());
  for (int i = 0; i < 49; ++i)
    b.earn();
  EXPECT_FALSE(b.spend());
  b.earn();
  EXPECT_TRUE(b.spend());
  EXPECT_FALSE(b.spend());
  for (int i = 0; i < 5000; ++i)
    b.earn();
  int spent = 0;
  while (b.spend())
    ++spent;
  EXPECT_EQ(spent, 10);
  HedgeBudget off(0.0);
  off.earn();
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.spend());
}

}  // namespace
}  // namespace holdfast::pg::detail
