// The retry loop's success path against calling the same callable directly, in one run.
// Read the ratio, not the absolute numbers: the machines are shared and noisy.
#include <benchmark/benchmark.h>

#include "alloc_counter.hpp"
#include "holdfast/core/retry.hpp"

namespace {

// The "database call": a little work the optimizer cannot remove.
[[gnu::noinline]] holdfast::Result<int> point_read(int& state) {
  state = state * 1103515245 + 12345;
  return state >> 16;
}

void BM_DirectCall(benchmark::State& state) {
  int s = 1;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    holdfast::Result<int> r = point_read(s);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_DirectCall);

void BM_RetrySuccessPath(benchmark::State& state) {
  int s = 1;
  const holdfast::RetryPolicy policy;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    holdfast::Result<int> r =
        holdfast::retry(policy, holdfast::Operation::read("bench"), [&] { return point_read(s); });
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_RetrySuccessPath);

void BM_RetrySuccessPathInScope(benchmark::State& state) {
  int s = 1;
  const holdfast::RetryPolicy policy;
  holdfast::RequestScope scope;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    holdfast::Result<int> r =
        holdfast::retry(policy, holdfast::Operation::read("bench"), [&] { return point_read(s); });
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_RetrySuccessPathInScope);

}  // namespace

BENCHMARK_MAIN();
