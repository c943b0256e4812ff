// The drill while it runs (drill.hpp): one Instance per strategy, the load's threads, and
// the phases run_drill() strings together, one file each: setup (drill_setup.cpp), load
// (drill_load.cpp), storms (drill_storms.cpp) and the report (drill_report.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "club_store.hpp"
#include "drill.hpp"
#include "logging.hpp"
#include "server.hpp"

namespace holdfast::panel::drill {

using Progress = std::function<void(double, double, const std::string&)>;

// A request counts as served during a storm when it got a fresh page within this long: the
// origins' RETRY_BUDGET_MS, what a user waits before giving up.
constexpr double kServedWithinMs = 6000.0;

// The load client gives a request up when no byte of its answer came for this long
// (the client's read timeout); it is then counted as unanswered.
constexpr std::chrono::seconds kNoAnswerAfter{30};

// An answer this fast is what a silence fault's requests should get once the fault's
// first second has passed (DESIGN.md section 10: answered in milliseconds).
constexpr double kFastAnswerMs = 100.0;
// The fault's first second, when a strategy may still be learning the server is silent.
constexpr double kFastAnswersFromS = 1.0;

// One request a worker made.
struct Record {
  double start_s;  // since the load began
  double latency_ms;
  int status;  // 0: no answer (closed, reset, or kNoAnswerAfter without a byte)
  bool stale;
  // A fresh page, the first after the worker's own confirmed payment, whose count of
  // today's payments does not include it.
  bool stale_after_write = false;
  int process = 0;   // the panel process it went to (Instance::ports' index)
  bool pay = false;  // a payment (else a schedule page)
};

// The sampler's reading of one strategy's panel (or panel processes, summed).
struct Sample {
  double t = 0;
  std::uint64_t attempts = 0;
  int breaker = 0;  // the most open of every process's breakers
  std::uint64_t calls = 0;
  // PostgreSQL: the attempts that reached the primary and the standby (summed).
  std::uint64_t primary_attempts = 0;
  std::uint64_t standby_attempts = 0;
  // Per process (Instance::ports' order; one for an in-process panel), its open breakers:
  // the Shields' (kReadsOpen, kWritesOpen; both when an in-process panel's is), the
  // primary's pools' breakers on connects (kReadsPoolOpen, kWritesPoolOpen: backing off
  // after failed connects, so a request that finds no idle connection is answered at once)
  // and the standby's Shield (kStandbyOpen; PostgreSQL holdfast only).
  std::vector<std::uint8_t> open;
  static constexpr std::uint8_t kReadsOpen = 1, kWritesOpen = 2, kReadsPoolOpen = 4,
                                kWritesPoolOpen = 8, kStandbyOpen = 16;
};

// One strategy's panel (in process, or `ports` of panel processes), its workers and what
// they saw.
struct Instance {
  Strategy strategy{};
  std::string name;            // the strategy's name in the report
  std::string path;            // the SQLite file; empty on PostgreSQL
  bool standby_reads = false;  // its pages read from a standby when it has their writes
  // Panel processes (PostgreSQL): workers talk to them in turn (process_for()); `probe`
  // reads their attempts and breaker state over HTTP and `count` counts rows in the
  // strategy's database.
  std::vector<int> ports;
  std::function<Sample()> probe;
  // One count(*) from the strategy's database (`path` when unset): text parameters $1, $2
  // (in order of appearance); -1 when it cannot be read.
  std::function<std::int64_t(const std::string& sql, const std::vector<std::string>& params)> count;
  std::atomic<std::int64_t> stale_reads{0};  // Record::stale_after_write
  std::int64_t payments_before = 0;          // the highest payment id of the demo data
  std::unique_ptr<ClubStore> store;
  PanelLogging logging;
  std::unique_ptr<PanelServer> server;
  std::mutex mutex;  // guards records and samples while the load runs
  std::vector<Record> records;
  std::vector<Sample> samples;
  std::atomic<std::int64_t> payments_sent{0};
  // The payments answered 200 or 201 (guarded by mutex; joined at the end like records):
  // after a failover, each key must be on the new primary.
  struct Confirmed {
    std::string key;
    double answered_s;  // since the load began
  };
  std::vector<Confirmed> confirmed_keys;

  // The port of panel process `p` (process_for()).
  [[nodiscard]] int port_of(int p) const {
    return ports.empty() ? server->port() : ports[static_cast<std::size_t>(p)];
  }
  // The process that worker `w`'s request `n` goes to: the next one each time, as behind a
  // load balancer without sticky sessions, so a page often comes from another process than
  // the payment before it (the hf_wal cookie must carry the write's position there).
  [[nodiscard]] int process_for(int w, std::int64_t n) const {
    return ports.empty() ? 0 : static_cast<int>((w + n) % static_cast<std::int64_t>(ports.size()));
  }
  [[nodiscard]] int processes() const { return ports.empty() ? 1 : static_cast<int>(ports.size()); }

  // Closes the idle connections of the store and the log sinks.
  void close_idle_connections();
  // 0 closed, 1 half-open, 2 open: the more open of the read and write breakers.
  int breaker_state();
};

// The UTC wall-clock stamps of one storm, which bound its rows in the logs table.
struct StormWall {
  std::string from, to;
};

struct DrillRun {
  using Steady = std::chrono::steady_clock;

  explicit DrillRun(const DrillOptions& drill_options) : options(drill_options) {}
  // Stops the load (stop_load()) if it still runs.
  ~DrillRun() { stop_load(); }
  DrillRun(const DrillRun&) = delete;
  DrillRun& operator=(const DrillRun&) = delete;

  // Seconds since the load began (start_load()).
  [[nodiscard]] double since() const {
    return std::chrono::duration<double>(Steady::now() - t0).count();
  }
  // Tells every load thread to stop and joins them. Idempotent.
  void stop_load() {
    stop = true;
    for (auto& th : threads) {
      if (th.joinable()) th.join();
    }
  }

  // True once the caller asked the drill to stop early (`cancel`, may be null).
  [[nodiscard]] bool cancelled() const { return cancel != nullptr && cancel->load(); }

  const DrillOptions& options;
  const std::atomic<bool>* cancel = nullptr;
  std::vector<std::unique_ptr<Instance>> instances;
  Steady::time_point t0 = Steady::now();
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::vector<StormWall> storm_wall;  // one per storm run
};

// "write" or "read".
[[nodiscard]] std::string kind_name(StormKind k);

// Waits in 50 ms steps, reporting progress against the drill's planned length.
class Pacer {
 public:
  Pacer(const DrillRun& run, const std::vector<StormSpec>& storms, const Progress& progress,
        double setup_s = 0)
      : run_(run), progress_(progress), total_(run.options.warmup_s + setup_s) {
    for (const StormSpec& s : storms)
      total_ += s.seconds + run.options.gap_s;
  }

  // Until `t` seconds since the load began, or the drill is cancelled; `tick` runs at each
  // step.
  void wait_until(double t, const std::string& what, const std::function<void()>& tick = {}) {
    while (run_.since() < t && !run_.cancelled()) {
      report(what);
      if (tick) tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  void report(const std::string& what) const {
    if (progress_) progress_(run_.since(), total_, what);
  }

 private:
  const DrillRun& run_;
  const Progress& progress_;
  double total_;
};

// Setup: a fresh database with the demo club, its logging and a started panel per
// strategy, in run.instances.
Status open_instances(DrillRun& run, const std::string& today);

// Load: sets run.t0 and starts run.threads: the virtual workers of every panel, a batch
// writer per database, and the sampler.
void start_load(DrillRun& run);

// Storms: after the warm-up, each storm on every file at once, then its gap; then waits
// for paused log sinks to resume. Appends each storm to result.storms (without the
// strategies' figures) and run.storm_wall. On failure the load is stopped.
Status run_storms(DrillRun& run, const std::vector<StormSpec>& storms, const Progress& progress,
                  DrillResult& result);

// Report: the figures of each storm period and the timeline from what the instances saw;
// writes every request to drill-requests.csv in options.out_dir.
// REQUIRES: the load stopped; result.seconds set.
void summarize(const DrillRun& run, DrillResult& result);

}  // namespace holdfast::panel::drill
