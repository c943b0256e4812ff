// A log call with a DatabaseSink attached, on the caller's thread, against building the
// message alone, in one run. Read the ratios, not the absolute numbers: the machines are
// shared and noisy.
//
// Each iteration is timed on its own (two steady_clock reads, in the baseline too) so the
// run reports percentiles: p50_ns, p99_ns, p999_ns. allocs/op counts every heap allocation
// in the timed loop; the message string itself is one. `dropped/op` says whether the
// background writer kept up (a dropped entry is the cheap path, so watch it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/log/logger.hpp"

namespace {

// 48 characters: longer than the small-string buffer, so building it allocates once.
constexpr std::string_view kMessage = "payment accepted for order, charged to the card";

// Stores nothing, instantly: the bench measures the caller's side.
class NullStore final : public holdfast::LogStore {
 public:
  holdfast::Status write_batch(std::span<const holdfast::LogRecord> records) override {
    rows_.fetch_add(records.size(), std::memory_order_relaxed);
    return {};
  }
  holdfast::Result<int> delete_older_than(holdfast::WallTime, int) override { return 0; }

 private:
  std::atomic<std::uint64_t> rows_{0};
};

template <class Op>
void timed(benchmark::State& state, Op&& op) {
  constexpr std::size_t kSamples = 1 << 20;
  std::vector<std::uint32_t> samples(kSamples);
  std::size_t n = 0;
  {
    holdfast::bench::AllocationCounter allocs(state);
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      op();
      const auto t1 = std::chrono::steady_clock::now();
      samples[n++ & (kSamples - 1)] = static_cast<std::uint32_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    }
  }
  const std::size_t kept = std::min(n, kSamples);
  if (kept == 0) return;
  samples.resize(kept);
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return static_cast<double>(samples[std::min(kept - 1, static_cast<std::size_t>(q * kept))]);
  };
  state.counters["p50_ns"] = at(0.50);
  state.counters["p99_ns"] = at(0.99);
  state.counters["p999_ns"] = at(0.999);
}

holdfast::Logger::Options quiet() {
  holdfast::Logger::Options o;
  o.console = false;
  return o;
}

void BM_BuildMessageOnly(benchmark::State& state) {
  int order = 0;
  timed(state, [&] {
    std::string message(kMessage);
    benchmark::DoNotOptimize(message.data());
    benchmark::DoNotOptimize(++order);
  });
}
BENCHMARK(BM_BuildMessageOnly);

void run_logging(benchmark::State& state, bool build_message) {
  NullStore store;
  auto sink = std::make_shared<holdfast::DatabaseSink>(store);
  holdfast::Logger log(quiet());
  log.add_sink(sink);
  int order = 0;
  if (build_message) {
    timed(state, [&] {
      std::string message(kMessage);
      log.info("payments", message, {{"order", ++order}});
    });
  } else {
    timed(state, [&] { log.info("payments", kMessage, {{"order", ++order}}); });
  }
  sink->flush();
  const auto stats = sink->stats();
  state.counters["dropped/op"] =
      static_cast<double>(stats.dropped.total()) / static_cast<double>(state.iterations());
}

// The message built by the caller (one allocation), then logged.
void BM_BuildMessageAndLogToDatabaseSink(benchmark::State& state) {
  run_logging(state, true);
}
BENCHMARK(BM_BuildMessageAndLogToDatabaseSink);

// A message that needs no building: the log call alone.
void BM_LogLiteralToDatabaseSink(benchmark::State& state) {
  run_logging(state, false);
}
BENCHMARK(BM_LogLiteralToDatabaseSink);

// The same call during an overload pause: entries are queued, then skipped by the writer.
class OverloadedStore final : public holdfast::LogStore {
 public:
  holdfast::Status write_batch(std::span<const holdfast::LogRecord>) override {
    return holdfast::Status(
        holdfast::Code::kUnavailable, "database is locked",
        holdfast::Fault{holdfast::RetryScope::kStatement, holdfast::Outcome::kNotApplied,
                        holdfast::Pace::kFast, true});
  }
  holdfast::Result<int> delete_older_than(holdfast::WallTime, int) override { return 0; }
};

void BM_LogLiteralWhilePaused(benchmark::State& state) {
  // The sink's own notices (pause, closing summary) are WARN: keep them off the output.
  const holdfast::Level console_level = holdfast::console::level();
  holdfast::console::set_level(holdfast::Level::kError);
  {
    OverloadedStore store;
    auto sink = std::make_shared<holdfast::DatabaseSink>(store);
    holdfast::Logger log(quiet());
    log.add_sink(sink);
    log.error("bench", "start the pause");
    sink->flush();
    int order = 0;
    timed(state, [&] { log.info("payments", kMessage, {{"order", ++order}}); });
    sink->flush();
    state.counters["paused"] = sink->paused() ? 1 : 0;
  }
  holdfast::console::set_level(console_level);
}
BENCHMARK(BM_LogLiteralWhilePaused);

}  // namespace

BENCHMARK_MAIN();
