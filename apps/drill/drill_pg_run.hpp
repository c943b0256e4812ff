// The PostgreSQL drill while it runs (drill_pg.hpp): the cluster and the panel processes it
// owns, and its phases, one file each: setup (drill_pg_setup.cpp), the faults
// (drill_pg_faults.cpp) and run_drill_pg() (drill_pg.cpp). The load and the report are
// the SQLite drill's (drill_load.cpp, drill_report.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "drill_pg.hpp"
#include "drill_pg_cluster.hpp"
#include "drill_pg_process.hpp"
#include "drill_pg_proxy.hpp"
#include "drill_run.hpp"

namespace holdfast::panel::drill {

// What the drill started. Destroyed in reverse: the panel processes stop (by their pids)
// before the cluster does, and the proxy last.
//
// The panels reach the primary only through `proxy` (the blackhole fault's switch), for
// the whole drill: their --pg URL (and --pg-logs), and PgBouncer's server connections, so
// holdfast+pgbouncer meets the same blackhole between the pooler and the primary. The
// standby's replication, the panels' --pg-replica URL and the drill's own connections
// (faults, audit) go to the servers directly.
struct PgDrill {
  std::unique_ptr<TcpProxy> proxy;
  std::unique_ptr<PgCluster> cluster;
  std::vector<ChildProcess> panels;
  std::vector<std::string> databases;  // one per strategy, as run.instances

  PgDrill() = default;
  PgDrill(const PgDrill&) = delete;
  PgDrill& operator=(const PgDrill&) = delete;
  ~PgDrill() { panels.clear(); }

  // Database `db` on the primary as the panels and PgBouncer reach it: through the proxy.
  [[nodiscard]] std::string app_primary_url(const std::string& db) const {
    return with_port(cluster->primary_url(db), proxy->port());
  }
  // The holdfast strategies' URL of database `db`: `first` (the primary through the proxy,
  // or PgBouncer), then the standby, which a failover promotes (ADR 0024).
  [[nodiscard]] std::string app_hosts_url(const std::string& first) const {
    return with_second_host(first, cluster->standby_port());
  }
};

// A fault's default length in seconds (drill_pg.hpp), before PgDrillOptions::fault_scale;
// -1 for an unknown name.
[[nodiscard]] double default_fault_seconds(const std::string& fault);

// Setup: the cluster (and PgBouncer when a strategy needs it), a database per strategy and
// its panel processes, as run.instances with ports, probe and audit.
Status open_pg_instances(DrillRun& run, PgDrill& drill, const PgDrillOptions& options);

// The faults: after the warm-up each fault hits the cluster (so every strategy at once),
// then its gap. Appends each to result.storms and run.storm_wall. On failure the load
// is stopped and the fault undone as far as it can be.
Status run_pg_faults(DrillRun& run, PgDrill& drill, const std::vector<StormSpec>& faults,
                     const Progress& progress, DrillResult& result);

}  // namespace holdfast::panel::drill
