// holdfast drill --engine postgres: the scale-out drill on a real PostgreSQL primary and
// hot standby, with real faults.
//
// The drill starts its own throwaway cluster (scripts/pg-test-server.sh with a standby, in
// a private state folder; removed afterwards, also on failure). Every strategy gets its own
// database of that cluster and runs as N `holdfast panel --pg` processes, under the SQLite
// drill's load model (drill_load.cpp): workers spread over the processes, each staying with
// one. holdfast reads from the standby (read-your-writes by LSN); `holdfast+pgbouncer` is
// holdfast through a PgBouncer in transaction mode that the drill also starts. At the same
// instants, every strategy meets each fault (kinds below), with quiet gaps between them.
// Attempts are the panels' own counters (GET /metrics); payments are audited by key in
// each database afterwards.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "drill.hpp"
#include "holdfast/result.hpp"

namespace holdfast::panel {

// The faults, in the order they run:
//   write-lock    ACCESS EXCLUSIVE on payments, held in an open transaction, 10 s
//   read-lock     ACCESS EXCLUSIVE on games, 10 s
//   terminate     every client backend terminated every 2 s, for 10 s
//   restart       the primary restarted (pg_ctl stop -m fast, then start)
//   stop          the primary stopped for 15 s
//   exhaust       the primary's slots taken until it says 53300, the panels' backends
//                 terminated and their slots taken too, four given back for all panels to
//                 compete for, 20 s
//   cpu           CPU-burning backends (two per core) for 20 s: a capacity drop
//   standby-stop  the standby stopped for 10 s
//   standby-lag   replay paused on the standby (pg_wal_replay_pause()) for 15 s
[[nodiscard]] const std::vector<std::string>& all_pg_faults();

struct PgDrillOptions {
  // Workers (per strategy, spread over its processes), warm-up, gap, pacing, seed, out_dir
  // and progress as in the SQLite drill; `strategies` and `storms` are not used.
  DrillOptions base;
  // none, naive, backoff, origin-breaker, holdfast, holdfast+pgbouncer.
  std::vector<std::string> strategies = {"none", "holdfast", "holdfast+pgbouncer"};
  std::vector<std::string> faults = all_pg_faults();
  int processes = 3;  // panel processes per strategy
  // Every fault's length is multiplied by this (a short drill for tests).
  double fault_scale = 1.0;
  // The holdfast executable the panels run as (`holdfast panel --pg ...`). REQUIRES: set.
  std::string holdfast_exe;
  // Holds pg-test-server.sh and pgbouncer-test.sh. Empty: $HOLDFAST_SCRIPTS_DIR, then the
  // source tree's scripts/ (compiled in), then ../../../scripts from the executable.
  std::string scripts_dir;
  // When set and it turns true (a signal watcher sets it on Ctrl-C), the drill undoes the
  // fault it is in, stops the load, the panels and the cluster, and returns CANCELLED.
  const std::atomic<bool>* cancel = nullptr;
};

// Runs the drill. A Status when the cluster, a panel process or a fault could not be
// started; the cluster, PgBouncer and every panel process are stopped in any case.
Result<DrillResult> run_drill_pg(
    const PgDrillOptions& options,
    const std::function<void(double, double, const std::string&)>& progress = {});

}  // namespace holdfast::panel
