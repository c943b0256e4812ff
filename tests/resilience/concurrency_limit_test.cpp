#include "holdfast/core/concurrency_limit.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

ConcurrencyLimit::Options small(int initial, int max = 1000) {
  ConcurrencyLimit::Options o;
  o.min = 1;
  o.initial = initial;
  o.max = max;
  return o;
}

// Holds `n` places, takes one sample of `latency` with them in flight, gives them back.
void busy_sample(ConcurrencyLimit& limit, int n, Duration latency, bool dropped = false) {
  for (int i = 0; i < n; ++i)
    limit.acquire();
  limit.record(latency, dropped);
  for (int i = 0; i < n; ++i)
    limit.release();
}

TEST(ConcurrencyLimitOptions, EachBadFieldIsRejectedByName) {
  const auto message = [](auto change) {
    ConcurrencyLimit::Options o;
    change(o);
    try {
      ConcurrencyLimit l(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(message([](auto& o) { o.min = 0; }), HasSubstr("min"));
  EXPECT_THAT(message([](auto& o) { o.max = 1; }), HasSubstr("max"));
  EXPECT_THAT(message([](auto& o) { o.initial = 5000; }), HasSubstr("initial"));
  EXPECT_THAT(message([](auto& o) { o.tolerance = 0.5; }), HasSubstr("tolerance"));
  EXPECT_THAT(message([](auto& o) { o.smoothing = 0; }), HasSubstr("smoothing"));
  EXPECT_THAT(message([](auto& o) { o.long_samples = 5; }), HasSubstr("long_samples"));
  EXPECT_THAT(message([](auto& o) { o.retry_share = 1.5; }), HasSubstr("retry_share"));
}

TEST(ConcurrencyLimit, AQuietServiceLearnsNothingAboutMoreLoad) {
  ConcurrencyLimit limit(small(20));
  for (int i = 0; i < 1000; ++i)
    busy_sample(limit, 1, milliseconds(5));
  EXPECT_DOUBLE_EQ(limit.limit(), 20.0) << "one call at a time says nothing about 40";
  EXPECT_FALSE(limit.tight());
  EXPECT_EQ(limit.in_flight(), 0);
}

TEST(ConcurrencyLimit, ABusyServiceAtNormalLatencyGrows) {
  ConcurrencyLimit limit(small(20));
  busy_sample(limit, 1, milliseconds(5));  // the normal latency: 5 ms
  for (int i = 0; i < 50; ++i)
    busy_sample(limit, static_cast<int>(limit.limit()), milliseconds(5));
  EXPECT_GT(limit.limit(), 40.0);
}

TEST(ConcurrencyLimit, LatencyRisingAboveTwiceNormalShrinksItByAtMostHalfASample) {
  ConcurrencyLimit limit(small(100));
  for (int i = 0; i < 20; ++i)
    busy_sample(limit, 1, milliseconds(5));
  const double before = limit.limit();
  busy_sample(limit, 100, milliseconds(50));
  EXPECT_LT(limit.limit(), before);
  EXPECT_GE(limit.limit(), before * (1.0 - 0.2 * 0.5)) << "smoothing 0.2 of a gradient >= 0.5";
  for (int i = 0; i < 100; ++i)
    busy_sample(limit, 100, milliseconds(50));
  EXPECT_LT(limit.limit(), 20.0);
}

TEST(ConcurrencyLimit, ALatencyFarAboveToleranceTakesTheLimitToItsMinimum) {
  // 200 processes sharing 80 workers each see the database 100 x slower than normal. The
  // queue allowance (at least 1) once held every limit at 4 or more against the gradient's
  // floor of one half; far above tolerance it shrinks, and the limit goes to its minimum.
  ConcurrencyLimit::Options o = small(20);
  o.min = 2;
  ConcurrencyLimit limit(o);
  for (int i = 0; i < 20; ++i)
    busy_sample(limit, 1, milliseconds(2));
  for (int i = 0; i < 200; ++i)
    busy_sample(limit, static_cast<int>(limit.limit()), milliseconds(200));
  EXPECT_LT(limit.limit(), 2.5);
  // Within 4 x tolerance (here 5 x the normal: 2.5 x tolerance) the allowance stays whole.
  ConcurrencyLimit moderate(o);
  for (int i = 0; i < 20; ++i)
    busy_sample(moderate, 1, milliseconds(2));
  for (int i = 0; i < 200; ++i)
    busy_sample(moderate, static_cast<int>(moderate.limit()), milliseconds(10));
  EXPECT_GE(moderate.limit(), 3.9) << "2 x an allowance of at least sqrt(4)";
}

TEST(ConcurrencyLimit, ALuckyFirstAnswerDoesNotSetTheNormalLatency) {
  // An exponential service of 5 ms answers within 10 us one time in 500. The normal latency
  // is the mean of the first short_samples (5) answers, not the first one alone (which it
  // would then keep for minutes: it rises only by creeping).
  ConcurrencyLimit limit(small(20));
  busy_sample(limit, 1, std::chrono::microseconds(10));
  for (int i = 0; i < 4; ++i)
    busy_sample(limit, 1, milliseconds(5));
  EXPECT_NEAR(static_cast<double>(std::chrono::nanoseconds(limit.normal_latency()).count()),
              4'002'000.0, 10.0);
  for (int i = 0; i < 20; ++i)
    busy_sample(limit, 1, milliseconds(5));
  EXPECT_FALSE(limit.tight()) << "5 ms is within twice the normal";
}

TEST(ConcurrencyLimit, ADroppedCallIsNoAnswerForTheNormalLatency) {
  // A call given up at its 1 s timeout before any answer says nothing about the normal pace.
  ConcurrencyLimit limit(small(20));
  busy_sample(limit, 1, std::chrono::seconds(1), /*dropped=*/true);
  EXPECT_EQ(limit.normal_latency(), Duration::zero());
  EXPECT_TRUE(limit.tight()) << "no answer yet, and a call timed out";
  for (int i = 0; i < 5; ++i)
    busy_sample(limit, 1, milliseconds(5));
  EXPECT_EQ(limit.normal_latency(), milliseconds(5));
}

TEST(ConcurrencyLimit, TheNormalLatencyDoesNotLearnAQueue) {
  ConcurrencyLimit limit(small(20));
  for (int i = 0; i < 20; ++i)
    busy_sample(limit, 1, milliseconds(5));
  for (int i = 0; i < 2000; ++i)
    busy_sample(limit, 20, milliseconds(200));
  EXPECT_LT(limit.normal_latency(), milliseconds(10))
      << "a long overload does not become the normal";
  EXPECT_GT(limit.recent_latency(), milliseconds(150));
}

TEST(ConcurrencyLimit, ADroppedCallShrinksIt) {
  ConcurrencyLimit limit(small(50));
  busy_sample(limit, 1, milliseconds(5));
  busy_sample(limit, 1, std::chrono::seconds(1), /*dropped=*/true);
  EXPECT_DOUBLE_EQ(limit.limit(), 45.0);
}

using Place = ConcurrencyLimit::Place;

// Makes the limit tight the way a database does: answers twice as slow as normal.
void slow_down(ConcurrencyLimit& limit) {
  for (int i = 0; i < 20; ++i)
    busy_sample(limit, 1, milliseconds(5));
  busy_sample(limit, 1, milliseconds(500));
}

TEST(ConcurrencyLimit, AtNormalLatencyAdmissionsAreNotEvenCounted) {
  ConcurrencyLimit limit(small(2, 2));
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(limit.try_acquire(false), Place::kUncounted);
  EXPECT_EQ(limit.in_flight(), 0);
  EXPECT_FALSE(limit.tight());
}

TEST(ConcurrencyLimit, WhileBusyFirstAttemptsFillTheLimitAndRetriesOnlyItsSpareShare) {
  ConcurrencyLimit limit(small(10, 10));
  slow_down(limit);
  ASSERT_TRUE(limit.tight());
  const double cap = limit.limit();
  int taken = 0;
  while (limit.try_acquire(false) == Place::kCounted)
    ++taken;
  EXPECT_EQ(taken, static_cast<int>(cap));
  limit.release();
  EXPECT_EQ(limit.try_acquire(true), Place::kRefused) << "one place free: not a retry's (0.9)";
  EXPECT_EQ(limit.try_acquire(false), Place::kCounted) << "a first attempt takes the last place";
  limit.release();
  limit.release();
  EXPECT_EQ(limit.try_acquire(true), Place::kCounted) << "two free: a retry may go";
}

TEST(ConcurrencyLimit, SlowAnswersAloneMakeItTightButOnlyCountedWorkMakesItBusy) {
  ConcurrencyLimit limit(small(10, 10));
  slow_down(limit);
  EXPECT_TRUE(limit.tight());
  EXPECT_FALSE(limit.busy()) << "nothing counted in flight: room to spare";
  for (int i = 0; i < 6; ++i)
    limit.acquire();
  limit.record(milliseconds(500), false);
  EXPECT_TRUE(limit.busy());
  for (int i = 0; i < 6; ++i)
    limit.release();
  for (int i = 0; i < 50; ++i)
    limit.record(milliseconds(5), false);
  EXPECT_FALSE(limit.tight()) << "normal latency and nothing in flight: relaxed again";
  EXPECT_FALSE(limit.busy());
}

TEST(ConcurrencyLimit, NobodyOvertakesQueuedCallers) {
  ConcurrencyLimit limit(small(10, 10));
  limit.queued(1);
  EXPECT_TRUE(limit.tight());
  EXPECT_EQ(limit.try_acquire(false), Place::kRefused) << "the place goes to the one in line";
  limit.queued(-1);
  EXPECT_EQ(limit.try_acquire(false), Place::kCounted);
  limit.release();
}

TEST(ConcurrencyLimit, TheExpectedWaitIsThePlacesAheadAtTheRecentPace) {
  ConcurrencyLimit limit(small(10, 10));
  busy_sample(limit, 1, milliseconds(20));
  EXPECT_EQ(limit.expected_wait(0), milliseconds(2));
  EXPECT_EQ(limit.expected_wait(9), milliseconds(20));
}

TEST(ConcurrencyLimit, CallsFinishedOnAnotherThreadAreCountedOnce) {
  ConcurrencyLimit limit;
  for (int i = 0; i < 100; ++i)
    limit.acquire();
  std::thread other([&] {
    for (int i = 0; i < 100; ++i)
      limit.release();
  });
  other.join();
  EXPECT_EQ(limit.in_flight(), 0);
}

TEST(ConcurrencyLimit, OneSampleIsTakenPerClockTick) {
  ConcurrencyLimit limit;
  const TimePoint t{std::chrono::seconds(1)};
  EXPECT_TRUE(limit.wants_sample(t));
  EXPECT_FALSE(limit.wants_sample(t));
  EXPECT_TRUE(limit.wants_sample(t + milliseconds(4)));
}

}  // namespace
}  // namespace holdfast
