// PostgreSQL on an event loop: 16 point reads in flight on one thread, through
// holdfast::asio::pg::Client (Shield, window, pool, classification) against the same reads on
// 16 bare pg::LoopConnection (libpq's non-blocking API driven by the same loop, no holdfast
// decision), in one run.
//
// Read the ratios, not the absolute numbers: the machines are shared and noisy. Each
// iteration runs one batch of each, alternating which goes first, and `ratio` = holdfast
// time / bare time; `*_reads_per_s` is the batch's throughput.
//
// Needs a server: HOLDFAST_TEST_PG_URL (scripts/pg-test-server.sh start prints one).
#define HOLDFAST_ASIO_BOOST 1
#include <benchmark/benchmark.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "holdfast/adapters/asio_pg.hpp"

namespace {

namespace net = boost::asio;
using holdfast::asio::pg::Client;
using holdfast::pg::Param;
using holdfast::pg::Want;

constexpr int kRows = 1000;
constexpr int kInFlight = 16;

struct Fixture {
  std::string url;
  std::string table;
  std::string sql;
  net::io_context io;
  std::shared_ptr<Client<>> client;
  std::vector<std::unique_ptr<holdfast::asio::pg::detail::Slot>> bare;
  bool ok = false;

  Fixture() {
    const char* u = std::getenv("HOLDFAST_TEST_PG_URL");
    if (u == nullptr) return;
    url = u;
    table = "hf_asio_bench_" + std::to_string(::getpid());
    sql = "SELECT v FROM " + table + " WHERE id = $1";
    PGconn* admin = PQconnectdb(url.c_str());
    if (PQstatus(admin) != CONNECTION_OK) return;
    exec(admin, "CREATE TABLE " + table + " (id int PRIMARY KEY, v text NOT NULL)");
    exec(admin, "INSERT INTO " + table + " SELECT g, 'court ' || g FROM generate_series(1, " +
                    std::to_string(kRows) + ") g");
    exec(admin, "ANALYZE " + table);
    PQfinish(admin);
    holdfast::asio::pg::ClientOptions o;
    o.connect.conninfo = url;
    o.max_connections = kInFlight;
    auto c = Client<>::open(io.get_executor(), o);
    if (!c.ok()) return;
    client = std::move(*c);
    for (int i = 0; i < kInFlight; ++i) {
      auto slot = std::make_unique<holdfast::asio::pg::detail::Slot>(io.get_executor());
      auto started = holdfast::pg::LoopConnection::start(o.connect);
      if (!started.ok()) return;
      slot->conn = std::move(*started);
      bare.push_back(std::move(slot));
    }
    // Connect the bare ones and warm the client's pool: both start with open connections.
    bool connected = true;
    for (auto& s : bare) {
      net::co_spawn(
          io,
          [&s, &connected]() -> net::awaitable<void> {
            for (Want w = s->conn.want(); w != Want::kNothing; w = s->conn.connect_step()) {
              co_await holdfast::asio::pg::detail::ready(*s, w, holdfast::TimePoint::max(), true);
            }
            if (!s->conn.connect_status().ok()) connected = false;
          },
          net::detached);
    }
    io.run();
    io.restart();
    ok = connected && batch_client() > 0 && batch_bare() > 0;
  }
  ~Fixture() {
    client.reset();
    bare.clear();
    PGconn* admin = PQconnectdb(url.c_str());
    if (PQstatus(admin) == CONNECTION_OK) exec(admin, "DROP TABLE IF EXISTS " + table);
    PQfinish(admin);
  }
  static void exec(PGconn* c, const std::string& q) { PQclear(PQexec(c, q.c_str())); }

  // One read on a bare connection, driven by the loop: true when it found its row.
  net::awaitable<bool> bare_read(holdfast::asio::pg::detail::Slot& s, std::span<const Param> id) {
    for (Want w = s.conn.send(sql, id); w != Want::kNothing; w = s.conn.step()) {
      co_await holdfast::asio::pg::detail::ready(s, w, holdfast::TimePoint::max(), false);
    }
    auto r = s.conn.result();
    co_return r.ok() && r->size() == 1;
  }

  // kInFlight reads at once through the Client; returns how many succeeded.
  int batch_client() {
    int good = 0;
    for (int i = 0; i < kInFlight; ++i) {
      net::co_spawn(
          io,
          [this, i, &good]() -> net::awaitable<void> {
            holdfast::RequestContext request;
            const Param id[] = {Param(i * 37 % kRows + 1)};
            auto r =
                co_await client->async_read(request, "bench.point", sql, id, net::use_awaitable);
            if (r.ok() && r->size() == 1) ++good;
            if (!r.ok() && last_failure.empty()) last_failure = r.status().to_string();
          },
          net::detached);
    }
    io.run();
    io.restart();
    return good;
  }
  std::string last_failure;
  // Sustained: kInFlight coroutines, each reading `each` times in a row, on the one thread.
  int sustained(bool through_client, int each) {
    int good = 0;
    for (int i = 0; i < kInFlight; ++i) {
      net::co_spawn(
          io,
          [this, i, each, through_client, &good]() -> net::awaitable<void> {
            auto& s = *bare[static_cast<std::size_t>(i)];
            for (int k = 0; k < each; ++k) {
              const Param id[] = {Param((i * 37 + k) % kRows + 1)};
              if (through_client) {
                holdfast::RequestContext request;
                auto r = co_await client->async_read(request, "bench.point", sql, id,
                                                     net::use_awaitable);
                if (r.ok() && r->size() == 1) ++good;
              } else if (co_await bare_read(s, id)) {
                ++good;
              }
            }
          },
          net::detached);
    }
    io.run();
    io.restart();
    return good;
  }
  // The same reads on the bare connections, one each.
  int batch_bare() {
    int good = 0;
    for (int i = 0; i < kInFlight; ++i) {
      net::co_spawn(
          io,
          [this, i, &good]() -> net::awaitable<void> {
            const Param id[] = {Param(i * 37 % kRows + 1)};
            if (co_await bare_read(*bare[static_cast<std::size_t>(i)], id)) ++good;
          },
          net::detached);
    }
    io.run();
    io.restart();
    return good;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_PairedBatch(benchmark::State& state) {
  if (!fixture().ok) {
    state.SkipWithError(
        "SKIPPED: no PostgreSQL server (set HOLDFAST_TEST_PG_URL; scripts/pg-test-server.sh "
        "start)");
    return;
  }
  using Clock = std::chrono::steady_clock;
  Clock::duration bare{};
  Clock::duration ours{};
  bool bare_first = true;
  int bare_failed = 0;
  int holdfast_failed = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const int a = bare_first ? fixture().batch_bare() : fixture().batch_client();
    const auto t1 = Clock::now();
    const int b = bare_first ? fixture().batch_client() : fixture().batch_bare();
    const auto t2 = Clock::now();
    bare_failed += kInFlight - (bare_first ? a : b);
    holdfast_failed += kInFlight - (bare_first ? b : a);
    bare += bare_first ? t1 - t0 : t2 - t1;
    ours += bare_first ? t2 - t1 : t1 - t0;
    bare_first = !bare_first;
  }
  const double n = static_cast<double>(state.iterations()) * kInFlight;
  state.counters["bare_reads_per_s"] = n / std::chrono::duration<double>(bare).count();
  state.counters["holdfast_reads_per_s"] = n / std::chrono::duration<double>(ours).count();
  state.counters["ratio"] =
      std::chrono::duration<double>(ours).count() / std::chrono::duration<double>(bare).count();
  // A read the Shield sheds (its concurrency limit judged 16 in flight too many) fails fast
  // with retry_after: counted here, and in holdfast_reads_per_s like any answer.
  if (!fixture().last_failure.empty())
    std::fprintf(stderr, "a holdfast read: %s\n", fixture().last_failure.c_str());
  state.counters["bare_failed"] = bare_failed;
  state.counters["holdfast_failed"] = holdfast_failed;
  state.counters["holdfast_failed_pct"] =
      100.0 * holdfast_failed / (static_cast<double>(state.iterations()) * kInFlight);
}
BENCHMARK(BM_PairedBatch)->Name("Paired/Client.async_read_x16_vs_LoopConnection_x16");

// Sustained load, one side per benchmark: 16 coroutines reading back to back on one thread
// (compare with pgbench -c16 -j1 sending the same statement: docs/benchmarks.md).
template <bool ThroughClient>
void BM_Sustained(benchmark::State& state) {
  if (!fixture().ok) {
    state.SkipWithError("SKIPPED: no PostgreSQL server (set HOLDFAST_TEST_PG_URL)");
    return;
  }
  constexpr int kEach = 100;
  int failed = 0;
  for (auto _ : state)
    failed += kInFlight * kEach - fixture().sustained(ThroughClient, kEach);
  state.counters["reads_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kInFlight * kEach, benchmark::Counter::kIsRate);
  state.counters["failed"] = failed;
}
BENCHMARK(BM_Sustained<false>)->Name("Sustained/LoopConnection_x16")->UseRealTime();
BENCHMARK(BM_Sustained<true>)->Name("Sustained/Client.async_read_x16")->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
