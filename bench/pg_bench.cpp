// A pooled point read through holdfast's resilient read path (classification, RequestScope,
// Shield, pool hand-out with its health check, statement_timeout check, READ ONLY session)
// against raw libpq on one connection, over loopback, in one run.
//
// Read the ratios, not the absolute numbers: the machines are shared and noisy. The Paired
// benchmarks alternate the two within each iteration, so both see the same noise, and report
// `ratio` = holdfast time / raw time.
//
// Needs a server: HOLDFAST_TEST_PG_URL (scripts/pg-test-server.sh start prints one). With a
// hot standby (HOLDFAST_TEST_PG_STANDBY_URL) it also reads the standby with the slow-copy
// rule and hedging on (the defaults) against both off, to show what they cost a read the
// standby answers at once (ADR 0041).
#include <benchmark/benchmark.h>
#include <libpq-fe.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "alloc_counter.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"

namespace {

constexpr int kRows = 1000;

struct Fixture {
  std::string url;
  std::string table;
  std::string sql;
  PGconn* raw = nullptr;
  std::unique_ptr<holdfast::pg::Database> db;
  holdfast::pg::Statement stmt;
  bool ok = false;
  // Reads on the standby: the defaults, and with hedging and the slow-copy rule off.
  std::unique_ptr<holdfast::pg::Database> standby, standby_plain;
  bool standby_ok = false;

  Fixture() {
    const char* u = std::getenv("HOLDFAST_TEST_PG_URL");
    if (u == nullptr) return;
    url = u;
    table = "hf_bench_" + std::to_string(::getpid());
    sql = "SELECT v FROM " + table + " WHERE id = $1";
    raw = PQconnectdb(url.c_str());
    if (PQstatus(raw) != CONNECTION_OK) return;
    exec("CREATE TABLE " + table + " (id int PRIMARY KEY, v text NOT NULL)");
    exec("INSERT INTO " + table + " SELECT g, 'court ' || g FROM generate_series(1, " +
         std::to_string(kRows) + ") g");
    exec("ANALYZE " + table);
    if (PQprepare(raw, "raw_point", sql.c_str(), 0, nullptr) == nullptr) return;
    holdfast::pg::DatabaseOptions o;
    o.url = url;
    o.read_connections = 1;
    o.write_connections = 1;
    db = std::make_unique<holdfast::pg::Database>(o);
    auto s = db->prepare(sql);
    if (!s.ok()) return;
    stmt = std::move(*s);
    ok = db->read(sql, {1}).ok() && db->read(stmt, {1}).ok();  // warm: connect, prepare
    if (const char* su = std::getenv("HOLDFAST_TEST_PG_STANDBY_URL"); su != nullptr && ok) {
      o.replica_urls = {su};
      standby = std::make_unique<holdfast::pg::Database>(o);
      o.hedge_budget = 0;
      o.slow_copy_floor = holdfast::Duration::zero();
      standby_plain = std::make_unique<holdfast::pg::Database>(o);
      // The table reaches the standby by streaming: warm until both read it there.
      for (int i = 0; i < 200 && !standby_ok; ++i) {
        standby_ok = standby->read(sql, {1}).ok() && standby_plain->read(sql, {1}).ok();
        if (!standby_ok) ::usleep(10'000);
      }
    }
  }
  ~Fixture() {
    standby.reset();
    standby_plain.reset();
    db.reset();
    if (raw != nullptr) {
      exec("DROP TABLE IF EXISTS " + table);
      PQfinish(raw);
    }
  }
  void exec(const std::string& q) { PQclear(PQexec(raw, q.c_str())); }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

bool skip(benchmark::State& state) {
  if (fixture().ok) return false;
  state.SkipWithError(
      "SKIPPED: no PostgreSQL server (set HOLDFAST_TEST_PG_URL; scripts/pg-test-server.sh start)");
  return true;
}

// The bare operation: PQexecParams with the id as a text parameter, read one value.
[[gnu::noinline]] std::size_t raw_read(int id) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%d", id);
  const char* values[] = {buf};
  PGresult* r =
      PQexecParams(fixture().raw, fixture().sql.c_str(), 1, nullptr, values, nullptr, nullptr, 0);
  const std::size_t n = PQresultStatus(r) == PGRES_TUPLES_OK ? std::strlen(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  return n;
}

[[gnu::noinline]] std::size_t raw_prepared_read(int id) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%d", id);
  const char* values[] = {buf};
  PGresult* r = PQexecPrepared(fixture().raw, "raw_point", 1, values, nullptr, nullptr, 0);
  const std::size_t n = PQresultStatus(r) == PGRES_TUPLES_OK ? std::strlen(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  return n;
}

[[gnu::noinline]] std::size_t holdfast_read(int id) {
  holdfast::RequestScope scope;  // one request
  auto rows = fixture().db->read(fixture().sql, {id});
  return rows.ok() ? rows->text(0, 0).size() : 0;
}

[[gnu::noinline]] std::size_t holdfast_prepared_read(int id) {
  holdfast::RequestScope scope;
  auto rows = fixture().db->read(fixture().stmt, {id});
  return rows.ok() ? rows->text(0, 0).size() : 0;
}

[[gnu::noinline]] std::size_t standby_read(int id) {
  holdfast::RequestScope scope;
  auto rows = fixture().standby->read(fixture().sql, {id});
  return rows.ok() ? rows->text(0, 0).size() : 0;
}

[[gnu::noinline]] std::size_t standby_plain_read(int id) {
  holdfast::RequestScope scope;
  auto rows = fixture().standby_plain->read(fixture().sql, {id});
  return rows.ok() ? rows->text(0, 0).size() : 0;
}

template <std::size_t (*Read)(int)>
void BM_Read(benchmark::State& state) {
  if (skip(state)) return;
  int id = 0;
  holdfast::bench::AllocationCounter allocs(state);
  for (auto _ : state) {
    id = id % kRows + 1;
    benchmark::DoNotOptimize(Read(id));
  }
}
BENCHMARK(BM_Read<raw_read>)->Name("RawLibpq/PQexecParams");
BENCHMARK(BM_Read<holdfast_read>)->Name("Holdfast/read(sql)");
BENCHMARK(BM_Read<raw_prepared_read>)->Name("RawLibpq/PQexecPrepared");
BENCHMARK(BM_Read<holdfast_prepared_read>)->Name("Holdfast/read(Statement)");

// Both in each iteration, timed separately: the ratio under the same noise.
template <std::size_t (*Raw)(int), std::size_t (*Ours)(int)>
void BM_Paired(benchmark::State& state) {
  if (skip(state)) return;
  if ((Raw == standby_plain_read) && !fixture().standby_ok) {
    state.SkipWithError("SKIPPED: no hot standby (set HOLDFAST_TEST_PG_STANDBY_URL)");
    return;
  }
  using Clock = std::chrono::steady_clock;
  Clock::duration raw{};
  Clock::duration ours{};
  int id = 0;
  bool raw_first = true;
  for (auto _ : state) {
    id = id % kRows + 1;
    // Alternate which goes first, so neither always meets the warmer cache.
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(raw_first ? Raw(id) : Ours(id));
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(raw_first ? Ours(id) : Raw(id));
    const auto t2 = Clock::now();
    raw += raw_first ? t1 - t0 : t2 - t1;
    ours += raw_first ? t2 - t1 : t1 - t0;
    raw_first = !raw_first;
  }
  state.counters["raw_us"] = std::chrono::duration<double, std::micro>(raw).count() /
                             static_cast<double>(state.iterations());
  state.counters["holdfast_us"] = std::chrono::duration<double, std::micro>(ours).count() /
                                  static_cast<double>(state.iterations());
  state.counters["ratio"] =
      std::chrono::duration<double>(ours).count() / std::chrono::duration<double>(raw).count();
}
BENCHMARK(BM_Paired<raw_read, holdfast_read>)->Name("Paired/read(sql)_vs_PQexecParams");
BENCHMARK(BM_Paired<raw_prepared_read, holdfast_prepared_read>)
    ->Name("Paired/read(Statement)_vs_PQexecPrepared");
// Here raw_us is the standby read with hedging and the slow-copy rule off, holdfast_us with
// both on (the defaults).
BENCHMARK(BM_Paired<standby_plain_read, standby_read>)
    ->Name("Paired/standby_read_slow_copies_on_vs_off");

}  // namespace

BENCHMARK_MAIN();
