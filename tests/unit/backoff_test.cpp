#include "holdfast/core/backoff.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "holdfast/core/random.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

double ms(Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

TEST(Backoff, StandardScheduleStaysWithinFiftyPercentOfEachStep) {
  const Backoff b = Backoff::standard();
  const double nominal[] = {200, 600, 1500, 3000, 3000, 3000};
  Random rng(42);
  for (int retry = 1; retry <= 6; ++retry) {
    EXPECT_EQ(ms(b.nominal(retry)), nominal[retry - 1]);
    double lo = 1e18, hi = 0, sum = 0;
    for (int i = 0; i < 10000; ++i) {
      const double d = ms(b.delay(retry, {}, rng));
      lo = std::min(lo, d);
      hi = std::max(hi, d);
      sum += d;
    }
    const double n = nominal[retry - 1];
    EXPECT_GE(lo, 0.5 * n);
    EXPECT_LE(hi, 1.5 * n);
    // Spread over the whole range, centred on the step.
    EXPECT_LT(lo, 0.52 * n);
    EXPECT_GT(hi, 1.48 * n);
    EXPECT_NEAR(sum / 10000, n, 0.02 * n);
  }
}

TEST(Backoff, SessionReadsScheduleRetriesSoonerAtFirst) {
  const Backoff b = Backoff::session_reads();
  EXPECT_EQ(b.nominal(1), milliseconds(150));
  EXPECT_EQ(b.nominal(2), milliseconds(500));
  EXPECT_EQ(b.nominal(3), milliseconds(1500));
  EXPECT_EQ(b.nominal(4), milliseconds(3000));
}

TEST(Backoff, ExponentialMatchesTenacityWaitExponential) {
  // wait_exponential(multiplier=1, min=1, max=10): 1, 2, 4, 8, 10, 10 s.
  const Backoff b = Backoff::exponential(seconds(1), 2.0, seconds(10), Jitter::none());
  Random rng(1);
  const int expected[] = {1, 2, 4, 8, 10, 10};
  for (int retry = 1; retry <= 6; ++retry) {
    EXPECT_EQ(b.delay(retry, {}, rng), seconds(expected[retry - 1])) << retry;
  }
  EXPECT_EQ(b.nominal(1000), seconds(10));  // no overflow far out
}

struct Range {
  double lo, hi;  // as fractions of the nominal delay
};

void expect_range(const Backoff& b, Range r, int draws = 20000) {
  Random rng(7);
  for (int retry = 1; retry <= 4; ++retry) {
    const double n = ms(b.nominal(retry));
    double lo = 1e18, hi = -1;
    for (int i = 0; i < draws; ++i) {
      const double d = ms(b.delay(retry, {}, rng));
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    EXPECT_GE(lo, r.lo * n - 1e-6) << "retry " << retry;
    EXPECT_LE(hi, r.hi * n + 1e-6) << "retry " << retry;
    EXPECT_LT(lo, (r.lo + 0.02) * n) << "retry " << retry;
    EXPECT_GT(hi, (r.hi - 0.02) * n) << "retry " << retry;
  }
}

TEST(Backoff, EachJitterKindStaysInItsDocumentedRange) {
  const auto exp = [](Jitter j) {
    return Backoff::exponential(milliseconds(100), 2.0, seconds(5), j);
  };
  expect_range(exp(Jitter::full()), {0.0, 1.0});
  expect_range(exp(Jitter::equal()), {0.5, 1.0});
  expect_range(exp(Jitter::proportional(0.2)), {0.8, 1.2});
  expect_range(exp(Jitter::proportional(0.0)), {1.0, 1.0});
  Random rng(3);
  EXPECT_EQ(exp(Jitter::none()).delay(3, {}, rng), milliseconds(400));
}

TEST(Backoff, DecorrelatedJitterStaysBetweenBaseAndThreeTimesPreviousUnderTheCap) {
  const Backoff b =
      Backoff::exponential(milliseconds(100), 2.0, seconds(2), Jitter::decorrelated());
  Random rng(11);
  Duration previous{};
  for (int i = 1; i <= 5000; ++i) {
    const Duration d = b.delay(i, previous, rng);
    const Duration prev = previous > Duration::zero() ? previous : milliseconds(100);
    EXPECT_GE(d, milliseconds(100));
    EXPECT_LE(d, std::min<Duration>(seconds(2), 3 * prev));
    previous = d;
  }
}

TEST(Backoff, SameSeedGivesTheSameDelays) {
  const Backoff b = Backoff::standard();
  Random a(99), c(99);
  for (int i = 1; i < 50; ++i)
    EXPECT_EQ(b.delay(i, {}, a), b.delay(i, {}, c));
}

TEST(Backoff, MaxDelayBoundsEveryDelay) {
  EXPECT_EQ(Backoff::standard().max_delay(), milliseconds(4500));
  EXPECT_EQ(Backoff::exponential(seconds(1), 2, seconds(10), Jitter::full()).max_delay(),
            seconds(10));
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(BackoffConfig, InvalidConfigurationNamesTheField) {
  EXPECT_THAT(error_of([] { (void)Backoff::steps(std::vector<Duration>{}); }),
              HasSubstr("delays must not be empty"));
  EXPECT_THAT(error_of([] {
                (void)Backoff::steps({milliseconds(1), milliseconds(-5)});
              }),
              HasSubstr("delays[1] must not be negative"));
  EXPECT_THAT(error_of([] { (void)Jitter::proportional(-0.1); }), HasSubstr("ratio"));
  EXPECT_THAT(error_of([] { (void)Jitter::proportional(1.5); }), HasSubstr("ratio"));
  EXPECT_THAT(error_of([] { (void)Backoff::exponential(milliseconds(-1), 2, seconds(1)); }),
              HasSubstr("base must not be negative"));
  EXPECT_THAT(error_of([] { (void)Backoff::exponential(seconds(1), 0.5, seconds(2)); }),
              HasSubstr("factor"));
  EXPECT_THAT(error_of([] { (void)Backoff::exponential(seconds(2), 2, seconds(1)); }),
              HasSubstr("cap"));
}

}  // namespace
}  // namespace holdfast
