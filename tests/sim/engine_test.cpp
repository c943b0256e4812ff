// The simulator's stories (seeded) and its bookkeeping.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Scenario scenario(std::string_view name, Duration duration = {}) {
  Scenario s = *builtin_scenario(name);
  if (duration > Duration::zero()) s.duration = duration;
  return s;
}

Report run_ok(const Scenario& s, const Strategy& st) {
  Result<Report> r = run(s, st);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : Report{};
}

std::uint64_t sum(const Report& r, std::uint32_t Second::*field) {
  std::uint64_t total = 0;
  for (const Second& s : r.seconds)
    total += s.*field;
  return total;
}

// --- the metastable shape -------------------------------------------------------------

TEST(SimStory, AfterACapacityDropNaiveRetryStaysCollapsedWhileNoRetryRecovers) {
  // The default capacity drop (800 queries/s for 1000 requests/s, 10 s), judged over 35 s.
  Scenario s = scenario("capacity-drop", seconds(75));
  s.metastable_after = seconds(35);
  const Report none = run_ok(s, Strategy::none());
  const Report naive = run_ok(s, Strategy::naive());

  ASSERT_TRUE(none.recovery_s.has_value());
  EXPECT_LE(*none.recovery_s, 5.0);
  EXPECT_FALSE(none.metastable);

  EXPECT_FALSE(naive.recovery_s.has_value());
  EXPECT_TRUE(naive.metastable);
  // Long after the trigger: the database is busy, the queue is full of dead work, and
  // almost nobody gets an answer, with four attempts per request.
  const Second& late = naive.seconds[60];
  EXPECT_LT(late.successes, late.arrivals / 10);
  EXPECT_GT(late.amplification, 3.5);
  EXPECT_EQ(late.busy_workers, static_cast<std::uint32_t>(s.database.workers));
  EXPECT_GT(late.queue, 1600u);  // more than a timeout's worth of work waits
  // No retry: the same second is served in full.
  EXPECT_GE(none.seconds[60].successes, none.seconds[60].arrivals * 95 / 100);
}

TEST(SimStory, TenacityStyleBackoffOnlyDelaysTheStorm) {
  Scenario s = scenario("capacity-drop", seconds(75));
  s.metastable_after = seconds(35);
  const Report backoff = run_ok(s, Strategy::backoff());
  EXPECT_TRUE(backoff.metastable);
  // Nearly every request makes all of its 3 attempts, only later.
  EXPECT_GT(backoff.seconds[60].amplification, 2.5);
}

// --- holdfast, as the issue asks --------------------------------------------------------

// The issue asks for recovery within 2 s after a capacity drop. Before ADR 0007 it was 2,
// 4, 2, 4, 4 s for seeds 1..5 (no retry: 2 s each): the breaker opened on its ratio rule only
// ~4 s after timeouts began, and a successful probe released every request waiting for it
// (up to 6 s of traffic) at once. Now the breaker opens after 20 overload faults in a row
// and at most 32 requests per Shield wait for a probe: 0 s for every seed.
TEST(SimStory, HoldfastRecoversWithinTwoSecondsAfterACapacityDrop) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    Scenario s = scenario("capacity-drop", seconds(60));
    s.seed = seed;
    s.metastable_after = seconds(15);
    const Report h = run_ok(s, Strategy::holdfast());
    ASSERT_TRUE(h.recovery_s.has_value()) << "seed " << seed;
    EXPECT_LE(*h.recovery_s, 2.0) << "seed " << seed;
  }
}

TEST(SimStory, HoldfastIsNotMetastableWhereNaiveRetryIs) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    Scenario s = scenario("capacity-drop", seconds(75));
    s.seed = seed;
    s.metastable_after = seconds(35);
    const Report h = run_ok(s, Strategy::holdfast());
    ASSERT_TRUE(h.recovery_s.has_value()) << "seed " << seed;
    EXPECT_FALSE(h.metastable);
    // Measured 0 s over seeds 1-6 (1-4 s before ADR 0007; see the test above).
    EXPECT_LE(*h.recovery_s, 5.0) << "seed " << seed;
    EXPECT_LE(h.amplification_during_trigger, 1.1) << "seed " << seed;
  }
}

TEST(SimStory, HoldfastKeepsAmplificationAtMost1_1InTheSpike) {
  const Report h = run_ok(scenario("spike", seconds(60)), Strategy::holdfast());
  EXPECT_LE(h.amplification_during_trigger, 1.1);
  EXPECT_LE(h.amplification_max, 1.1);
  // Naive retry, in the same spike, sends far more.
  EXPECT_GT(run_ok(scenario("spike", seconds(60)), Strategy::naive()).amplification_max, 1.5);
}

TEST(SimStory, HoldfastKeepsAmplificationAtMost1_1OverTheOutage) {
  const Report h = run_ok(scenario("outage", seconds(60)), Strategy::holdfast());
  EXPECT_LE(h.amplification_during_trigger, 1.1);
  const Report naive = run_ok(scenario("outage", seconds(60)), Strategy::naive());
  EXPECT_DOUBLE_EQ(naive.seconds[25].amplification, 4.0);
}

// Per second, too. Before ADR 0007 the outage's first second reached 1.20: each of the 8
// client processes' throttles let through half its bucket (5 tokens) plus its floor's burst
// (10) and rate (10/s) while its breaker waited ~4 s for the ratio rule. Now each breaker
// opens after 20 refusals in a row (~160 ms), before most of those retries are due.
TEST(SimStory, HoldfastKeepsEverySecondsAmplificationAtMost1_1InTheOutage) {
  const Report h = run_ok(scenario("outage", seconds(60)), Strategy::holdfast());
  EXPECT_LE(h.amplification_max, 1.1);
}

TEST(SimStory, HoldfastsBreakerDoesNotOpenInTheBrownout) {
  const Report h = run_ok(scenario("brownout", seconds(60)), Strategy::holdfast());
  for (std::size_t i = 0; i < h.seconds.size(); ++i) {
    EXPECT_EQ(h.seconds[i].breaker_open, 0.0) << "second " << i;
  }
  EXPECT_EQ(h.breaker_rejections, 0u);
  // The brownout was real: attempts failed during it.
  EXPECT_GT(h.errors, 0u);
}

TEST(SimStory, AHealthProbeBringsBreakersBackSoonerAfterAnOutage) {
  Scenario s = scenario("outage", seconds(90));
  s.metastable_after = seconds(50);
  const Report plain = run_ok(s, Strategy::holdfast());
  Strategy probed = Strategy::holdfast();
  probed.health_interval = milliseconds(500);
  const Report with_probe = run_ok(s, probed);
  ASSERT_TRUE(plain.recovery_s.has_value());
  ASSERT_TRUE(with_probe.recovery_s.has_value());
  EXPECT_LE(*with_probe.recovery_s, *plain.recovery_s);
  // Without a probe too, service is back within a second: the open period stops growing
  // at 800 ms (ADR 0008), so the first probe after the outage comes within a second of it.
  EXPECT_LE(*plain.recovery_s, 1.0);
  EXPECT_EQ(plain.seconds[32].breaker_open, 0.0);
}

// --- the targets of overload control (ADR 0008, 0033, 0045), library defaults, seeds 1-6 -

struct Targets {
  const char* scenario;
  Duration duration;
  // The served requests that arrived during the trigger, 99th percentile (0: not checked).
  double served_p99_ms = 0.0;
};

void expect_targets(const Targets& t, std::uint64_t seed) {
  Scenario s = scenario(t.scenario, t.duration);
  s.seed = seed;
  const Report h = run_ok(s, Strategy::holdfast());
  SCOPED_TRACE(std::string(t.scenario) + " seed " + std::to_string(seed));
  ASSERT_TRUE(h.recovery_s.has_value());
  EXPECT_LE(*h.recovery_s, 1.0);
  switch (s.trigger.kind) {
    case TriggerKind::kBrownout:
      EXPECT_GE(h.goodput_during_trigger, 0.98);
      EXPECT_LE(h.amplification_during_trigger, 1.3);
      break;
    case TriggerKind::kOutage:
      EXPECT_LE(h.amplification_during_trigger, 1.1);
      EXPECT_LE(h.failed_p50_ms, 50.0) << "a request learns at once that it must come back";
      break;
    default:
      EXPECT_GE(h.efficiency, 0.95) << "goodput " << h.goodput_during_trigger << " of a limit of "
                                    << h.goodput_limit_during_trigger;
      EXPECT_LE(h.amplification_during_trigger, 1.1);
      // Short queues (ADR 0033): a request that is not served is told at once.
      EXPECT_LE(h.failed_p99_ms, 20.0);
      if (t.served_p99_ms > 0.0) {
        EXPECT_LE(h.p99_during_trigger_ms, t.served_p99_ms);
      }
      break;
  }
}

TEST(SimTargets, CapacityDropRunsTheDatabaseAtItsLimitAndRecoversWithinASecond) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    expect_targets({"capacity-drop", seconds(45), 100.0}, seed);
}

TEST(SimTargets, SpikeRunsTheDatabaseAtItsLimitAndRecoversWithinASecond) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    expect_targets({"spike", seconds(45), 100.0}, seed);
}

// 200 processes: each limit's queue allowance shrinks while the database's queue is many
// answers long, so their sum no longer queues 800 calls at 80 workers (ADR 0045).
TEST(SimTargets, ManyClientsTogetherRunTheDatabaseAtItsLimit) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    expect_targets({"many-clients", seconds(42), 100.0}, seed);
}

TEST(SimTargets, ABrownoutWithCapacityToSpareIsRetriedToAlmostEverything) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    expect_targets({"brownout", seconds(55)}, seed);
}

TEST(SimTargets, AnOutageIsAnsweredAtOnceAndLeftWithinASecond) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    expect_targets({"outage", seconds(45)}, seed);
}

// --- bookkeeping ----------------------------------------------------------------------

TEST(SimEngine, EveryRequestIsCountedOnceAndEveryAttemptOnce) {
  for (const Strategy& st :
       {Strategy::none(), Strategy::naive(), Strategy::backoff(), Strategy::holdfast()}) {
    const Report r = run_ok(scenario("capacity-drop", seconds(45)), st);
    EXPECT_EQ(sum(r, &Second::arrivals), r.requests) << st.name;
    EXPECT_EQ(sum(r, &Second::successes), r.successes) << st.name;
    EXPECT_EQ(sum(r, &Second::errors), r.errors) << st.name;
    EXPECT_EQ(r.successes + r.errors + r.in_flight_at_end, r.requests) << st.name;
    EXPECT_EQ(sum(r, &Second::db_attempts), r.db_attempts) << st.name;
    EXPECT_EQ(
        std::accumulate(r.errors_by_reason.begin(), r.errors_by_reason.end(), std::uint64_t{0}),
        r.errors)
        << st.name;
    // Attempts per request, weighted by arrivals, add up to all attempts.
    double attempts = 0;
    for (const Second& s : r.seconds)
      attempts += s.amplification * s.arrivals;
    EXPECT_NEAR(attempts, static_cast<double>(r.db_attempts), 0.5) << st.name;
    EXPECT_EQ(r.seconds.size(), 45u);
  }
}

TEST(SimEngine, WithoutRetryEveryRequestMakesExactlyOneAttempt) {
  const Report r = run_ok(scenario("outage", seconds(40)), Strategy::none());
  for (const Second& s : r.seconds)
    EXPECT_DOUBLE_EQ(s.amplification, 1.0);
  EXPECT_EQ(r.db_attempts, r.requests);
  // During the outage every request failed: refused, attempts exhausted after one. (A
  // refusal takes 1 ms, so a request arriving at the end of a second fails in the next.)
  std::uint64_t arrivals = 0;
  std::uint64_t errors = 0;
  for (std::size_t i = 21; i < 29; ++i) {
    EXPECT_EQ(r.seconds[i].successes, 0u) << i;
    arrivals += r.seconds[i].arrivals;
    errors += r.seconds[i].errors;
  }
  EXPECT_NEAR(static_cast<double>(errors), static_cast<double>(arrivals), 5.0);
  EXPECT_EQ(r.errors, r.errors_by_reason[static_cast<std::size_t>(StopReason::kAttemptsExhausted)]);
}

TEST(SimEngine, TheOfferedLoadFollowsTheSpike) {
  const Report r = run_ok(scenario("spike", seconds(40)), Strategy::none());
  std::uint64_t before = 0;
  std::uint64_t during = 0;
  for (std::size_t i = 10; i < 20; ++i)
    before += r.seconds[i].arrivals;
  for (std::size_t i = 20; i < 30; ++i)
    during += r.seconds[i].arrivals;
  EXPECT_NEAR(static_cast<double>(before), 10000.0, 400.0);  // Poisson: sd ~100
  EXPECT_NEAR(static_cast<double>(during), 25000.0, 700.0);
}

TEST(SimEngine, TheTailOfTheRequestsThatArrivedDuringTheTriggerIsReportedApart) {
  // Without retry the spike's requests queue in the database: they are the slow ones.
  const Report r = run_ok(scenario("spike", seconds(40)), Strategy::none());
  EXPECT_GT(r.p99_during_trigger_ms, 100.0);
  EXPECT_GE(r.p99_during_trigger_ms, r.p99_ms);
  EXPECT_GE(r.p999_ms, r.p99_ms);
  // Without a trigger, the whole run is the trigger's time.
  Scenario calm = scenario("spike", seconds(20));
  calm.trigger.kind = TriggerKind::kNone;
  const Report c = run_ok(calm, Strategy::none());
  EXPECT_GT(c.p99_ms, 0.0);
  EXPECT_EQ(c.p99_during_trigger_ms, c.p99_ms);
}

TEST(SimEngine, RequestStateIsReusedSoMemoryFollowsConcurrencyNotVolume) {
  const Report r = run_ok(scenario("brownout"), Strategy::none());
  EXPECT_GT(r.requests, 140000u);
  EXPECT_LT(r.peak_in_flight, 200u);  // 1000/s x a few ms each
  EXPECT_LT(r.peak_event_queue, 2000u);
}

TEST(SimEngine, MaxRequestsStopsAdmission) {
  Scenario s = scenario("capacity-drop", seconds(40));
  s.max_requests = 5000;
  const Report r = run_ok(s, Strategy::none());
  EXPECT_EQ(r.requests, 5000u);
}

TEST(SimEngine, TheSameSeedGivesTheSameRunAndAnotherSeedAnotherOne) {
  Scenario s = scenario("capacity-drop", seconds(45));
  const Report a = run_ok(s, Strategy::holdfast());
  const Report b = run_ok(s, Strategy::holdfast());
  s.seed = 2;
  const Report c = run_ok(s, Strategy::holdfast());
  auto same = [](const Report& x, const Report& y) {
    if (x.seconds.size() != y.seconds.size() || x.events != y.events) return false;
    for (std::size_t i = 0; i < x.seconds.size(); ++i) {
      const Second& p = x.seconds[i];
      const Second& q = y.seconds[i];
      if (p.arrivals != q.arrivals || p.successes != q.successes || p.errors != q.errors ||
          p.db_attempts != q.db_attempts || p.amplification != q.amplification ||
          p.p99_ms != q.p99_ms || p.breaker_open != q.breaker_open || p.queue != q.queue) {
        return false;
      }
    }
    return true;
  };
  EXPECT_TRUE(same(a, b));
  EXPECT_FALSE(same(a, c));
}

TEST(SimEngine, AbandonedWorkStillOccupiesTheDatabaseUnlessDropped) {
  // During the drop the queue holds work whose clients left; serving it delays recovery.
  Scenario s = scenario("capacity-drop", seconds(45));
  const Report served = run_ok(s, Strategy::none());
  s.database.drop_abandoned = true;
  const Report dropped = run_ok(s, Strategy::none());
  EXPECT_GT(served.seconds[29].queue, dropped.seconds[29].queue);
  ASSERT_TRUE(served.recovery_s && dropped.recovery_s);
  EXPECT_LE(*dropped.recovery_s, *served.recovery_s);
}

TEST(SimEngine, TheReportSaysHowSoonEachBreakerOpenedAfterTheTriggerBegan) {
  const Report h = run_ok(scenario("outage", seconds(40)), Strategy::holdfast());
  EXPECT_EQ(h.breakers, 8u);
  ASSERT_EQ(h.breaker_open_after_s.size(), 8u);
  EXPECT_TRUE(std::is_sorted(h.breaker_open_after_s.begin(), h.breaker_open_after_s.end()));
  // Refused at once, 125 requests/s per process: 20 refusals in a row take ~160 ms.
  EXPECT_GT(h.breaker_open_after_s.front(), 0.0);
  EXPECT_LT(h.breaker_open_after_s.back(), 0.5);
  // In a brownout they never open; without a breaker there is none.
  const Report b = run_ok(scenario("brownout", seconds(45)), Strategy::holdfast());
  EXPECT_EQ(b.breakers, 8u);
  EXPECT_TRUE(b.breaker_open_after_s.empty());
  const Report none = run_ok(scenario("outage", seconds(40)), Strategy::none());
  EXPECT_EQ(none.breakers, 0u);
  EXPECT_TRUE(none.breaker_open_after_s.empty());
}

TEST(SimEngine, BadInputIsRefusedWithAStatus) {
  Scenario s = scenario("spike");
  s.database.workers = 0;
  Result<Report> r = run(s, Strategy::none());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  Strategy st = Strategy::naive();
  st.max_attempts = 0;
  EXPECT_EQ(run(scenario("spike"), st).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace holdfast::sim
