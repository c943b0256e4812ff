// The Shield's classes (ADR 0035): under a full limit the higher class gets the next place,
// the lowest is shed first, and no class starves while places change hands. Virtual time;
// no test here lets the clock move.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "quiet_options.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Kind = Shield::Admission::Kind;

using holdfast::test_support::quiet_options;

static_assert(Operation::read("x").priority == Priority::kNormal, "normal unless marked");
static_assert(Operation::write("pay").critical().priority == Priority::kCritical);
static_assert(Operation::write("log").background().label == "log");
static_assert(sizeof(Operation) == 3 * sizeof(void*), "an Operation stays three words");

// A Shield with a limit of four, all four places taken, and a database that answers in
// 10 ms: the line's target is 30 ms and its interval 100 ms; a newcomer with n waiters ahead
// expects (n + 1) x 2.5 ms, and queues when three times that fits what its class is allowed.
struct FullLimit {
  ManualClock clock;
  std::optional<Shield> shield;
  std::vector<std::unique_ptr<RetryWindow>> windows;
  std::vector<std::unique_ptr<Shield::Call>> calls;
  // The calls holding a place, oldest first, with their admissions.
  std::deque<std::pair<Shield::Call*, Shield::Admission>> running;

  explicit FullLimit(Shield::Options o = quiet_options()) {
    o.limit.min = o.limit.initial = o.limit.max = 4;
    shield.emplace("main", o, clock);
    shield->limit().record(milliseconds(10), false);
    // A caller queued once: from then on the limit counts places (it is tight).
    shield->limit().queued(1);
    shield->limit().queued(-1);
    for (int i = 0; i < 4; ++i) {
      Shield::Call* c = call(Priority::kNormal);
      Shield::Admission a = c->admit(clock.now());
      EXPECT_EQ(a.kind, Kind::kAttempt);
      running.emplace_back(c, std::move(a));
    }
  }
  Shield::Call* call(Priority p, Operation op = Operation::read("page")) {
    windows.push_back(std::make_unique<RetryWindow>(seconds(6), clock));
    calls.push_back(std::make_unique<Shield::Call>(*shield, shield->reads(), op.with_priority(p),
                                                   windows.back().get(), Random(calls.size() + 1)));
    return calls.back().get();
  }
  // A newcomer of class `p`: what admit() answers it.
  Kind arrive(Priority p, Shield::Call** out = nullptr) {
    Shield::Call* c = call(p);
    if (out != nullptr) *out = c;
    Shield::Admission a = c->admit(clock.now());
    const Kind k = a.kind;
    if (k == Kind::kAttempt) running.emplace_back(c, std::move(a));
    return k;
  }
  // The oldest running call succeeds: its place goes to whoever the Shield hands it.
  void finish_one() {
    auto [c, a] = std::move(running.front());
    running.pop_front();
    c->succeeded(std::move(a.permit));
  }
  // `c` was woken with a place: it takes it.
  void take(Shield::Call* c) {
    ASSERT_TRUE(c->woken());
    Shield::Admission a = c->admit(clock.now());
    ASSERT_EQ(a.kind, Kind::kAttempt);
    running.emplace_back(c, std::move(a));
  }
};

TEST(ShieldPriority, UnderAFullLimitTheNextPlaceGoesToCriticalThenNormalThenBackground) {
  FullLimit f;
  // They come lowest class first.
  Shield::Call* background = nullptr;
  Shield::Call* normal = nullptr;
  Shield::Call* critical = nullptr;
  ASSERT_EQ(f.arrive(Priority::kBackground, &background), Kind::kWait);
  ASSERT_EQ(f.arrive(Priority::kNormal, &normal), Kind::kWait);
  ASSERT_EQ(f.arrive(Priority::kCritical, &critical), Kind::kWait);
  EXPECT_EQ(f.shield->waiting(Priority::kCritical), 1);
  EXPECT_EQ(f.shield->waiting(Priority::kNormal), 1);
  EXPECT_EQ(f.shield->waiting(Priority::kBackground), 1);

  f.finish_one();
  EXPECT_TRUE(critical->woken()) << "the first place freed goes to the critical waiter";
  EXPECT_FALSE(normal->woken());
  EXPECT_FALSE(background->woken());
  f.take(critical);

  f.finish_one();
  EXPECT_TRUE(normal->woken()) << "then to the normal one";
  EXPECT_FALSE(background->woken());
  f.take(normal);

  f.finish_one();
  f.take(background);  // and then to the background one
  EXPECT_EQ(f.shield->waiting(), 0);
  EXPECT_EQ(f.shield->metrics().snapshot().at_capacity, 0u) << "nobody was shed";
}

TEST(ShieldPriority, WithinAClassTheFirstToComeIsTheFirstServed) {
  FullLimit f;
  Shield::Call* first = nullptr;
  Shield::Call* second = nullptr;
  ASSERT_EQ(f.arrive(Priority::kCritical, &first), Kind::kWait);
  ASSERT_EQ(f.arrive(Priority::kCritical, &second), Kind::kWait);
  f.finish_one();
  EXPECT_TRUE(first->woken());
  EXPECT_FALSE(second->woken());
  f.take(first);
  f.finish_one();
  f.take(second);
}

TEST(ShieldPriority, WhenHigherClassesCrowdInTheBackgroundWaiterIsToldFirst) {
  FullLimit f;
  Shield::Call* background = nullptr;
  Shield::Call* normal = nullptr;
  ASSERT_EQ(f.arrive(Priority::kBackground, &background), Kind::kWait);
  ASSERT_EQ(f.arrive(Priority::kNormal, &normal), Kind::kWait);
  // Three critical requests come in ahead of both. With three ahead of it, the background
  // waiter expects 10 ms: three times that still fits the 30 ms it was given. With four, it
  // expects 12.5 ms, and 37.5 ms does not: it is told now. The normal one, with three
  // ahead, still fits in its 100 ms.
  ASSERT_EQ(f.arrive(Priority::kCritical), Kind::kWait);
  ASSERT_EQ(f.arrive(Priority::kCritical), Kind::kWait);
  EXPECT_FALSE(background->woken()) << "three ahead of it still fit";
  ASSERT_EQ(f.arrive(Priority::kCritical), Kind::kWait);
  EXPECT_TRUE(background->woken());
  EXPECT_FALSE(normal->woken());
  Shield::Admission a = background->admit(f.clock.now());
  ASSERT_EQ(a.kind, Kind::kStop);
  EXPECT_EQ(a.status.stop_reason(), StopReason::kAtCapacity);
  EXPECT_GT(a.status.retry_after(), Duration::zero());
  EXPECT_EQ(f.shield->waiting(Priority::kNormal), 1);
  EXPECT_EQ(f.shield->waiting(Priority::kCritical), 3);
}

TEST(ShieldPriority, AStandingLineShedsBackgroundAtOnceAndStillQueuesCritical) {
  FullLimit f;
  // Normal requests queue while three times their expected wait fits in the 100 ms interval
  // (13 of them); the 14th would not: the line stands.
  for (int i = 0; i < 13; ++i)
    ASSERT_EQ(f.arrive(Priority::kNormal), Kind::kWait) << i;
  ASSERT_FALSE(f.shield->queue_standing());
  ASSERT_EQ(f.arrive(Priority::kNormal), Kind::kStop);
  ASSERT_TRUE(f.shield->queue_standing());

  EXPECT_EQ(f.arrive(Priority::kBackground), Kind::kStop) << "background: shed while it stands";
  EXPECT_EQ(f.arrive(Priority::kNormal), Kind::kStop) << "13 ahead: past the 30 ms target";
  EXPECT_EQ(f.arrive(Priority::kCritical), Kind::kWait) << "nobody of its class ahead";
  EXPECT_GT(f.shield->waiting(Priority::kCritical), 0);
  const Metrics::Snapshot m = f.shield->metrics().snapshot();
  EXPECT_EQ(m.at_capacity_by_class[static_cast<std::size_t>(Priority::kCritical)], 0u);
  EXPECT_EQ(m.at_capacity_by_class[static_cast<std::size_t>(Priority::kNormal)], 2u);
  EXPECT_EQ(m.at_capacity_by_class[static_cast<std::size_t>(Priority::kBackground)], 1u);
  EXPECT_NE(f.shield->metrics_text().find(
                "holdfast_at_capacity_by_class_total{db=\"main\",class=\"background\"} 1"),
            std::string::npos);
}

TEST(ShieldPriority, BackgroundStillGetsAPlaceWhileHigherClassesKeepTheLineFull) {
  FullLimit f;
  Shield::Call* background = nullptr;
  ASSERT_EQ(f.arrive(Priority::kBackground, &background), Kind::kWait);
  Shield::Call* normal = nullptr;
  ASSERT_EQ(f.arrive(Priority::kNormal, &normal), Kind::kWait);
  // A normal request always waits when a place frees: it gets seven places in a row...
  for (int i = 0; i < 7; ++i) {
    f.finish_one();
    ASSERT_TRUE(normal->woken()) << i;
    ASSERT_FALSE(background->woken()) << i;
    f.take(normal);
    ASSERT_EQ(f.arrive(Priority::kNormal, &normal), Kind::kWait) << i;
  }
  // ... and the eighth goes to the background waiter passed over seven times.
  f.finish_one();
  EXPECT_TRUE(background->woken());
  EXPECT_FALSE(normal->woken());
  f.take(background);
  // Then the normal one is first again.
  f.finish_one();
  f.take(normal);
}

TEST(ShieldPriority, BackgroundGoesAtOnceWhenTheLimitHasRoomEvenWhileTheLineStands) {
  FullLimit f;
  for (int i = 0; i < 13; ++i)
    ASSERT_EQ(f.arrive(Priority::kNormal), Kind::kWait) << i;
  ASSERT_EQ(f.arrive(Priority::kNormal), Kind::kStop);
  ASSERT_TRUE(f.shield->queue_standing());
  ASSERT_EQ(f.arrive(Priority::kBackground), Kind::kStop);
  // The line drains: every running call finishes, each freed place goes to the next waiter,
  // until nobody waits and a place stays free.
  while (f.shield->waiting() > 0) {
    f.finish_one();
    for (auto& c : f.calls) {
      if (c->woken() && c->attempts() == 0 &&
          std::none_of(f.running.begin(), f.running.end(),
                       [&](const auto& r) { return r.first == c.get(); })) {
        f.take(c.get());
      }
    }
  }
  f.finish_one();
  f.finish_one();  // two of four places taken: spare room, where a retry would start too
  ASSERT_TRUE(f.shield->queue_standing()) << "no time passed: the line still stands";
  EXPECT_EQ(f.arrive(Priority::kBackground), Kind::kAttempt) << "there is room: it goes";
}

TEST(ShieldPriority, BackgroundStartsAtOnceOnlyInSpareRoomAndWaitsForAPlaceGivenBack) {
  FullLimit f;
  f.finish_one();  // three of four places taken
  EXPECT_EQ(f.shield->limit().in_flight(), 3);
  // A retry would not start with three of four places taken (retry_share 0.9): neither
  // does background work. It waits for a place given back.
  Shield::Call* background = nullptr;
  ASSERT_EQ(f.arrive(Priority::kBackground, &background), Kind::kWait);
  EXPECT_FALSE(background->woken());
  // A page takes the fourth place at once...
  Shield::Call* page = nullptr;
  ASSERT_EQ(f.arrive(Priority::kNormal, &page), Kind::kWait) << "nobody overtakes the line";
  EXPECT_TRUE(page->woken()) << "the room went to the page";
  f.take(page);
  EXPECT_FALSE(background->woken());
  // ... and the next place given back goes to the background work.
  f.finish_one();
  f.take(background);
}

TEST(ShieldPriority, APolicyCanSetTheClassOfAnOperationByItsLabel) {
  Shield::Options o = quiet_options();
  o.priorities["logs.insert"] = Priority::kBackground;
  o.priorities["payments.create"] = Priority::kCritical;
  ManualClock clock;
  Shield shield("main", o, clock);
  EXPECT_EQ(shield.priority_of(Operation::write("logs.insert")), Priority::kBackground);
  EXPECT_EQ(shield.priority_of(Operation::write("payments.create")), Priority::kCritical);
  EXPECT_EQ(shield.priority_of(Operation::write("payments.create").background()),
            Priority::kCritical)
      << "the policy wins over the code";
  EXPECT_EQ(shield.priority_of(Operation::read("schedule").critical()), Priority::kCritical);
  EXPECT_EQ(shield.priority_of(Operation::read("schedule")), Priority::kNormal);
}

TEST(ShieldPriority, ThePolicysClassDecidesWhereTheCallWaits) {
  Shield::Options o = quiet_options();
  o.priorities["logs.insert"] = Priority::kBackground;
  FullLimit f(o);
  Shield::Call* log = f.call(Priority::kNormal, Operation::write("logs.insert"));
  ASSERT_EQ(log->admit(f.clock.now()).kind, Kind::kWait);
  EXPECT_EQ(f.shield->waiting(Priority::kBackground), 1);
  EXPECT_EQ(f.shield->waiting(Priority::kNormal), 0);
  Shield::Call* page = nullptr;
  ASSERT_EQ(f.arrive(Priority::kNormal, &page), Kind::kWait);
  f.finish_one();
  EXPECT_TRUE(page->woken()) << "the page came later but is of a higher class";
  EXPECT_FALSE(log->woken());
  f.take(page);
  f.finish_one();
  f.take(log);
}

TEST(ShieldPriority, ToStringAndParseRoundTrip) {
  for (Priority p : {Priority::kCritical, Priority::kNormal, Priority::kBackground}) {
    Priority back = Priority::kNormal;
    ASSERT_TRUE(parse_priority(to_string(p), back)) << to_string(p);
    EXPECT_EQ(back, p);
  }
  Priority untouched = Priority::kCritical;
  EXPECT_FALSE(parse_priority("urgent", untouched));
  EXPECT_EQ(untouched, Priority::kCritical);
}

}  // namespace
}  // namespace holdfast
