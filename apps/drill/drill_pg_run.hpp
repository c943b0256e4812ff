// The PostgreSQL drill while it runs (drill_pg.hpp): the cluster and the panel processes it
// owns, and its phases, one file each: setup (drill_pg_setup.cpp), the faults
// (drill_pg_faults.cpp) and run_drill_pg() (drill_pg.cpp). The load and the report are
// the SQLite drill's (drill_load.cpp, drill_report.cpp).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "drill_pg.hpp"
#include "drill_pg_cluster.hpp"
#include "drill_pg_patroni.hpp"
#include "drill_pg_process.hpp"
#include "drill_pg_proxy.hpp"
#include "drill_run.hpp"

namespace holdfast::panel::drill {

// What the drill started. Destroyed in reverse: the panel processes stop (by their pids)
// before the cluster does, and the proxies last.
//
// Each server has a TCP proxy in front of it for the whole drill (the blackhole fault's
// switch: it blackholes the proxy of the primary of the moment), and the panels reach a
// server's writes only through its proxy: their --pg URL (and --pg-logs), and PgBouncer's
// server connections, so holdfast+pgbouncer meets the same blackhole between the pooler
// and the primary; and their reads of the standby (--pg-replica) through the standby's, so
// they meet the standby-slow fault's delay. A change of primary keeps every port (the
// rebuilt standby takes the old primary's), so the proxies and the URLs the panels were
// started with stay right; which server is the primary is the roles' business (PgCluster).
// The standby's replication and the drill's own connections (faults, audit) go to the
// servers directly.
struct PgDrill {
  std::vector<std::pair<int, std::unique_ptr<TcpProxy>>> proxies;  // server port, its proxy
  std::unique_ptr<PgCluster> cluster;
  // The HA drill's (--ha patroni) cluster instead of `cluster`: no proxies, no PgBouncer.
  std::unique_ptr<PatroniCluster> patroni;
  std::vector<ChildProcess> panels;
  std::vector<std::string> databases;  // one per strategy, as run.instances

  PgDrill() = default;
  PgDrill(const PgDrill&) = delete;
  PgDrill& operator=(const PgDrill&) = delete;
  ~PgDrill() { panels.clear(); }

  // Database `db` on the writer of the moment: the primary, or Patroni's leader.
  [[nodiscard]] std::string writer_url(const std::string& db) const {
    return patroni ? patroni->writer_url(db) : cluster->primary_url(db);
  }
  // Creates database `db` (on the standby too, or with Patroni on its synchronous standby).
  Status create_database(const std::string& db) {
    return patroni ? patroni->create_database(db) : cluster->create_database(db);
  }

  // A proxy in front of each server (the cluster is started).
  Status start_proxies() {
    for (const int port : {cluster->primary_port(), cluster->standby_port()}) {
      Result<std::unique_ptr<TcpProxy>> p = TcpProxy::start(port);
      if (!p.ok()) return p.status();
      proxies.emplace_back(port, std::move(*p));
    }
    return Status();
  }
  // The proxy in front of the server on `server_port`. REQUIRES: one of the two.
  [[nodiscard]] TcpProxy& proxy_of(int server_port) const {
    for (const auto& [port, proxy] : proxies) {
      if (port == server_port) return *proxy;
    }
    throw std::logic_error("no proxy in front of port " + std::to_string(server_port));
  }
  // The proxy in front of the primary of the moment.
  [[nodiscard]] TcpProxy& primary_proxy() const { return proxy_of(cluster->primary_port()); }

  // Database `db` on the primary as the panels and PgBouncer reach it: through its proxy.
  [[nodiscard]] std::string app_primary_url(const std::string& db) const {
    return with_port(cluster->primary_url(db), primary_proxy().port());
  }
  // The holdfast strategies' URL: `first` (the primary through its proxy, or PgBouncer),
  // then the standby through its proxy, which a failover promotes (ADR 0024). Both
  // servers, so whichever is the primary after any number of changes is found.
  [[nodiscard]] std::string app_hosts_url(const std::string& first) const {
    return with_second_host(first, proxy_of(cluster->standby_port()).port());
  }
  // The URL the holdfast panels read database `db` from (--pg-replica): both servers,
  // each through its proxy, the standby first, with target_session_attrs=standby (libpq
  // 14+): a connect
  // takes whichever is in recovery, so after a change of primary the reads' new
  // connections reach the rebuilt standby and never the promoted one. (`prefer-standby`
  // would not do: the library connects to one host at a time, and libpq falls back to
  // any server when the one host it was given is not a standby.)
  [[nodiscard]] std::string app_standby_url(const std::string& db) const {
    return with_second_host(
               with_port(cluster->standby_url(db), proxy_of(cluster->standby_port()).port()),
               proxy_of(cluster->primary_port()).port()) +
           "?target_session_attrs=standby";
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
