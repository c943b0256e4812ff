// Heap allocations made by this process, counted by a replaced global operator new.
// Benchmarks report allocations per operation with it (state.counters["allocs/op"]).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

namespace holdfast::bench {

std::uint64_t allocations() noexcept;

// Reports allocations made during the timed loop, per iteration.
class AllocationCounter {
 public:
  explicit AllocationCounter(benchmark::State& state) : state_(state), start_(allocations()) {}
  ~AllocationCounter() {
    const double n = static_cast<double>(allocations() - start_);
    state_.counters["allocs/op"] =
        benchmark::Counter(n / static_cast<double>(state_.iterations() ? state_.iterations() : 1));
  }

 private:
  benchmark::State& state_;
  std::uint64_t start_;
};

}  // namespace holdfast::bench
