// The circuit breaker's closed and open paths, and the Shield's success path, each against
// the bare call in the same run. Read the ratios, not the absolute numbers: the machines
// are shared and noisy.
//
//   bench_breaker --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>

#include "alloc_counter.hpp"
#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/shield.hpp"

namespace {

using holdfast::CircuitBreaker;
using holdfast::Duration;
using holdfast::TimePoint;

// The "database call": a little work the optimizer cannot remove.
[[gnu::noinline]] holdfast::Result<int> point_read(int& state) {
  state = state * 1103515245 + 12345;
  return state >> 16;
}

// Virtual time for the breaker benchmarks: 2 µs per call, as if a caller (the Shield) had
// read the clock around each call; buckets roll over as they would at 500,000 calls a
// second per thread.
constexpr std::int64_t kStepNs = 2000;
TimePoint at(std::int64_t ns) {
  return TimePoint(Duration(ns));
}

CircuitBreaker& closed_breaker() {
  static CircuitBreaker breaker;
  return breaker;
}

CircuitBreaker& open_breaker() {
  static CircuitBreaker& breaker = []() -> CircuitBreaker& {
    CircuitBreaker::Options o;
    o.open_initial = std::chrono::hours(1);
    o.open_max = std::chrono::hours(1);
    static CircuitBreaker b(o);
    const TimePoint now = holdfast::Clock::system().now();
    for (int i = 0; i < 5; ++i)
      b.acquire(now).record(holdfast::CallResult::kFailure);
    return b;
  }();
  return breaker;
}

void BM_BareCall(benchmark::State& state) {
  int s = 1;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    holdfast::Result<int> r = point_read(s);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_BareCall)->Threads(1)->Threads(2);

// acquire(now) + the call + record(result): the closed-state path.
void BM_BreakerClosed(benchmark::State& state) {
  CircuitBreaker& breaker = closed_breaker();
  int s = 1;
  std::int64_t t = holdfast::Clock::system().now().time_since_epoch().count();
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    CircuitBreaker::Permit permit = breaker.acquire(at(t));
    holdfast::Result<int> r = point_read(s);
    permit.record(r.status());
    benchmark::DoNotOptimize(r);
    t += kStepNs;
  }
  if (breaker.state() != holdfast::BreakerState::kClosed) state.SkipWithError("breaker opened");
}
BENCHMARK(BM_BreakerClosed)->Threads(1)->Threads(2);

// A refusal while open: no exception, no allocation, no lock.
void BM_BreakerOpenRejection(benchmark::State& state) {
  CircuitBreaker& breaker = open_breaker();
  std::int64_t t = holdfast::Clock::system().now().time_since_epoch().count();
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    CircuitBreaker::Permit permit = breaker.acquire(at(t));
    benchmark::DoNotOptimize(permit.retry_after());
    t += kStepNs;
  }
  if (breaker.state() != holdfast::BreakerState::kOpen) state.SkipWithError("breaker not open");
}
BENCHMARK(BM_BreakerOpenRejection)->Threads(1)->Threads(2);

// For reference: one read of the system clock (the Shield reads it once per attempt).
void BM_SystemClockNow(benchmark::State& state) {
  holdfast::Clock& clock = holdfast::Clock::system();
  for (auto _ : state)
    benchmark::DoNotOptimize(clock.now());
}
BENCHMARK(BM_SystemClockNow);

holdfast::Shield& shield_on(holdfast::Clock& clock) {
  static holdfast::Shield shield("bench", clock);
  return shield;
}

// Shield::run on the system clock: breaker, throttle, metrics, one clock read.
void BM_ShieldRunSuccess(benchmark::State& state) {
  holdfast::Shield& shield = shield_on(holdfast::Clock::system());
  int s = 1;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    holdfast::Result<int> r =
        shield.run(holdfast::Operation::read("bench"), [&] { return point_read(s); });
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ShieldRunSuccess)->Threads(1)->Threads(2);

// The same on a ManualClock: the Shield's own cost without the clock read.
void BM_ShieldRunSuccessManualClock(benchmark::State& state) {
  static holdfast::ManualClock clock;
  static holdfast::Shield shield("bench-manual", clock);
  int s = 1;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    holdfast::Result<int> r =
        shield.run(holdfast::Operation::read("bench"), [&] { return point_read(s); });
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ShieldRunSuccessManualClock);

// Shield::run on the system clock and the bare call in alternating blocks, each block timed:
// drifts in machine load (the machine is shared) hit both sides alike, so the difference is
// steadier than the one between two separate benchmarks. Counters: "bare ns" and "ns" per
// call, "+ns" the Shield's cost over the bare call.
void BM_ShieldRunPaired(benchmark::State& state) {
  constexpr int kBlock = 256;
  holdfast::Shield& shield = shield_on(holdfast::Clock::system());
  holdfast::Clock& clock = holdfast::Clock::system();
  int s = 1;
  Duration bare_time{};
  Duration run_time{};
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    TimePoint start = clock.now();
    for (int k = 0; k < kBlock; ++k) {
      holdfast::Result<int> r = point_read(s);
      benchmark::DoNotOptimize(r);
    }
    bare_time += clock.now() - start;
    start = clock.now();
    for (int k = 0; k < kBlock; ++k) {
      holdfast::Result<int> r =
          shield.run(holdfast::Operation::read("bench"), [&] { return point_read(s); });
      benchmark::DoNotOptimize(r);
    }
    run_time += clock.now() - start;
  }
  const double calls = static_cast<double>(state.iterations()) * kBlock;
  state.counters["bare ns"] = static_cast<double>(bare_time.count()) / calls;
  state.counters["ns"] = static_cast<double>(run_time.count()) / calls;
  state.counters["+ns"] = static_cast<double>((run_time - bare_time).count()) / calls;
}
BENCHMARK(BM_ShieldRunPaired);

}  // namespace

BENCHMARK_MAIN();
