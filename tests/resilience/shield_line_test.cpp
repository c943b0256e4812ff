// The Shield's line for a place under the concurrency limit, judged by how long its waiters
// wait (ADR 0033), in virtual time. The rest of the Shield: shield_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "quiet_options.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

using holdfast::test_support::quiet_options;

// A Shield whose limit of one is taken by `holder`'s attempt, with a database that answers
// in about 1 ms normally (its first answers) and 4 ms lately: the line's target is 5 ms (the
// floor), its interval 50 ms.
struct FullLimit {
  ManualClock clock;
  std::optional<Shield> shield;
  std::vector<std::unique_ptr<RetryWindow>> windows;

  FullLimit() {
    Shield::Options o = quiet_options();
    o.limit.min = o.limit.initial = o.limit.max = 1;
    shield.emplace("main", o, clock);
    for (int i = 0; i < o.limit.short_samples; ++i)
      shield->limit().record(milliseconds(1), false);
    shield->limit().record(milliseconds(10), false);
  }
  std::unique_ptr<Shield::Call> call(std::uint64_t seed) {
    windows.push_back(std::make_unique<RetryWindow>(seconds(6), clock));
    return std::make_unique<Shield::Call>(*shield, shield->reads(), Operation::read(),
                                          windows.back().get(), Random(seed));
  }
};

TEST(ShieldLine, ALoneShortWaitQueuesForTheIntervalAndGetsThePlace) {
  FullLimit f;
  Shield& shield = *f.shield;
  EXPECT_EQ(shield.queue_target(), milliseconds(5));
  EXPECT_EQ(shield.queue_interval(), milliseconds(50));
  auto holder = f.call(1);
  Shield::Admission h = holder->admit(f.clock.now());
  ASSERT_EQ(h.kind, Shield::Admission::Kind::kAttempt);

  auto lone = f.call(2);
  const TimePoint came = f.clock.now();
  Shield::Admission a = lone->admit(came);
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kWait);
  EXPECT_EQ(a.until, came + milliseconds(50)) << "a line that does not stand: the interval";
  EXPECT_FALSE(shield.queue_standing());

  f.clock.advance(milliseconds(3));
  holder->succeeded(std::move(h.permit));
  EXPECT_TRUE(lone->woken()) << "the freed place went to it";
  a = lone->admit(f.clock.now());
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt);
  lone->succeeded(std::move(a.permit));
  EXPECT_FALSE(shield.queue_standing()) << "a 3 ms wait is within the target";
  EXPECT_EQ(shield.metrics().snapshot().at_capacity, 0u);
}

TEST(ShieldLine, AStandingLineShedsNewcomersAtOnceWithRetryAfter) {
  FullLimit f;
  Shield& shield = *f.shield;
  std::vector<std::unique_ptr<Shield::Call>> calls;
  calls.push_back(f.call(100));
  Shield::Admission running = calls.back()->admit(f.clock.now());
  ASSERT_EQ(running.kind, Shield::Admission::Kind::kAttempt);
  Shield::Call* holder = calls.back().get();
  // Every 10 ms the place changes hands, and each waiter has waited 10 ms for it: longer
  // than the 5 ms target, for longer than the 50 ms interval.
  for (int i = 0; i < 6; ++i) {
    calls.push_back(f.call(static_cast<std::uint64_t>(i)));
    Shield::Call* next = calls.back().get();
    ASSERT_EQ(next->admit(f.clock.now()).kind, Shield::Admission::Kind::kWait) << i;
    f.clock.advance(milliseconds(10));
    holder->succeeded(std::move(running.permit));
    ASSERT_TRUE(next->woken()) << i;
    running = next->admit(f.clock.now());
    ASSERT_EQ(running.kind, Shield::Admission::Kind::kAttempt) << i;
    holder = next;
  }
  EXPECT_TRUE(shield.queue_standing());

  // A newcomer would wait about 2.6 ms, but a standing line holds no more than its 5 ms
  // target, with room to spare for chance: it is told now, with when to come back.
  auto newcomer = f.call(200);
  const TimePoint came = f.clock.now();
  Shield::Admission a = newcomer->admit(came);
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kStop);
  EXPECT_EQ(a.status.stop_reason(), StopReason::kAtCapacity);
  EXPECT_EQ(a.status.code(), Code::kUnavailable);
  EXPECT_GT(a.status.retry_after(), Duration::zero());
  EXPECT_EQ(shield.waiting(), 0) << "it never joined the line";
  EXPECT_EQ(shield.metrics().snapshot().at_capacity, 1u);
  holder->succeeded(std::move(running.permit));

  // Nothing waits past the target for an interval: the line no longer stands.
  f.clock.advance(milliseconds(60));
  auto later = f.call(300);
  Shield::Admission b = later->admit(f.clock.now());
  ASSERT_EQ(b.kind, Shield::Admission::Kind::kAttempt) << "the place is free";
  later->succeeded(std::move(b.permit));
}

TEST(ShieldLine, AWaiterWhoseWaitNoLongerFitsIsToldAtOnceNotAtItsDeadline) {
  FullLimit f;
  Shield& shield = *f.shield;
  auto holder = f.call(1);
  Shield::Admission h = holder->admit(f.clock.now());
  ASSERT_EQ(h.kind, Shield::Admission::Kind::kAttempt);
  auto first = f.call(2);
  auto last = f.call(3);
  ASSERT_EQ(first->admit(f.clock.now()).kind, Shield::Admission::Kind::kWait);
  Shield::Admission w = last->admit(f.clock.now());
  ASSERT_EQ(w.kind, Shield::Admission::Kind::kWait);
  const TimePoint deadline = w.until;

  // The database slows down: an answer of 200 ms. When the place changes hands 2 ms later,
  // the last in line would wait about 40 ms more, three times that does not fit in the 48 ms
  // it has left: it is told so then, not at its deadline.
  shield.limit().record(milliseconds(200), false);
  f.clock.advance(milliseconds(2));
  holder->succeeded(std::move(h.permit));
  EXPECT_TRUE(first->woken());
  EXPECT_TRUE(last->woken());
  Shield::Admission a = first->admit(f.clock.now());
  ASSERT_EQ(a.kind, Shield::Admission::Kind::kAttempt) << "the first in line keeps its turn";
  Shield::Admission b = last->admit(f.clock.now());
  ASSERT_EQ(b.kind, Shield::Admission::Kind::kStop);
  EXPECT_EQ(b.status.stop_reason(), StopReason::kAtCapacity);
  EXPECT_GT(b.status.retry_after(), Duration::zero());
  EXPECT_LT(f.clock.now(), deadline);
  EXPECT_EQ(shield.waiting(), 0);
  first->succeeded(std::move(a.permit));
  EXPECT_EQ(shield.limit().in_flight(), 0);
}

TEST(ShieldLine, QueueWaitCapsTheTargetAndTheInterval) {
  ManualClock clock;
  Shield::Options o = quiet_options();
  o.queue_wait = milliseconds(20);
  Shield shield("main", o, clock);
  EXPECT_EQ(shield.queue_target(), milliseconds(5));
  EXPECT_EQ(shield.queue_interval(), milliseconds(20));
  // A database that normally answers in 100 ms: 300 ms and 1 s, both capped.
  shield.limit().record(milliseconds(100), false);
  EXPECT_EQ(shield.queue_target(), milliseconds(20));
  EXPECT_EQ(shield.queue_interval(), milliseconds(20));
  Shield::Options none = quiet_options();
  none.queue_wait = Duration::zero();
  Shield never("main", none, clock);
  EXPECT_EQ(never.queue_target(), Duration::zero());
}

}  // namespace
}  // namespace holdfast
