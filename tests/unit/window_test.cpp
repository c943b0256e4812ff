#include "holdfast/window.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "holdfast/classify.hpp"
#include "holdfast/retry.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Status busy() {
  return sqlite_status(5, "database is locked");
}

// The origin's /dashboard/schedule render: two query groups and a session read, with the
// database refusing every query.
Duration render_schedule_page(ManualClock& clock, bool one_scope) {
  RetryPolicy reads;
  reads.clock(clock).seed(7);
  RetryPolicy session = RetryPolicy::origin_session();
  session.clock(clock).seed(8);
  const auto always_busy = [] { return busy(); };

  const TimePoint start = clock.now();
  std::optional<RequestScope> scope;
  if (one_scope) scope.emplace(seconds(6), clock);
  (void)retry(session, Operation::read("session"), always_busy);
  (void)retry(reads, Operation::read("schedule.games"), always_busy);
  (void)retry(reads, Operation::read("schedule.courts"), always_busy);
  return clock.now() - start;
}

TEST(RequestScope, APageRenderInsideOneScopeWaitsAtMostTheWindow) {
  ManualClock clock;
  const Duration waited = render_schedule_page(clock, /*one_scope=*/true);
  EXPECT_LE(waited, seconds(6));
  EXPECT_GE(waited, seconds(5));  // it did use the window
}

TEST(RequestScope, TheSameRenderWithAWindowPerCallWaitsAboutSixteenSeconds) {
  ManualClock clock;
  const Duration waited = render_schedule_page(clock, /*one_scope=*/false);
  EXPECT_GE(waited, seconds(14));
  EXPECT_LE(waited, seconds(18));
}

TEST(RetryWindow, OpensAtTheFirstTransientFaultNotBefore) {
  ManualClock clock;
  RequestScope scope(seconds(6), clock);
  RetryPolicy p;
  p.clock(clock).seed(1);
  EXPECT_FALSE(scope.window().is_open());
  EXPECT_EQ(scope.window().remaining(), seconds(6));
  clock.advance(seconds(30));  // slow successful work does not spend the window
  (void)retry(p, Operation::read(), [] { return Status(); });
  (void)retry(p, Operation::read(), [] { return sqlite_status(19, "constraint"); });
  EXPECT_FALSE(scope.window().is_open());

  int calls = 0;
  const TimePoint opened = clock.now();
  (void)retry(p, Operation::read(), [&] { return ++calls < 2 ? busy() : Status(); });
  EXPECT_TRUE(scope.window().is_open());
  EXPECT_EQ(scope.window().deadline(), opened + seconds(6));
}

TEST(RequestScope, AScopeForARequestThatArrivedEarlierCountsTheTimeItQueued) {
  ManualClock clock;
  const TimePoint arrived = clock.now();
  clock.advance(seconds(4));  // queued behind other requests
  RequestScope scope(seconds(6), clock, arrived);
  EXPECT_TRUE(scope.window().is_open());
  EXPECT_EQ(scope.window().deadline(), arrived + seconds(6));
  EXPECT_EQ(scope.window().remaining(clock.now()), seconds(2));
  {
    // An inner scope joins the outer window, whatever it says of its own arrival.
    RequestScope inner(seconds(6), clock, clock.now());
    EXPECT_EQ(&inner.window(), &scope.window());
  }
}

TEST(RetryWindow, AWaitOpensTheWindowAndIsBoundedByWhatItHasLeft) {
  ManualClock clock;
  RequestScope request(seconds(6), clock);
  EXPECT_EQ(RequestScope::begin_wait(clock.now(), seconds(5)), seconds(5));
  EXPECT_TRUE(request.window().is_open()) << "the first wait opens the window";
  clock.advance(seconds(4));
  EXPECT_EQ(RequestScope::begin_wait(clock.now(), seconds(5)), seconds(2))
      << "a later wait gets only what the window has left";
  clock.advance(seconds(3));
  EXPECT_EQ(RequestScope::begin_wait(clock.now(), seconds(5)), Duration::zero());
}

TEST(RetryWindow, OutsideAnyScopeAWaitKeepsItsOwnBound) {
  ManualClock clock;
  EXPECT_EQ(RequestScope::begin_wait(clock.now(), seconds(5)), seconds(5));
}

TEST(RequestScope, NestedScopesShareTheOuterWindowAndNeverResetIt) {
  ManualClock clock;
  RequestScope outer(seconds(6), clock);
  outer.window().open(clock.now());
  clock.advance(seconds(4));
  {
    RequestScope inner(seconds(60), clock);
    EXPECT_EQ(&inner.window(), &outer.window());
    EXPECT_EQ(RequestScope::current(), &inner);
    EXPECT_EQ(inner.window().remaining(), seconds(2));
  }
  EXPECT_EQ(RequestScope::current(), &outer);
}

TEST(RequestScope, OutsideAnyScopeEachOperationGetsItsOwnWindow) {
  EXPECT_EQ(RequestScope::current(), nullptr);
  EXPECT_EQ(RequestScope::current_window(), nullptr);
  ManualClock clock;
  RetryPolicy p;
  p.clock(clock).seed(3);
  const TimePoint start = clock.now();
  (void)retry(p, Operation::read(), [] { return busy(); });
  const Duration first = clock.now() - start;
  (void)retry(p, Operation::read(), [] { return busy(); });
  const Duration both = clock.now() - start;
  EXPECT_GT(first, seconds(2));
  EXPECT_GT(both - first, seconds(2));  // the second call was not starved by the first
}

TEST(RequestScope, TheWindowCanBeHandedToAnotherThread) {
  ManualClock clock;
  RequestScope scope(seconds(6), clock);
  RetryPolicy p;
  p.clock(clock).seed(4).max_attempts(100);
  (void)retry(p, Operation::read(), [] { return busy(); });  // spends the whole window
  EXPECT_LE(scope.window().remaining(), p.last_attempt_time());

  int calls = 0;
  std::thread worker([&] {
    EXPECT_EQ(RequestScope::current(), nullptr);  // thread-local: not inherited implicitly
    RequestScope adopted(scope.window());
    (void)retry(p, Operation::read(), [&] {
      ++calls;
      return busy();
    });
  });
  worker.join();
  EXPECT_EQ(calls, 1);  // the shared window had nothing left to retry with
}

}  // namespace
}  // namespace holdfast
