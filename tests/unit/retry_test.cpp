#include "holdfast/core/retry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "holdfast/core/classify.hpp"
#include "holdfast/log/console.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr int kBusy = 5;
constexpr int kConstraintUnique = 2067;

Status busy() {
  return sqlite_status(kBusy, "database is locked");
}

// A policy on virtual time with reproducible jitter that records every wait.
struct Fixture {
  ManualClock clock;
  std::vector<RetryEvent> events;
  std::vector<Duration> delays;
  RetryPolicy policy;
  Fixture() {
    policy.clock(clock).seed(2026).on_retry([this](const RetryEvent& e) {
      delays.push_back(e.delay);
      EXPECT_LE(e.delay, e.window_remaining) << "a sleep would end past the window";
    });
  }
};

TEST(Retry, SuccessOnFirstAttemptMakesOneAttemptAndNeverSleeps) {
  Fixture f;
  RetryStats stats;
  const TimePoint start = f.clock.now();
  Result<int> r = retry(
      f.policy, Operation::read(), [] { return Result<int>(7); }, &stats);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(stats.attempts, 1);
  EXPECT_EQ(stats.slept, Duration::zero());
  EXPECT_EQ(f.clock.now(), start);
}

TEST(Retry, ATransientFaultIsRetriedWithTheOriginScheduleUntilItSucceeds) {
  Fixture f;
  int calls = 0;
  RetryStats stats;
  Result<int> r = retry(
      f.policy, Operation::read(),
      [&]() -> Result<int> {
        if (++calls < 4) return busy();
        return 42;
      },
      &stats);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(stats.attempts, 4);
  ASSERT_EQ(f.delays.size(), 3u);
  const int nominal[] = {200, 600, 1500};
  Duration total{};
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(f.delays[i], milliseconds(nominal[i]) / 2);
    EXPECT_LE(f.delays[i], milliseconds(nominal[i]) * 3 / 2);
    total += f.delays[i];
  }
  EXPECT_EQ(stats.slept, total);
  EXPECT_EQ(f.clock.total_slept(), total);
}

TEST(Retry, MakesAtMostFiveAttemptsAndSaysSo) {
  Fixture f;
  f.policy.window(seconds(60));  // room for all of them
  int calls = 0;
  Status s = retry(f.policy, Operation::read(), [&] {
    ++calls;
    return busy();
  });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(s.stop_reason(), StopReason::kAttemptsExhausted);
  EXPECT_EQ(s.attempts(), 5);
  // The last underlying fault is carried along.
  EXPECT_EQ(s.sqlite_code(), kBusy);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_THAT(s.to_string(), HasSubstr("gave up: attempts exhausted after 5 attempts"));
}

TEST(Retry, NeverSleepsPastTheWindowAndLandsOneLastAttemptInsideIt) {
  Fixture f;
  f.policy.max_attempts(100).backoff(Backoff::steps({seconds(10)}, Jitter::none()));
  int calls = 0;
  const TimePoint start = f.clock.now();
  Status s = retry(f.policy, Operation::read(), [&] {
    ++calls;
    return busy();
  });
  // One wait, shortened from 10 s to what the 6 s window leaves for a last attempt.
  ASSERT_EQ(f.delays.size(), 1u);
  EXPECT_EQ(f.delays[0], seconds(6) - f.policy.last_attempt_time());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s.stop_reason(), StopReason::kWindowSpent);
  EXPECT_LE(f.clock.now() - start, seconds(6));
}

TEST(Retry, APermanentFaultIsNeverRetried) {
  Fixture f;
  int calls = 0;
  Status s = retry(f.policy, Operation::read(), [&] {
    ++calls;
    return sqlite_status(kConstraintUnique, "UNIQUE constraint failed: users.email");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kPermanent);
  EXPECT_EQ(s.code(), Code::kAlreadyExists);
  EXPECT_TRUE(f.delays.empty());
}

TEST(Retry, AnUnknownOutcomeIsRetriedOnlyWhenTheCallerSaidItIsIdempotent) {
  Fixture f;
  const auto lost = [] { return postgres_status("", "server closed the connection"); };
  int calls = 0;
  Status s = retry(f.policy, Operation::write("payment"), [&] {
    ++calls;
    return lost();
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);

  calls = 0;
  s = retry(f.policy, Operation::idempotent_write("payment with key"),
            [&] { return ++calls < 3 ? lost() : Status(); });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3);
}

TEST(Retry, ATransactionConflictIsRetriedOnlyByAReRunnableTransactionFunction) {
  Fixture f;
  int calls = 0;
  Status s = retry(f.policy, Operation::write(), [&] {
    ++calls;
    return postgres_status("40001", "could not serialize access");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);

  calls = 0;
  s = retry(f.policy, Operation::transaction(/*rerunnable=*/true), [&] {
    return ++calls < 2 ? postgres_status("40001", "could not serialize access") : Status();
  });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 2);

  calls = 0;
  s = retry(f.policy, Operation::transaction(/*rerunnable=*/false), [&] {
    ++calls;
    return sqlite_status(517, "database is locked");  // SQLITE_BUSY_SNAPSHOT
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kNotSafeToRepeat);
}

TEST(Retry, NestedLoopsInsideOneScopeMakeNoMoreAttemptsThanOneLoop) {
  Fixture f;
  RequestScope scope(seconds(6), f.clock);
  int calls = 0;
  const auto always_busy = [&] {
    ++calls;
    return busy();
  };
  RetryStats outer;
  Status s = retry(
      f.policy, Operation::read("outer"),
      [&] { return retry(f.policy, Operation::read("inner"), always_busy); }, &outer);

  int single = 0;
  {
    ManualClock clock2;
    RetryPolicy p = f.policy;
    p.clock(clock2);
    RequestScope scope2(seconds(6), clock2);
    (void)retry(p, Operation::read(), [&] {
      ++single;
      return busy();
    });
  }
  EXPECT_EQ(calls, single);
  EXPECT_EQ(outer.attempts, 1);
  EXPECT_NE(s.stop_reason(), StopReason::kNone);
}

// A pool's failed connect: it connects again after `connects_again`. kProbeFailed: the
// connect probed a server that was already refusing connects.
Status refused(Duration connects_again, StopReason stop = StopReason::kNone) {
  Status s(Code::kUnavailable, "connection refused",
           Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true});
  s.with_stop(stop, 0, connects_again);
  return s;
}

// A pool whose connect just failed says when it connects again (retry_after() with no stop
// reason). A retry due sooner would only be refused: the loop answers now, with when; one
// due later goes ahead.
TEST(Retry, AFailureThatNamesWhenItCanBeServedEndsTheLoopWhenThatIsAfterTheNextWait) {
  {
    Fixture f;
    RetryStats stats;
    Result<int> r = retry(
        f.policy, Operation::read(), [&]() -> Result<int> { return refused(seconds(1)); }, &stats);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(stats.attempts, 1);
    EXPECT_EQ(stats.slept, Duration::zero()) << "waited only to be refused";
    EXPECT_EQ(r.status().stop_reason(), StopReason::kBreakerOpen);
    EXPECT_EQ(r.status().retry_after(), seconds(1));
  }
  {
    Fixture f;
    int calls = 0;
    Result<int> r = retry(f.policy, Operation::read(), [&]() -> Result<int> {
      if (++calls < 3) return refused(milliseconds(50));  // shorter than 200 ms -50 %
      return 1;
    });
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(calls, 3);
  }
}

// A server refusing connects is restarting (back within about a second) or away: the loop
// waits the short steps out, but not a longer one.
TEST(Retry, ARefusingServerIsWaitedForNoLongerThanTheShortSteps) {
  Fixture f;
  RetryStats stats;
  int calls = 0;
  Result<int> r = retry(
      f.policy, Operation::read(),
      [&]() -> Result<int> {
        ++calls;
        return refused(milliseconds(50));
      },
      &stats);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().stop_reason(), StopReason::kBreakerOpen);
  // The 200 and 600 ms steps are waited (and 1.5 s if its jitter brings it under a
  // second); the first step longer than a second is not, so the schedule is not used up.
  EXPECT_GE(calls, 3);
  EXPECT_LT(calls, f.policy.max_attempts());
  for (const Duration d : f.delays)
    EXPECT_LE(d, seconds(1));
  EXPECT_EQ(stats.slept, std::accumulate(f.delays.begin(), f.delays.end(), Duration{}));
  EXPECT_EQ(r.status().retry_after(), milliseconds(50));
}

// A server that refused the pool's probe connect once more is away: the request answers now,
// with when the pool connects again, instead of riding the refusal out.
TEST(Retry, ARefusedProbeIsAnsweredAtOnce) {
  Fixture f;
  int calls = 0;
  const auto probe = [&]() -> Result<int> {
    ++calls;
    return refused(milliseconds(50), StopReason::kProbeFailed);
  };
  Result<int> r = retry(f.policy, Operation::read(), probe);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().stop_reason(), StopReason::kProbeFailed);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(f.delays.empty());
  EXPECT_EQ(r.status().retry_after(), milliseconds(50));
}

TEST(Retry, ResultOfAnyTypeAndStatsAreReturned) {
  Fixture f;
  RetryStats stats;
  int calls = 0;
  Result<std::string> r = retry(
      f.policy, Operation::read(),
      [&]() -> Result<std::string> {
        if (++calls == 1) return busy();
        return std::string("court 3");
      },
      &stats);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "court 3");
  EXPECT_EQ(stats.attempts, 2);
  EXPECT_EQ(stats.slept, f.delays.at(0));
  EXPECT_EQ(stats.stop, StopReason::kNone);
}

// A user's own driver that throws.
struct DriverError : std::runtime_error {
  int code;
  DriverError(int c, const char* what) : std::runtime_error(what), code(c) {}
};

TEST(RetryThrowing, ClassifiesTheUsersExceptionsAndRetriesByTheirFault) {
  Fixture f;
  int calls = 0;
  Result<int> r = retry_throwing<DriverError>(
      f.policy, Operation::read(),
      [&] {
        if (++calls < 3) throw DriverError(kBusy, "database is locked");
        return 5;
      },
      [](const DriverError& e) { return sqlite_status(e.code, e.what()); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 5);
  EXPECT_EQ(calls, 3);

  Result<void> v = retry_throwing<DriverError>(
      f.policy, Operation::write(), [] { throw DriverError(19, "constraint"); },
      [](const DriverError& e) { return sqlite_status(e.code, e.what()); });
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().stop_reason(), StopReason::kPermanent);
  EXPECT_THROW(v.value(), Error);
}

TEST(RetryThrowing, OtherExceptionsPropagateUnchanged) {
  Fixture f;
  EXPECT_THROW((void)retry_throwing<DriverError>(
                   f.policy, Operation::read(), []() -> int { throw std::logic_error("bug"); },
                   [](const DriverError&) { return busy(); }),
               std::logic_error);
}

TEST(RetryState, AnEventDrivenCallerGetsTheSameDecisionsAsTheLoop) {
  Fixture f;
  int calls = 0;
  (void)retry(f.policy, Operation::read(), [&] {
    ++calls;
    return busy();
  });

  ManualClock clock;
  RetryPolicy p = f.policy;
  p.clock(clock);
  RetryState state(p, Operation::read());
  std::vector<Duration> decided;
  for (;;) {
    const RetryDecision d = state.on_failure(busy(), clock.now());
    if (!d.retry) {
      EXPECT_EQ(state.give_up(busy(), d.reason).attempts(), calls);
      break;
    }
    decided.push_back(d.delay);
    clock.advance(d.delay);  // an event loop would arm a timer instead
  }
  EXPECT_EQ(decided, f.delays);
}

TEST(Retry, TheDefaultHookWritesOneDebugLineToTheConsolePerRetry) {
  ManualClock clock;
  RetryPolicy policy;
  policy.clock(clock).seed(1);
  const Level before = console::level();
  console::set_level(Level::kDebug);
  testing::internal::CaptureStderr();
  int calls = 0;
  Status s = retry(policy, Operation::read("schedule.games"),
                   [&] { return ++calls < 3 ? busy() : Status(); });
  const std::string err = testing::internal::GetCapturedStderr();
  console::set_level(before);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2);
  EXPECT_THAT(err, HasSubstr("DEBUG [retry] schedule.games: attempt 1 failed"));
}

TEST(Retry, AHookThatThrowsDoesNotBreakTheLoop) {
  Fixture f;
  f.policy.on_retry([](const RetryEvent&) { throw std::runtime_error("hook"); });
  int calls = 0;
  Status s = retry(f.policy, Operation::read(), [&] { return ++calls < 2 ? busy() : Status(); });
  EXPECT_TRUE(s.ok());
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

TEST(RetryPolicyConfig, InvalidConfigurationNamesTheField) {
  RetryPolicy p;
  EXPECT_THAT(error_of([&] { p.max_attempts(0); }), HasSubstr("max_attempts"));
  EXPECT_THAT(error_of([&] { p.window(Duration::zero()); }), HasSubstr("window"));
  EXPECT_THAT(error_of([&] { p.last_attempt_time(milliseconds(-1)); }),
              HasSubstr("last_attempt_time"));
  EXPECT_THAT(error_of([] { RetryWindow w(seconds(-1)); }), HasSubstr("length"));
  EXPECT_EQ(p.max_attempts(), 5);  // a refused setting changes nothing
}

}  // namespace
}  // namespace holdfast

namespace holdfast {
namespace {
TEST(Console, AMultiLineMessageStaysOneLine) {
  const Level before = console::level();
  console::set_level(Level::kDebug);
  testing::internal::CaptureStderr();
  console::write(Level::kError, "pg", "ERROR: deadlock detected\nDETAIL: Process 1 waits");
  const std::string err = testing::internal::GetCapturedStderr();
  console::set_level(before);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
  EXPECT_THAT(err, HasSubstr("deadlock detected\\nDETAIL: Process 1 waits"));
}
}  // namespace
}  // namespace holdfast
