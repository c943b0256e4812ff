#include "holdfast/core/window.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/retry.hpp"

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
  RetryPolicy session = RetryPolicy::session_reads();
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

TEST(RetryWindow, ACapEndsTheWindowEarlierOpenOrNot) {
  ManualClock clock;
  RetryWindow window(seconds(6), clock);
  window.cap(clock.now() + seconds(2));
  EXPECT_FALSE(window.is_open());
  EXPECT_EQ(window.remaining(), seconds(2)) << "before it opens, no further than the cap";
  EXPECT_EQ(window.deadline(), clock.now() + seconds(2));
  window.cap(clock.now() + seconds(5));  // a later cap changes nothing: the earliest wins
  EXPECT_EQ(window.cap(), clock.now() + seconds(2));
  clock.advance(seconds(1));
  window.open(clock.now());
  EXPECT_EQ(window.deadline(), clock.now() + seconds(1)) << "open, it still ends at the cap";
  EXPECT_EQ(window.remaining(), seconds(1));
  clock.advance(seconds(2));
  EXPECT_TRUE(window.spent(clock.now()));

  RetryWindow wide(seconds(6), clock);
  wide.cap(clock.now() + seconds(60));  // a cap past the window's own end changes nothing
  wide.open(clock.now());
  EXPECT_EQ(wide.deadline(), clock.now() + seconds(6));
}

TEST(RequestContext, ADeadlineThatCameWithTheRequestStopsItsRetriesThere) {
  ManualClock clock;
  const TimePoint arrived = clock.now();
  RequestContext request(seconds(6), clock, arrived);
  request.cap_deadline(arrived + seconds(2));  // the proxy in front gives up after 2 s
  RequestScope scope(request);
  RetryPolicy p;
  p.clock(clock).seed(3).max_attempts(100);
  const Status s = retry(p, Operation::read(), [] { return busy(); });
  EXPECT_EQ(s.stop_reason(), StopReason::kWindowSpent);
  EXPECT_LE(clock.now() - arrived, seconds(2)) << "no retry outlives the sender's deadline";
  EXPECT_GE(clock.now() - arrived, seconds(1)) << "the time up to it was used";
}

TEST(RequestContext, ADeadlineAlreadyPastLeavesNoRetry) {
  ManualClock clock;
  RequestContext request(seconds(6), clock);
  request.cap_deadline(clock.now() - seconds(1));
  RequestScope scope(request);
  RetryPolicy p;
  p.clock(clock).seed(3);
  int calls = 0;
  const Status s = retry(p, Operation::read(), [&] {
    ++calls;
    return busy();
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stop_reason(), StopReason::kWindowSpent);
}

TEST(RequestContext, ACopyOnAnotherThreadIsTheSameRequest) {
  ManualClock clock;
  RequestContext request(seconds(6), clock);
  RetryPolicy p;
  p.clock(clock).seed(4).max_attempts(100);
  {
    RequestScope here(request);
    ASSERT_NE(RequestScope::current_context(), nullptr);
    EXPECT_EQ(&RequestScope::current_window()->clock(), &clock);
    (void)retry(p, Operation::read(), [] { return busy(); });  // spends the whole window
  }
  EXPECT_EQ(RequestScope::current_context(), nullptr);
  int calls = 0;
  std::thread worker([&, copy = request] {
    RequestScope there(copy);
    EXPECT_EQ(RequestScope::current_window(), &request.window());
    {
      RequestScope nested;  // a plain scope inside keeps the request's context
      ASSERT_NE(RequestScope::current_context(), nullptr);
      EXPECT_EQ(&RequestScope::current_context()->window(), &request.window());
    }
    (void)retry(p, Operation::read(), [&] {
      ++calls;
      return busy();
    });
  });
  worker.join();
  EXPECT_EQ(calls, 1) << "the copy drew from the same spent window";
}

TEST(RequestContext, ItsCopiesShareOnePositionThatFollowsTheTimelineRule) {
  RequestContext request;
  const RequestContext copy = request;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.position(), WritePosition{});
  request.raise_position(200, 1);
  copy.raise_position(100, 1);  // never lowered
  EXPECT_EQ(request.position(), (WritePosition{200, 1, false}));
  copy.raise_position(50, 2);  // a newer timeline replaces the older one's position
  EXPECT_EQ(request.position(), (WritePosition{50, 2, false}));
  request.raise_position(900, 1);  // an older timeline's is ignored
  EXPECT_EQ(copy.position(), (WritePosition{50, 2, false}));
  copy.position_unknown();
  EXPECT_TRUE(request.position().primary_only);
  request.set_position({});
  EXPECT_EQ(copy.position(), WritePosition{});
}

TEST(RequestContext, ThreadsRaisingThePositionAtOnceLoseNoRaise) {
  RequestContext request;
  constexpr int kEach = 20000;
  std::thread a([copy = request] {
    for (int i = 1; i <= kEach; ++i)
      copy.raise_position(static_cast<std::uint64_t>(2 * i), 7);
  });
  std::thread b([copy = request] {
    for (int i = 1; i <= kEach; ++i) {
      copy.raise_position(static_cast<std::uint64_t>(2 * i + 1), 7);
      const WritePosition seen = copy.position();
      ASSERT_EQ(seen.timeline, 7u) << "a reader never sees half a change";
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(request.position(), (WritePosition{2 * kEach + 1, 7, false}));
}

}  // namespace
}  // namespace holdfast
