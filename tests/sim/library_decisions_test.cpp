// The simulator decides nothing itself: every retry, wait and refusal is the library's.
// These tests record what the simulator asked and was told (Tracer), replay the same
// inputs through stand-alone library objects built from the same configuration, and fail
// on the first decision that differs — and on any step where the simulator did not do
// what it was told.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "holdfast/core/health_probe.hpp"
#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using AdmissionKind = Shield::Admission::Kind;

// A TraceEvent with its Status copied (the trace's pointer lives only during the call).
struct Recorded {
  TraceEvent e;
  std::optional<Status> status;
};

std::vector<Recorded> record(const Scenario& s, const Strategy& st, Report* report = nullptr) {
  std::vector<Recorded> out;
  Result<Report> r = run(s, st, [&](const TraceEvent& e) {
    Recorded rec{e, std::nullopt};
    if (e.status != nullptr) rec.status = *e.status;
    rec.e.status = nullptr;
    out.push_back(std::move(rec));
  });
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (report != nullptr && r.ok()) *report = std::move(*r);
  return out;
}

// A small, busy stage: 2 client processes, a capacity drop that opens their breakers.
Scenario small_capacity_drop() {
  Scenario s = *builtin_scenario("capacity-drop");
  s.duration = seconds(45);
  s.clients = 2;
  return s;
}

// --- strategies without a breaker: RetryState -------------------------------------------

void replay_retry_state(const Scenario& s, const Strategy& st) {
  const std::vector<Recorded> trace = record(s, st);
  ManualClock clock;
  const RetryPolicy policy = retry_policy(st, clock);
  std::map<std::uint64_t, std::unique_ptr<RetryState>> states;
  std::map<std::uint64_t, TimePoint> next_attempt;  // when the loop said to try again
  std::size_t failures = 0;
  std::size_t retries = 0;
  for (const Recorded& rec : trace) {
    const TraceEvent& e = rec.e;
    switch (e.kind) {
      case TraceEvent::Kind::kArrival:
        states[e.request] = std::make_unique<RetryState>(policy, Operation::read(), nullptr,
                                                         Random(request_seed(s.seed, e.request)));
        next_attempt[e.request] = e.at;
        break;
      case TraceEvent::Kind::kSucceeded:
      case TraceEvent::Kind::kFailed: {
        ASSERT_TRUE(states.count(e.request)) << "request " << e.request;
        // The attempt started exactly when the loop said.
        ASSERT_EQ(e.at - e.latency, next_attempt[e.request]) << "request " << e.request;
        RetryState& state = *states[e.request];
        if (e.kind == TraceEvent::Kind::kSucceeded) {
          state.on_success();
          states.erase(e.request);
          break;
        }
        ++failures;
        ASSERT_TRUE(rec.status.has_value());
        clock.advance_to(e.at);
        const RetryDecision d = state.on_failure(*rec.status, e.at);
        ASSERT_EQ(e.retry, d.retry)
            << "request " << e.request << " at attempt " << state.attempts();
        if (d.retry) {
          ++retries;
          ASSERT_EQ(e.delay, d.delay) << "request " << e.request;
          next_attempt[e.request] = e.at + d.delay;
        } else {
          ASSERT_EQ(e.stop, d.reason) << "request " << e.request;
          states.erase(e.request);
        }
        break;
      }
      default:
        FAIL() << "a strategy without a breaker asked the breaker";
    }
  }
  // The replay saw the storm, not an idle run.
  EXPECT_GT(failures, 1000u) << st.name;
  if (st.max_attempts > 1) {
    EXPECT_GT(retries, 1000u) << st.name;
  }
}

TEST(SimLibraryDecisions, NaiveRetriesAreExactlyTheRetryStatesDecisions) {
  replay_retry_state(small_capacity_drop(), Strategy::naive());
}

TEST(SimLibraryDecisions, BackoffWaitsAreExactlyTheRetryStatesDecisions) {
  replay_retry_state(small_capacity_drop(), Strategy::backoff());
}

TEST(SimLibraryDecisions, NoRetryStopsAfterOneAttemptAsTheRetryStateSays) {
  replay_retry_state(small_capacity_drop(), Strategy::none());
}

TEST(SimLibraryDecisions, TenacityStyleBackoffWaitsOneThenTwoSecondsAndMoreWithMoreAttempts) {
  // The backoff strategy's own schedule, read back from what the simulator did: the drill's
  // stop_after_attempt(3), and with attempts=4 one more wait of 4 s.
  Scenario s = *builtin_scenario("outage");
  s.duration = seconds(30);
  for (const char* text : {"backoff", "backoff:attempts=4"}) {
    const Strategy st = *parse_strategy(text);
    const std::vector<Recorded> trace = record(s, st);
    std::map<std::uint64_t, std::vector<Duration>> delays;
    for (const Recorded& rec : trace) {
      if (rec.e.kind == TraceEvent::Kind::kFailed && rec.e.retry) {
        delays[rec.e.request].push_back(rec.e.delay);
      }
    }
    const std::vector<Duration> expected =
        st.max_attempts == 3 ? std::vector<Duration>{seconds(1), seconds(2)}
                             : std::vector<Duration>{seconds(1), seconds(2), seconds(4)};
    std::size_t full = 0;
    for (const auto& [request, d] : delays) {
      EXPECT_LE(d.size(), expected.size()) << text;
      if (d.size() != expected.size()) continue;
      ++full;
      EXPECT_EQ(d, expected) << text;
    }
    EXPECT_GT(full, 1000u) << text;
  }
}

// --- holdfast: a Shield per client process ----------------------------------------------

struct Replayed {
  std::unique_ptr<RetryWindow> window;
  std::unique_ptr<Shield::Call> call;
  CircuitBreaker::Permit permit;
};

// What kinds of decision a replay went through.
struct Seen {
  std::map<AdmissionKind, std::size_t> admissions;
  std::map<StopReason, std::size_t> stops;
  std::size_t retries = 0;
  std::size_t probe_closes = 0;
};

void replay_shields(const Scenario& s, const Strategy& st, Seen& seen) {
  Report report;
  const std::vector<Recorded> trace = record(s, st, &report);
  ManualClock clock;
  const std::size_t n = s.shared_policies ? 1 : static_cast<std::size_t>(s.clients);
  std::vector<std::unique_ptr<Shield>> shields;
  std::vector<std::unique_ptr<HealthProbe>> probes;
  std::map<std::size_t, Status> probe_answers;  // per shield: what its next probe returns
  for (std::size_t i = 0; i < n; ++i) {
    shields.push_back(std::make_unique<Shield>("replay", shield_options(st, clock), clock));
  }
  if (st.health_interval > Duration::zero()) {
    HealthProbe::Options po;
    po.interval = st.health_interval;
    po.background = false;
    for (std::size_t i = 0; i < n; ++i) {
      probes.push_back(std::make_unique<HealthProbe>(
          shields[i]->breaker(), [&probe_answers, i] { return probe_answers[i]; }, po));
      shields[i]->breaker().expect_health_probes(clock.now() + st.health_interval,
                                                 st.health_interval);
    }
  }
  auto shield_of = [&](std::uint32_t client) -> Shield& {
    return *shields[s.shared_policies ? 0 : client];
  };

  std::map<std::uint64_t, Replayed> live;
  std::map<std::uint64_t, TimePoint> earliest;  // the next admit may not come before this
  std::map<std::uint64_t, TimePoint> latest;    // ... nor after this
  std::map<AdmissionKind, std::size_t>& admissions = seen.admissions;
  std::map<StopReason, std::size_t>& stops = seen.stops;
  std::size_t& probe_closes = seen.probe_closes;
  std::size_t waits = 0;
  for (const Recorded& rec : trace) {
    const TraceEvent& e = rec.e;
    clock.advance_to(e.at);
    switch (e.kind) {
      case TraceEvent::Kind::kArrival: {
        Replayed& r = live[e.request];
        Shield& shield = shield_of(e.client);
        r.window = std::make_unique<RetryWindow>(st.window, clock);
        r.call =
            std::make_unique<Shield::Call>(shield, shield.reads(), Operation::read(),
                                           r.window.get(), Random(request_seed(s.seed, e.request)));
        earliest[e.request] = latest[e.request] = e.at;
        break;
      }
      case TraceEvent::Kind::kAdmit: {
        ASSERT_TRUE(live.count(e.request)) << "request " << e.request;
        ASSERT_GE(e.at, earliest[e.request]) << "request " << e.request << " came back early";
        ASSERT_LE(e.at, latest[e.request]) << "request " << e.request << " came back late";
        Replayed& r = live[e.request];
        Shield::Admission a = r.call->admit(e.at);
        ASSERT_EQ(e.admission, a.kind) << "request " << e.request;
        ++admissions[a.kind];
        if (a.kind == AdmissionKind::kWait) ++waits;
        if (a.kind == AdmissionKind::kAttempt) {
          r.permit = std::move(a.permit);
          earliest[e.request] = latest[e.request] = e.at;  // the result's attempt start
        } else if (a.kind == AdmissionKind::kWait) {
          ASSERT_EQ(e.until, a.until) << "request " << e.request;
          // Back at `until`, or earlier when the Shield wakes it.
          earliest[e.request] = e.at;
          latest[e.request] = a.until;
        } else {
          ASSERT_TRUE(rec.status.has_value());
          ASSERT_EQ(rec.status->stop_reason(), a.status.stop_reason());
          ++stops[a.status.stop_reason()];
          live.erase(e.request);
        }
        break;
      }
      case TraceEvent::Kind::kSucceeded: {
        ASSERT_TRUE(live.count(e.request)) << "request " << e.request;
        ASSERT_EQ(e.at - e.latency, earliest[e.request]) << "request " << e.request;
        Replayed& r = live[e.request];
        r.call->succeeded(std::move(r.permit), e.latency);
        live.erase(e.request);
        break;
      }
      case TraceEvent::Kind::kFailed: {
        ASSERT_TRUE(live.count(e.request)) << "request " << e.request;
        ASSERT_EQ(e.at - e.latency, earliest[e.request]) << "request " << e.request;
        ASSERT_TRUE(rec.status.has_value());
        Replayed& r = live[e.request];
        const RetryDecision v = r.call->failed(std::move(r.permit), *rec.status, e.at, e.latency);
        ASSERT_EQ(e.retry, v.retry) << "request " << e.request;
        if (e.retry) {
          ASSERT_EQ(e.delay, v.delay) << "request " << e.request;
          ++seen.retries;
          earliest[e.request] = latest[e.request] = e.at + v.delay;
        } else {
          ASSERT_EQ(e.stop, v.status.stop_reason()) << "request " << e.request;
          ++stops[e.stop];
          live.erase(e.request);
        }
        break;
      }
      case TraceEvent::Kind::kHealthProbe: {
        ASSERT_LT(e.client, probes.size());
        ASSERT_TRUE(rec.status.has_value() || !e.ran);
        probe_answers[e.client] = rec.status.value_or(Status());
        const HealthProbe::ProbeReport out = probes[e.client]->probe_now();
        ASSERT_EQ(e.ran, out.ran) << "probe of shield " << e.client << " at "
                                  << e.at.time_since_epoch().count();
        ASSERT_EQ(e.closed, out.closed);
        probe_closes += out.closed ? 1 : 0;
        shields[e.client]->breaker().expect_health_probes(e.until, st.health_interval);
        break;
      }
    }
  }
  // The simulator's own count agrees with the replay.
  EXPECT_EQ(report.breaker_waits, waits);
}

template <class K>
std::size_t get(const std::map<K, std::size_t>& m, K key) {
  const auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

// Every kind of decision was exercised, so agreement means something.
void expect_every_kind(const Seen& seen) {
  EXPECT_GT(get(seen.admissions, AdmissionKind::kAttempt), 10000u);
  EXPECT_GT(get(seen.admissions, AdmissionKind::kWait), 10u);
  EXPECT_GT(get(seen.admissions, AdmissionKind::kStop), 10u);
  // 44 with hedged reads (some stragglers end in a hedge); 40 since the limit's allowance
  // shrinks far above tolerance (ADR 0045): the capacity drop leaves retries less room.
  EXPECT_GT(seen.retries, 30u);
  EXPECT_GT(get(seen.stops, StopReason::kAtCapacity), 10u);
  EXPECT_GT(get(seen.stops, StopReason::kBreakerOpen), 10u);
}

Scenario small_outage() {
  Scenario s = *builtin_scenario("outage");
  s.duration = seconds(45);
  s.clients = 2;
  return s;
}

TEST(SimLibraryDecisions, HoldfastDecisionsAreExactlyTheShieldsPerProcess) {
  Seen seen;
  replay_shields(small_capacity_drop(), Strategy::holdfast(), seen);
  replay_shields(small_outage(), Strategy::holdfast(), seen);
  expect_every_kind(seen);
}

// Random failures that the throttle lets through as retries (the breaker stays closed).
Scenario small_brownout() {
  Scenario s = *builtin_scenario("brownout");
  s.duration = seconds(30);
  s.clients = 2;
  return s;
}

TEST(SimLibraryDecisions, HoldfastDecisionsAreExactlyTheShieldsWhenShared) {
  Seen seen;
  for (Scenario s : {small_capacity_drop(), small_outage(), small_brownout()}) {
    s.shared_policies = true;
    replay_shields(s, Strategy::holdfast(), seen);
  }
  expect_every_kind(seen);
}

TEST(SimLibraryDecisions, HoldfastWithAHealthProbeFollowsTheProbeAndTheShield) {
  Strategy st = Strategy::holdfast();
  st.health_interval = milliseconds(500);
  Seen seen;
  replay_shields(small_outage(), st, seen);
  EXPECT_GT(seen.probe_closes, 0u);
}

TEST(SimLibraryDecisions, TheSimulatorGivesTheLibraryTheStrategysConfiguration) {
  ManualClock clock;
  Strategy st = Strategy::holdfast();
  st.max_attempts = 3;
  st.window = seconds(4);
  st.breaker_threshold = 9;
  const Shield::Options o = shield_options(st, clock);
  EXPECT_EQ(o.reads.max_attempts(), 3);
  EXPECT_EQ(o.reads.window(), seconds(4));
  EXPECT_EQ(&o.reads.clock(), &clock);
  EXPECT_EQ(o.breaker.consecutive_failures, 9);
  // Defaults are the library's own.
  const Shield::Options d = shield_options(Strategy::holdfast(), clock);
  EXPECT_EQ(d.breaker.consecutive_failures, CircuitBreaker::Options{}.consecutive_failures);
  EXPECT_EQ(d.breaker.open_max, Shield::Options{}.breaker.open_max);
  EXPECT_EQ(d.throttle.token_ratio, RetryThrottle::Options{}.token_ratio);
  EXPECT_EQ(d.queue_wait, Shield::Options{}.queue_wait);
  EXPECT_EQ(d.limit.initial, ConcurrencyLimit::Options{}.initial);
  EXPECT_EQ(d.reads.max_attempts(), RetryPolicy::standard().max_attempts());
  // Tenacity: wait_exponential(multiplier=1, min=1, max=10) without jitter, 3 attempts.
  const RetryPolicy t = retry_policy(Strategy::backoff(), clock);
  EXPECT_EQ(t.max_attempts(), 3);
  EXPECT_EQ(t.backoff().nominal(1), seconds(1));
  EXPECT_EQ(t.backoff().nominal(3), seconds(4));
  EXPECT_EQ(t.backoff().nominal(9), seconds(10));
  EXPECT_EQ(t.backoff().jitter().kind(), Jitter::Kind::kNone);
  const RetryPolicy n = retry_policy(Strategy::naive(), clock);
  EXPECT_EQ(n.max_attempts(), 4);
  EXPECT_EQ(n.backoff().max_delay(), Duration::zero());
}

}  // namespace
}  // namespace holdfast::sim
