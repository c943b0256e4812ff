#include "holdfast/core/retry_throttle.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/core/random.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr TimePoint kT0 = ManualClock::kStart;

RetryThrottle::Options no_floor() {
  RetryThrottle::Options o;
  o.floor_per_second = 0;
  return o;
}

TEST(ThrottleOptions, DefaultsAreGrpcsExampleAndFinaglesFloor) {
  const RetryThrottle::Options o;
  EXPECT_EQ(o.max_tokens, 10.0);
  EXPECT_EQ(o.token_ratio, 0.1);
  EXPECT_EQ(o.floor_per_second, 10.0);
}

TEST(ThrottleOptions, EachBadFieldIsRejectedByName) {
  struct Case {
    const char* field;
    std::function<void(RetryThrottle::Options&)> spoil;
  };
  const std::vector<Case> cases = {
      {"max_tokens", [](auto& o) { o.max_tokens = 0; }},
      {"max_tokens", [](auto& o) { o.max_tokens = 1001; }},
      {"token_ratio", [](auto& o) { o.token_ratio = 0; }},
      {"token_ratio", [](auto& o) { o.token_ratio = 11; }},
      {"token_ratio", [](auto& o) { o.token_ratio = 0.0001; }},
      {"floor_per_second", [](auto& o) { o.floor_per_second = -1; }},
  };
  for (const Case& c : cases) {
    RetryThrottle::Options o;
    c.spoil(o);
    try {
      RetryThrottle t(o);
      ADD_FAILURE() << "accepted a bad " << c.field;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("RetryThrottle::Options::") + c.field));
    }
  }
}

TEST(Throttle, StartsFullAndAllowsRetries) {
  RetryThrottle t(no_floor());
  EXPECT_EQ(t.tokens(), 10.0);
  EXPECT_TRUE(t.above_half());
  EXPECT_TRUE(t.allow_retry(kT0));
  EXPECT_EQ(t.tokens(), 10.0) << "asking costs nothing; failures do";
}

TEST(Throttle, RetriesStopWhenHalfTheTokensAreGone) {
  RetryThrottle t(no_floor());
  for (int i = 0; i < 4; ++i)
    t.record_failure();
  EXPECT_EQ(t.tokens(), 6.0);
  EXPECT_TRUE(t.allow_retry(kT0));
  t.record_failure();
  EXPECT_EQ(t.tokens(), 5.0);
  EXPECT_FALSE(t.allow_retry(kT0)) << "5 is not more than half of 10";
  EXPECT_EQ(t.retry_after(kT0), Duration::zero()) << "no floor: nobody can say when";
  t.record_success();
  EXPECT_DOUBLE_EQ(t.tokens(), 5.1);
  EXPECT_TRUE(t.allow_retry(kT0)) << "a success adds token_ratio";
}

TEST(Throttle, TokensStayBetweenZeroAndTheMaximum) {
  RetryThrottle t(no_floor());
  for (int i = 0; i < 50; ++i)
    t.record_success();
  EXPECT_EQ(t.tokens(), 10.0);
  for (int i = 0; i < 50; ++i)
    t.record_failure();
  EXPECT_EQ(t.tokens(), 0.0);
  for (int i = 0; i < 51; ++i)
    t.record_success();
  EXPECT_DOUBLE_EQ(t.tokens(), 5.1);
}

TEST(Throttle, TheFloorLetsAFewRetriesThroughEverySecond) {
  RetryThrottle t;  // floor 10 a second
  for (int i = 0; i < 10; ++i)
    t.record_failure();
  ASSERT_FALSE(t.above_half());
  int allowed = 0;
  for (int i = 0; i < 100; ++i)
    allowed += t.allow_retry(kT0) ? 1 : 0;
  EXPECT_EQ(allowed, 10) << "a burst of one second's worth";
  EXPECT_EQ(t.retry_after(kT0), milliseconds(100));
  EXPECT_FALSE(t.allow_retry(kT0 + milliseconds(99)));
  EXPECT_TRUE(t.allow_retry(kT0 + milliseconds(100)));
  EXPECT_FALSE(t.allow_retry(kT0 + milliseconds(100)));
  // Over the next ten seconds, asking every millisecond: 10 a second.
  allowed = 0;
  for (int ms = 101; ms <= 10100; ++ms)
    allowed += t.allow_retry(kT0 + milliseconds(ms)) ? 1 : 0;
  EXPECT_EQ(allowed, 100);
}

TEST(Throttle, CapsLoadAmplificationNoMatterHowManyRequestsFail) {
  // 1,000 requests a second for 100 s, each failing with probability p and retried up to 4
  // times when the throttle allows: attempts per request stay near 1 + ratio (plus the
  // floor's 10 a second, 0.01 per request here) once failures outrun the ratio.
  for (double p : {0.1, 0.5, 1.0}) {
    RetryThrottle t;
    Random rng(7);
    long attempts = 0;
    const int requests = 100000;
    for (int r = 0; r < requests; ++r) {
      const TimePoint now = kT0 + milliseconds(r);
      for (int a = 0; a < 5; ++a) {
        ++attempts;
        if (rng.uniform() >= p) {
          t.record_success();
          break;
        }
        t.record_failure();
        if (a == 4 || !t.allow_retry(now)) break;
      }
    }
    const double per_request = static_cast<double>(attempts) / requests;
    EXPECT_LE(per_request, 1.0 + 0.1 + 0.01 + 0.001) << "p=" << p;
    if (p == 1.0) {
      EXPECT_LT(per_request, 1.02);
    }
  }
}

TEST(Throttle, ConcurrentUpdatesKeepTheBucketInRange) {
  RetryThrottle t;
  std::vector<std::thread> threads;
  std::atomic<bool> out_of_range{false};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      Random rng(static_cast<std::uint64_t>(i) + 1);
      for (int n = 0; n < 50000; ++n) {
        if (rng.uniform() < 0.3) {
          t.record_failure();
        } else {
          t.record_success();
        }
        const double tokens = t.tokens();
        if (tokens < 0.0 || tokens > 10.0) out_of_range = true;
        (void)t.allow_retry(kT0 + milliseconds(n));
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_FALSE(out_of_range.load());
}

TEST(Throttle, ConcurrentSuccessesAreNotLost) {
  // From empty, 4 threads x 25 successes of 0.1 = exactly 10 tokens.
  RetryThrottle t(no_floor());
  for (int i = 0; i < 10; ++i)
    t.record_failure();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int n = 0; n < 25; ++n)
        t.record_success();
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_DOUBLE_EQ(t.tokens(), 10.0);
}

}  // namespace
}  // namespace holdfast
