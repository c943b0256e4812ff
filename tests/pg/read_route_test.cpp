// The routing both PostgreSQL drivers take for a read (holdfast/detail/read_route.hpp, ADR
// 0057): whether a standby may answer it, the order and limits of a pass over the standbys,
// the hold of a standby found behind, and when the standbys that were behind are asked again. No
// server, no clock: the times are given.
#include "holdfast/detail/read_route.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "holdfast/core/fault.hpp"

namespace holdfast::pg::detail {
namespace {

using std::chrono::milliseconds;

const TimePoint t0 = TimePoint{} + std::chrono::hours(1);

// The standbys a pass gives while none answers, asked at `t0` plus `step` each.
std::vector<std::size_t> given(StandbyPass& pass, milliseconds step = milliseconds(0)) {
  std::vector<std::size_t> out;
  TimePoint now = t0;
  while (std::optional<std::size_t> i = pass.next(now)) {
    out.push_back(*i);
    pass.asked(now);
    pass.unanswered(*i, false);
    now += step;
  }
  return out;
}

TEST(ReadRoute, AStandbyMayAnswerUnlessThePrimaryMustOrThePositionPredatesAPromotion) {
  EXPECT_TRUE(standby_may_answer(false, 0, 0));
  EXPECT_TRUE(standby_may_answer(false, 0, 3));  // the position's timeline is not known
  EXPECT_TRUE(standby_may_answer(false, 3, 3));
  EXPECT_TRUE(standby_may_answer(false, 4, 3));  // newer than any the primary showed yet
  EXPECT_FALSE(standby_may_answer(false, 2, 3));
  EXPECT_FALSE(standby_may_answer(true, 0, 0));  // a write's position is not known
}

TEST(ReadRoute, APassAsksEachStandbyOnceInTurnFromItsFirst) {
  StandbyPass pass(3, 4, kStandbyWait);  // 4 % 3: from standby 1
  EXPECT_EQ(given(pass), (std::vector<std::size_t>{1, 2, 0}));
  StandbyPass none(0, 7, kStandbyWait);
  EXPECT_EQ(none.next(t0), std::nullopt);
}

TEST(ReadRoute, ANextStandbyIsAskedOnlyWhileTheWaitSinceTheFirstHasNotPassed) {
  // Each one takes 200 ms: the third would start 400 ms after the first, within 500 ms; a
  // fourth at 600 ms is not asked.
  StandbyPass pass(5, 0, milliseconds(500));
  EXPECT_EQ(given(pass, milliseconds(200)), (std::vector<std::size_t>{0, 1, 2}));
  // Standbys not asked (the driver's own rules skipped them) take none of the wait.
  StandbyPass skipping(3, 0, milliseconds(500));
  EXPECT_EQ(skipping.next(t0), 0u);
  EXPECT_EQ(skipping.next(t0 + milliseconds(900)), 1u);
  skipping.asked(t0 + milliseconds(900));
  skipping.unanswered(1, false);
  EXPECT_EQ(skipping.next(t0 + milliseconds(1300)), 2u);
}

TEST(ReadRoute, NoStandbyIsAskedAtOrAfterTheRequestsDeadline) {
  StandbyPass pass(2, 0, kStandbyWait, t0 + milliseconds(10));
  EXPECT_EQ(pass.next(t0), 0u);
  pass.asked(t0);
  pass.unanswered(0, false);
  EXPECT_EQ(pass.next(t0 + milliseconds(10)), std::nullopt);
}

TEST(ReadRoute, ThePassAgainAsksOnlyTheStandbysThatWereBehind) {
  StandbyPass first(4, 0, kStandbyWait);
  TimePoint now = t0;
  while (std::optional<std::size_t> i = first.next(now)) {
    first.asked(now);
    first.unanswered(*i, /*behind=*/*i == 1 || *i == 3);
  }
  EXPECT_EQ(first.behind(), 0b1010u);
  StandbyPass again(4, 0, kStandbyWait, TimePoint::max(), first.behind());
  EXPECT_EQ(given(again), (std::vector<std::size_t>{1, 3}));
}

TEST(ReadRoute, AStandbyFoundBehindIsHeldOffLongerWhileItsReplayStaysWhereItWas) {
  CatchUp standby;
  EXPECT_FALSE(standby.skip(100, t0));  // never found behind
  standby.behind(40, t0);
  EXPECT_TRUE(standby.skip(100, t0 + milliseconds(49)));
  EXPECT_FALSE(standby.skip(100, t0 + milliseconds(50)));
  EXPECT_FALSE(standby.skip(40, t0 + milliseconds(10)));  // it has replayed what this read needs
  EXPECT_FALSE(standby.skip(0, t0 + milliseconds(10)));   // a read that needs nothing
  // Still at 40: 100 ms, 200 ms, ... up to 1 s.
  TimePoint at = t0 + milliseconds(50);
  milliseconds hold(100);
  for (int i = 0; i < 6; ++i) {
    standby.behind(40, at);
    EXPECT_TRUE(standby.skip(100, at + hold - milliseconds(1))) << i;
    EXPECT_FALSE(standby.skip(100, at + hold)) << i;
    at += hold;
    hold = std::min(2 * hold, milliseconds(1000));
  }
  // Moved on (to 60): the first hold again; seen past 100 by another read: asked at once.
  standby.behind(60, at);
  EXPECT_FALSE(standby.skip(100, at + milliseconds(50)));
  standby.saw(100);
  EXPECT_FALSE(standby.skip(100, at));
  EXPECT_TRUE(standby.reached(100));
  EXPECT_FALSE(standby.reached(101));
}

TEST(ReadRoute, TheStandbysAreAskedAgainOnlyAfterThePrimaryCouldNotAnswer) {
  const Status down(Code::kUnavailable, "primary down",
                    Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true});
  const Status wrong(Code::kInvalidArgument, "syntax error");
  EXPECT_TRUE(standbys_again_after(down, 0b1));
  EXPECT_FALSE(standbys_again_after(down, 0));     // none was only behind
  EXPECT_FALSE(standbys_again_after(wrong, 0b1));  // the statement's own error
  EXPECT_FALSE(standbys_again_after(Status(), 0b1));
}

}  // namespace
}  // namespace holdfast::pg::detail
