#include "holdfast/core/liveness.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/shield.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Check = Liveness::CheckResult;

Liveness::Options manual() {
  Liveness::Options o;
  o.background = false;
  return o;
}

// A server to check: answers or stays silent as the test says, and counts the checks.
struct Server {
  Check answer = Check::kAnswered;
  int checks = 0;
  std::vector<bool> changes;  // what on_change was told, in order

  Liveness::CheckFn check() {
    return [this](TimePoint) { return ++checks, answer; };
  }
  Liveness::ChangeFn on_change() {
    return [this](bool silent) { changes.push_back(silent); };
  }
};

// Work waits on a server that the check finds silent: suspected after 500 ms, then checked.
void find_silent(Liveness& live, ManualClock& clock) {
  live.waiting(clock.now());
  clock.advance(milliseconds(500));
  ASSERT_TRUE(live.tick(clock.now()));
}

// A Shield on a ManualClock, and a watch of a server that answers no check.
class SilentServer : public ::testing::Test {
 protected:
  // Makes the watch and lets it find the server silent.
  Liveness& watch() {
    server.answer = Check::kSilent;
    live = std::make_unique<Liveness>(shield, server.check(), server.on_change(), manual());
    find_silent(*live, clock);
    return *live;
  }
  ManualClock clock;
  Shield shield{"db", clock};
  Server server;
  std::unique_ptr<Liveness> live;
};

TEST(Liveness, RejectsAMissingCheckAndOptionsOutOfRange) {
  ManualClock clock;
  Shield shield("db", clock);
  EXPECT_THROW(Liveness(shield, Liveness::CheckFn{}, {}, manual()), std::invalid_argument);
  Liveness::Options o = manual();
  o.suspect_after = Duration::zero();
  EXPECT_THROW(Liveness(
                   shield, [](TimePoint) { return Check::kAnswered; }, {}, o),
               std::invalid_argument);
  o = manual();
  o.suspect_max = milliseconds(100);  // below suspect_after
  EXPECT_THROW(Liveness(
                   shield, [](TimePoint) { return Check::kAnswered; }, {}, o),
               std::invalid_argument);
}

TEST(Liveness, NothingWaitingIsNeverSuspect) {
  ManualClock clock;
  Shield shield("db", clock);
  Server server;
  Liveness live(shield, server.check(), server.on_change(), manual());
  clock.advance(seconds(30));
  EXPECT_EQ(live.quiet_for(clock.now()), Duration::zero());
  EXPECT_FALSE(live.tick(clock.now()));
  EXPECT_EQ(server.checks, 0);
}

TEST(Liveness, AServerThatKeepsAnsweringSomethingIsNotChecked) {
  // A long lock: one exchange waits for seconds, but the others' answers keep coming.
  ManualClock clock;
  Shield shield("db", clock);
  Server server;
  Liveness live(shield, server.check(), server.on_change(), manual());
  live.waiting(clock.now());  // the one stuck behind the lock
  for (int i = 0; i < 100; ++i) {
    clock.advance(milliseconds(100));
    live.waiting(clock.now());
    live.answered(clock.now());
    live.done();
    EXPECT_FALSE(live.tick(clock.now()));
  }
  EXPECT_EQ(server.checks, 0);
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
}

TEST(Liveness, WorkWaitingOnAQuietServerThatAnswersTheCheckIsSlowNotSilent) {
  ManualClock clock;
  Shield shield("db", clock);
  Server server;
  Liveness live(shield, server.check(), server.on_change(), manual());
  live.waiting(clock.now());
  clock.advance(milliseconds(499));
  EXPECT_FALSE(live.tick(clock.now()));
  clock.advance(milliseconds(1));
  EXPECT_TRUE(live.tick(clock.now()));  // suspect: checked
  EXPECT_EQ(server.checks, 1);
  EXPECT_FALSE(live.silent());
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_TRUE(server.changes.empty());
  // Still waiting, still quiet: the next check needs twice the quiet time, then four times,
  // up to suspect_max (2 s): a slow server pays one check per doubling.
  clock.advance(milliseconds(999));
  EXPECT_FALSE(live.tick(clock.now()));
  clock.advance(milliseconds(1));
  EXPECT_TRUE(live.tick(clock.now()));
  clock.advance(milliseconds(1999));
  EXPECT_FALSE(live.tick(clock.now()));
  clock.advance(milliseconds(1));
  EXPECT_TRUE(live.tick(clock.now()));
  clock.advance(seconds(2));
  EXPECT_TRUE(live.tick(clock.now()));
  EXPECT_EQ(server.checks, 4);
  // An ordinary answer resets it.
  live.answered(clock.now());
  clock.advance(milliseconds(500));
  EXPECT_TRUE(live.tick(clock.now()));
  EXPECT_EQ(server.checks, 5);
}

TEST(Liveness, ACheckWithNoAnswerTripsTheBreakerAndTellsTheDriver) {
  ManualClock clock;
  Shield shield("db", clock);
  std::vector<BreakerTransition> transitions;
  shield.breaker().add_listener([&](const BreakerTransition& t) { transitions.push_back(t); });
  Server server;
  server.answer = Check::kSilent;
  Liveness live(shield, server.check(), server.on_change(), manual());
  live.waiting(clock.now());
  clock.advance(milliseconds(500));
  EXPECT_TRUE(live.tick(clock.now()));
  EXPECT_TRUE(live.silent());
  EXPECT_EQ(live.silences(), 1u);
  EXPECT_EQ(shield.metrics().snapshot().silences, 1u);
  ASSERT_EQ(transitions.size(), 1u);
  EXPECT_EQ(transitions[0].to, BreakerState::kOpen);
  EXPECT_EQ(transitions[0].reason, TransitionReason::kSilence);
  EXPECT_EQ(server.changes, std::vector<bool>{true});
}

TEST_F(SilentServer, RequestsAfterTheSilenceAreAnsweredAtOnceWithRetryAfter) {
  watch();
  RequestScope scope(seconds(6), clock);
  const TimePoint start = clock.now();
  int attempts = 0;
  const Status s = shield.run(Operation::read("page"), [&] { return ++attempts, Status(); });
  EXPECT_EQ(attempts, 0);
  EXPECT_EQ(s.stop_reason(), StopReason::kBreakerOpen);
  EXPECT_GT(s.retry_after(), Duration::zero());
  EXPECT_EQ(clock.now(), start);  // no wait at all
}

TEST_F(SilentServer, ASilenceAfterLockContentionStillAnswersAtOnce) {
  // The breaker opened on lock contention (requests would wait for its probe); then the
  // server went silent: waiting for a probe no longer pays.
  for (int i = 0; i < 5; ++i) {
    RequestScope scope(milliseconds(1), clock);
    (void)shield.run(Operation::write("w"), [] { return sqlite_status(5, "database is locked"); });
  }
  ASSERT_EQ(shield.breaker().state(), BreakerState::kOpen);
  watch();
  RequestScope scope(seconds(6), clock);
  const TimePoint start = clock.now();
  const Status s = shield.run(Operation::read("page"), [] { return Status(); });
  EXPECT_EQ(s.stop_reason(), StopReason::kBreakerOpen);
  EXPECT_EQ(clock.now(), start);
  EXPECT_EQ(shield.metrics().snapshot().breaker_waits, 0u);
}

TEST_F(SilentServer, WhileSilentItRechecksAndTheFirstAnswerClosesTheBreaker) {
  Liveness& live = watch();
  live.done();  // the exchange gave up when told of the silence
  clock.advance(milliseconds(99));
  EXPECT_FALSE(live.tick(clock.now()));  // rechecks every 100 ms
  clock.advance(milliseconds(1));
  EXPECT_TRUE(live.tick(clock.now()));
  EXPECT_TRUE(live.silent());
  EXPECT_NE(shield.breaker().state(), BreakerState::kClosed);
  server.answer = Check::kAnswered;  // thawed
  clock.advance(milliseconds(100));
  EXPECT_TRUE(live.tick(clock.now()));
  EXPECT_FALSE(live.silent());
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(server.changes, (std::vector<bool>{true, false}));
  EXPECT_EQ(server.checks, 3);
}

TEST_F(SilentServer, AnAnswerHeardOnAnExchangeEndsTheSilenceWithoutACheck) {
  Liveness& live = watch();
  clock.advance(milliseconds(10));
  live.answered(clock.now());  // a late answer: the server is back
  EXPECT_FALSE(live.tick(clock.now()));
  EXPECT_FALSE(live.silent());
  EXPECT_EQ(server.checks, 1);
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  EXPECT_EQ(server.changes, (std::vector<bool>{true, false}));
}

TEST(Liveness, ACheckThatThrowsIsNoEvidence) {
  ManualClock clock;
  Shield shield("db", clock);
  Liveness live(
      shield, [](TimePoint) -> Check { throw std::runtime_error("no"); }, {}, manual());
  live.waiting(clock.now());
  clock.advance(milliseconds(500));
  EXPECT_TRUE(live.tick(clock.now()));
  EXPECT_FALSE(live.silent());
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
}

// A driver on an event loop runs the checks itself (asio::pg::Client): the watch says when one
// is due and takes what it found, with the rules tick() has, and acts through on_change alone.
TEST(Liveness, ADriverThatRunsItsOwnChecksGetsTheSameVerdicts) {
  ManualClock clock;
  std::vector<bool> changes;
  Liveness live([&](bool silent) { changes.push_back(silent); }, manual());
  live.waiting(clock.now());
  EXPECT_EQ(live.check_due_in(clock.now()), milliseconds(500));
  clock.advance(milliseconds(499));
  EXPECT_FALSE(live.begin_check(clock.now()));
  EXPECT_EQ(live.check_due_in(clock.now()), milliseconds(1));
  clock.advance(milliseconds(1));
  ASSERT_TRUE(live.begin_check(clock.now()));
  EXPECT_FALSE(live.begin_check(clock.now()));  // one at a time
  EXPECT_EQ(live.check_due_in(clock.now()), Duration::zero());
  clock.advance(milliseconds(200));
  live.end_check(Check::kAnswered, clock.now());  // slow, not silent
  EXPECT_FALSE(live.silent());
  // The next suspicion needs twice the quiet time.
  EXPECT_EQ(live.check_due_in(clock.now()), milliseconds(1000));
  clock.advance(milliseconds(1000));
  ASSERT_TRUE(live.begin_check(clock.now()));
  live.end_check(Check::kSilent, clock.now());
  EXPECT_TRUE(live.silent());
  EXPECT_EQ(changes, (std::vector<bool>{true}));
  // Silent: rechecked every `recheck`; the first answer ends the silence.
  EXPECT_EQ(live.check_due_in(clock.now()), milliseconds(100));
  EXPECT_FALSE(live.begin_check(clock.now()));
  clock.advance(milliseconds(100));
  ASSERT_TRUE(live.begin_check(clock.now()));
  live.end_check(Check::kAnswered, clock.now());
  EXPECT_FALSE(live.silent());
  EXPECT_EQ(changes, (std::vector<bool>{true, false}));
  EXPECT_EQ(live.checks(), 3u);
  EXPECT_EQ(live.silences(), 1u);
  EXPECT_FALSE(live.tick(clock.now()));  // it has no check of its own to run
}

// A driver that knows its own wait's quiet time passes it: the suspicion is that wait's, so
// one wait that heard nothing is checked although other exchanges were answered meanwhile
// (a pooler that cannot get it a server connection), and a wait that just began is not,
// whatever the others did.
TEST(Liveness, AWaitThatHeardNothingIsSuspectWhateverTheOthersHeard) {
  ManualClock clock;
  Liveness::Options o = manual();
  o.suspect_max = o.suspect_after;  // no doubling after an answered check (as the Client)
  Liveness live([](bool) {}, o);
  live.waiting(clock.now());  // the stuck wait
  clock.advance(milliseconds(400));
  live.answered(clock.now());  // another exchange was answered
  clock.advance(milliseconds(100));
  EXPECT_EQ(live.check_due_in(clock.now()), milliseconds(400));  // all work: quiet 100 ms
  EXPECT_EQ(live.check_due_in(clock.now(), milliseconds(500)), Duration::zero());
  EXPECT_FALSE(live.begin_check(clock.now(), milliseconds(20)));  // a wait that just began
  ASSERT_TRUE(live.begin_check(clock.now(), milliseconds(500)));  // the stuck one
  clock.advance(milliseconds(5));
  live.end_check(Check::kAnswered, clock.now());  // slow, not silent
  // A check answered counts for every wait: the stuck one asks again only once it has waited
  // as long again (not on every look).
  EXPECT_FALSE(live.begin_check(clock.now(), milliseconds(505)));
  EXPECT_EQ(live.check_due_in(clock.now(), milliseconds(505)), milliseconds(500));
  clock.advance(milliseconds(500));
  ASSERT_TRUE(live.begin_check(clock.now(), milliseconds(1005)));
  live.end_check(Check::kSilent, clock.now());
  EXPECT_TRUE(live.silent());
  EXPECT_EQ(live.checks(), 2u);
}

// With each_wait (pg::Database's watch), tick() judges the longest quiet time of any one
// wait: a wait that heard nothing for suspect_after is checked although other exchanges were
// answered meanwhile (a pooler that cannot get it a server connection answers the others),
// and a wait that ended is forgotten.
TEST(Liveness, EachWaitIsJudgedByItsOwnQuietTime) {
  ManualClock clock;
  Shield shield("db", clock);
  Server server;
  Liveness::Options o = manual();
  o.suspect_max = o.suspect_after;
  o.each_wait = true;
  Liveness live(shield, server.check(), server.on_change(), o);
  const std::uint32_t stuck = live.waiting(clock.now());
  ASSERT_NE(stuck, Liveness::kNoSlot);
  for (int i = 0; i < 4; ++i) {  // another exchange answered every 100 ms
    clock.advance(milliseconds(100));
    const std::uint32_t other = live.waiting(clock.now());
    EXPECT_NE(other, stuck);
    live.answered(clock.now(), other);
    live.done(other);
    EXPECT_FALSE(live.tick(clock.now()));
  }
  EXPECT_EQ(live.longest_wait(clock.now()), milliseconds(400));
  clock.advance(milliseconds(100));
  EXPECT_TRUE(live.tick(clock.now()));  // the stuck wait, 500 ms quiet: checked, and answered
  EXPECT_EQ(server.checks, 1);
  EXPECT_FALSE(live.silent());
  // It heard something: its quiet time starts again.
  live.answered(clock.now(), stuck);
  clock.advance(milliseconds(400));
  EXPECT_FALSE(live.tick(clock.now()));
  live.done(stuck);
  clock.advance(milliseconds(400));
  EXPECT_EQ(live.longest_wait(clock.now()), Duration::zero());
  EXPECT_FALSE(live.tick(clock.now()));  // nothing waits
  EXPECT_EQ(server.checks, 1);

  // The same waits judged by all work's quiet time: never quiet for 500 ms, never checked.
  Server server2;
  Liveness all(shield, server2.check(), server2.on_change(), manual());
  all.waiting(clock.now());
  for (int i = 0; i < 10; ++i) {
    clock.advance(milliseconds(100));
    all.waiting(clock.now());
    all.answered(clock.now());
    all.done();
    EXPECT_FALSE(all.tick(clock.now()));
  }
  EXPECT_EQ(server2.checks, 0);
}

// More waits than slots: the ones past them count in all work's quiet time only.
TEST(Liveness, WaitsPastTheSlotsStillCountInAllWork) {
  ManualClock clock;
  Liveness::Options o = manual();
  o.each_wait = true;
  Liveness live([](bool) {}, o);
  std::vector<std::uint32_t> slots;
  for (int i = 0; i < 100; ++i)
    slots.push_back(live.waiting(clock.now()));
  EXPECT_EQ(std::count(slots.begin(), slots.end(), Liveness::kNoSlot), 100 - 64);
  clock.advance(milliseconds(300));
  EXPECT_EQ(live.longest_wait(clock.now()), milliseconds(300));
  EXPECT_EQ(live.quiet_for(clock.now()), milliseconds(300));
  for (const std::uint32_t slot : slots)
    live.done(slot);
  EXPECT_EQ(live.longest_wait(clock.now()), Duration::zero());
  EXPECT_EQ(live.quiet_for(clock.now()), Duration::zero());
  EXPECT_NE(live.waiting(clock.now()), Liveness::kNoSlot);  // freed
}

TEST(Liveness, WithoutAShieldItRunsNoThreadOfItsOwn) {
  Liveness::Options o;  // background
  EXPECT_THROW(Liveness([](bool) {}, o), std::invalid_argument);
}

TEST_F(SilentServer, AnAnswerHeardOnAnExchangeEndsTheSilenceAtTheNextLook) {
  Liveness& live = watch();
  clock.advance(milliseconds(10));
  live.answered(clock.now());  // the driver's probe heard the server after its check
  EXPECT_EQ(live.check_due_in(clock.now()), Duration::zero());
  EXPECT_FALSE(live.begin_check(clock.now()));  // no check needed: it is back
  EXPECT_FALSE(live.silent());
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
}

}  // namespace
}  // namespace holdfast
