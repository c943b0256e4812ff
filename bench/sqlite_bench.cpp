// The resilient prepared point read against raw sqlite3_step/sqlite3_reset on the very same
// prepared statement and connection, in memory and on a WAL file, in one run.
//
//   raw          bind, step, column, reset on the sqlite3_stmt* itself
//   database     Database::query_one: read-connection checkout, cached statement, checked
//                column read, reset, give back
//   resilient    ResilientDatabase::query_one: the above inside the retry seam (a
//                RequestScope joined or opened, holdfast::retry's success path)
//   in_scope     the same inside a caller's RequestScope, as in a web request
//   floor        raw plus the two things any pooled, checked read must do: take and give
//                back a connection (an atomic exchange and a release store) and check the
//                column's storage class before reading it (paired run only)
//
// The table at the end gives each one's time (wall and CPU) as a ratio of raw's (goal:
// resilient <= 1.03 in memory) and allocations per read (goal: 0). Read the ratios, not the
// absolute numbers: the machines are shared and noisy. For medians:
//   bench_sqlite --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "database_impl.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/sqlite.hpp"
#include "holdfast/sqlite/statement.hpp"

namespace {

namespace sqlite = holdfast::sqlite;
using holdfast::Status;

constexpr int kRows = 1000;

struct Env {
  std::string name;
  std::string file;  // empty in memory
  std::unique_ptr<sqlite::ResilientDatabase> db;
  sqlite::Query point;

  ~Env() {
    db.reset();
    if (!file.empty()) {
      std::error_code ignored;
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::filesystem::remove(file + suffix, ignored);
      }
    }
  }
};

std::unique_ptr<Env> make_env(bool wal) {
  auto env = std::make_unique<Env>();
  env->name = wal ? "wal" : "memory";
  sqlite::Options options;
  if (wal) {
    env->file = (std::filesystem::temp_directory_path() /
                 ("holdfast-bench-" + std::to_string(::getpid()) + ".db"))
                    .string();
    options.path = env->file;
  } else {
    options.path = ":memory:";
  }
  options.read_connections = 1;  // every read uses the same connection and statement
  auto db = sqlite::ResilientDatabase::open(options);
  if (!db.ok()) {
    std::fprintf(stderr, "open: %s\n", db.status().to_string().c_str());
    std::exit(1);
  }
  env->db = std::make_unique<sqlite::ResilientDatabase>(std::move(*db));
  const Status schema = env->db->execute_script(
      "CREATE TABLE kv(id INTEGER PRIMARY KEY, v INTEGER NOT NULL);"
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) "
      "INSERT INTO kv SELECT i, i * 7 FROM n;");
  auto point = env->db->prepare("SELECT v FROM kv WHERE id = ?");
  if (!schema.ok() || !point.ok()) {
    std::fprintf(stderr, "setup failed\n");
    std::exit(1);
  }
  env->point = *point;
  auto check = env->db->query_one<std::int64_t>(env->point, 3);
  if (!check.ok() || check->value_or(0) != 21) {
    std::fprintf(stderr, "the point read is wrong\n");
    std::exit(1);
  }
  return env;
}

Env& env(bool wal) {
  static std::unique_ptr<Env> memory = make_env(false);
  static std::unique_ptr<Env> file = make_env(true);
  return wal ? *file : *memory;
}

void BM_Raw(benchmark::State& state, bool wal) {
  Env& e = env(wal);
  // Hold the read connection and its cached statement, then drive the statement by hand.
  const Status s = e.db->database().with_statement(e.point, [&](sqlite::Statement& st) {
    sqlite3_stmt* stmt = sqlite::detail::StatementAccess::handle(st);
    std::int64_t i = 0;
    std::int64_t sum = 0;
    holdfast::bench::AllocationCounter allocs(state);
    for (auto _ : state) {
      sqlite3_bind_int64(stmt, 1, (i++ % kRows) + 1);
      if (sqlite3_step(stmt) == SQLITE_ROW) sum += sqlite3_column_int64(stmt, 0);
      sqlite3_reset(stmt);
    }
    benchmark::DoNotOptimize(sum);
    return Status();
  });
  if (!s.ok()) state.SkipWithError(s.to_string().c_str());
}

void BM_Database(benchmark::State& state, bool wal) {
  Env& e = env(wal);
  sqlite::Database& db = e.db->database();
  std::int64_t i = 0;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    auto r = db.query_one<std::int64_t>(e.point, (i++ % kRows) + 1);
    benchmark::DoNotOptimize(r);
  }
}

void BM_Resilient(benchmark::State& state, bool wal) {
  Env& e = env(wal);
  std::int64_t i = 0;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    auto r = e.db->query_one<std::int64_t>(e.point, (i++ % kRows) + 1);
    benchmark::DoNotOptimize(r);
  }
}

void BM_ResilientInScope(benchmark::State& state, bool wal) {
  Env& e = env(wal);
  holdfast::RequestScope request;
  std::int64_t i = 0;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    auto r = e.db->query_one<std::int64_t>(e.point, (i++ % kRows) + 1);
    benchmark::DoNotOptimize(r);
  }
}

// The floor: one raw read with a connection checkout and a checked column read around it.
std::atomic<bool> floor_busy{false};

[[gnu::noinline]] std::int64_t floor_read(sqlite3_stmt* stmt, std::int64_t id) {
  if (floor_busy.exchange(true, std::memory_order_acquire)) std::abort();
  std::int64_t v = 0;
  sqlite3_bind_int64(stmt, 1, id);
  if (sqlite3_step(stmt) == SQLITE_ROW) {
    sqlite3_value* cell = sqlite3_column_value(stmt, 0);
    if (sqlite3_value_type(cell) == SQLITE_INTEGER) v = sqlite3_value_int64(cell);
  }
  sqlite3_reset(stmt);
  floor_busy.store(false, std::memory_order_release);
  return v;
}

// Raw and one variant in alternating blocks of reads, each block timed: drifts in machine
// load (the machines are shared) hit both sides alike, so the ratio is steadier than the
// one between separate runs.
enum class Variant { kDatabase, kResilient, kInScope, kFloor };

void BM_Paired(benchmark::State& state, bool wal, Variant variant) {
  constexpr int kBlock = 32;
  Env& e = env(wal);
  sqlite::Database& db = e.db->database();
  std::optional<holdfast::RequestScope> request;
  if (variant == Variant::kInScope) request.emplace();
  holdfast::Clock& clock = holdfast::Clock::system();
  std::int64_t i = 0;
  std::int64_t sum = 0;
  holdfast::Duration raw_time{};
  holdfast::Duration variant_time{};
  for (auto _ : state) {
    (void)db.with_statement(e.point, [&](sqlite::Statement& st) {
      sqlite3_stmt* stmt = sqlite::detail::StatementAccess::handle(st);
      const holdfast::TimePoint start = clock.now();
      for (int k = 0; k < kBlock; ++k) {
        sqlite3_bind_int64(stmt, 1, (i++ % kRows) + 1);
        if (sqlite3_step(stmt) == SQLITE_ROW) sum += sqlite3_column_int64(stmt, 0);
        sqlite3_reset(stmt);
      }
      raw_time += clock.now() - start;
      return Status();
    });
    if (variant == Variant::kFloor) {
      (void)db.with_statement(e.point, [&](sqlite::Statement& st) {
        sqlite3_stmt* stmt = sqlite::detail::StatementAccess::handle(st);
        const holdfast::TimePoint start = clock.now();
        for (int k = 0; k < kBlock; ++k)
          sum += floor_read(stmt, (i++ % kRows) + 1);
        variant_time += clock.now() - start;
        return Status();
      });
      continue;
    }
    const holdfast::TimePoint start = clock.now();
    for (int k = 0; k < kBlock; ++k) {
      auto r = variant == Variant::kDatabase
                   ? db.query_one<std::int64_t>(e.point, (i++ % kRows) + 1)
                   : e.db->query_one<std::int64_t>(e.point, (i++ % kRows) + 1);
      benchmark::DoNotOptimize(r);
    }
    variant_time += clock.now() - start;
  }
  benchmark::DoNotOptimize(sum);
  const double reads = static_cast<double>(state.iterations()) * kBlock;
  state.counters["raw ns"] = static_cast<double>(raw_time.count()) / reads;
  state.counters["ns"] = static_cast<double>(variant_time.count()) / reads;
  state.counters["x raw"] =
      static_cast<double>(variant_time.count()) / static_cast<double>(raw_time.count());
}

// Prints the usual table, then each variant's time as a ratio of raw's on the same medium.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool aggregate = run.run_type == Run::RT_Aggregate;
      if (aggregate && run.aggregate_name != "median") continue;
      const std::string name = run.run_name.function_name;
      Entry& e = entries_[name];
      if (aggregate) {
        e.median = true;
        e.ns = run.GetAdjustedRealTime();
        e.cpu_ns = run.GetAdjustedCPUTime();
      } else if (!e.median) {
        e.sum += run.GetAdjustedRealTime();
        e.cpu_sum += run.GetAdjustedCPUTime();
        ++e.n;
        e.ns = e.sum / e.n;
        e.cpu_ns = e.cpu_sum / e.n;
      }
      auto it = run.counters.find("allocs/op");
      if (it != run.counters.end()) e.allocs = it->second.value;
      if (auto x = run.counters.find("x raw"); x != run.counters.end()) e.paired = x->second.value;
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-20s %10s %8s %12s %8s %10s\n", "point read", "ns/op", "x raw", "cpu ns/op",
                "x raw", "allocs/op");
    for (const char* medium : {"memory", "wal"}) {
      for (const char* variant : {"floor", "database", "resilient", "in_scope"}) {
        const auto it = entries_.find(std::string("paired_") + variant + "/" + medium);
        if (it != entries_.end()) {
          std::printf("%-26s %8.3f  (alternating blocks with raw)\n", it->first.c_str(),
                      it->second.paired);
        }
      }
      const auto raw = entries_.find(std::string("raw/") + medium);
      if (raw == entries_.end()) continue;
      for (const char* variant : {"raw", "database", "resilient", "in_scope"}) {
        const auto it = entries_.find(std::string(variant) + "/" + medium);
        if (it == entries_.end()) continue;
        std::printf("%-20s %10.1f %8.3f %12.1f %8.3f %10.2f\n", it->first.c_str(), it->second.ns,
                    it->second.ns / raw->second.ns, it->second.cpu_ns,
                    it->second.cpu_ns / raw->second.cpu_ns, it->second.allocs);
      }
    }
  }

 private:
  struct Entry {
    double ns = 0;
    double cpu_ns = 0;
    double sum = 0;
    double cpu_sum = 0;
    int n = 0;
    double allocs = 0;
    double paired = 0;
    bool median = false;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace

int main(int argc, char** argv) {
  for (bool wal : {false, true}) {
    const std::string suffix = wal ? "/wal" : "/memory";
    benchmark::RegisterBenchmark(("raw" + suffix).c_str(), BM_Raw, wal);
    benchmark::RegisterBenchmark(("database" + suffix).c_str(), BM_Database, wal);
    benchmark::RegisterBenchmark(("resilient" + suffix).c_str(), BM_Resilient, wal);
    benchmark::RegisterBenchmark(("in_scope" + suffix).c_str(), BM_ResilientInScope, wal);
    benchmark::RegisterBenchmark(("paired_floor" + suffix).c_str(), BM_Paired, wal,
                                 Variant::kFloor);
    benchmark::RegisterBenchmark(("paired_database" + suffix).c_str(), BM_Paired, wal,
                                 Variant::kDatabase);
    benchmark::RegisterBenchmark(("paired_resilient" + suffix).c_str(), BM_Paired, wal,
                                 Variant::kResilient);
    benchmark::RegisterBenchmark(("paired_in_scope" + suffix).c_str(), BM_Paired, wal,
                                 Variant::kInScope);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
