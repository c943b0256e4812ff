// The PostgreSQL drill's setup: the cluster, then per strategy a database, its panel
// processes (`holdfast panel --pg ...`) and the instance the load and the report use.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "drill_pg_run.hpp"
#include "holdfast/pg/connection.hpp"
#include "http_client.hpp"

namespace holdfast::panel::drill {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// A strategy of the PostgreSQL drill: a panel strategy, through PgBouncer or not, reading
// from the standby or not.
struct PgStrategy {
  std::string name;
  Strategy strategy = Strategy::kHoldfast;
  bool bouncer = false;
  bool replica = false;
};

Result<PgStrategy> parse_pg_strategy(const std::string& name) {
  PgStrategy s;
  s.name = name;
  if (name == "holdfast+pgbouncer") {
    s.bouncer = true;
    s.replica = true;
    return s;
  }
  if (!parse_strategy(name, s.strategy)) {
    return Status(Code::kInvalidArgument,
                  fmt::format("unknown strategy '{}' ({}, holdfast+pgbouncer)", name,
                              baselines::strategy_names()));
  }
  // Only holdfast reads from replicas; the baselines are the origins' code, which has none.
  s.replica = s.strategy == Strategy::kHoldfast;
  return s;
}

// "drill_holdfast_pgbouncer" for "holdfast+pgbouncer".
std::string database_for(const std::string& strategy) {
  std::string db = "drill_" + strategy;
  std::replace_if(
      db.begin(), db.end(), [](char c) { return c == '+' || c == '-'; }, '_');
  return db;
}

// The attempts and calls (summed) and the breakers of the panels on `ports`, from their
// /metrics. A panel that does not answer within 1 s counts with its last reading.
std::function<Sample()> metrics_probe(std::vector<int> ports) {
  struct Last {
    std::uint64_t attempts = 0, calls = 0, primary = 0, standby = 0;
    std::uint8_t open = 0;  // Sample::kReadsOpen, ...
  };
  auto last = std::make_shared<std::vector<Last>>(ports.size());
  return [ports = std::move(ports), last]() {
    Sample s;
    for (std::size_t i = 0; i < ports.size(); ++i) {
      Last& l = (*last)[i];
      http_client::Client http("127.0.0.1", ports[i]);
      http.set_connection_timeout(std::chrono::seconds(1));
      http.set_read_timeout(std::chrono::seconds(1));
      if (auto r = http.Get("/metrics"); r && r->status == 200) {
        l.open = 0;
        std::istringstream lines(r->body);
        for (std::string line; std::getline(lines, line);) {
          const char* value = line.c_str() + line.rfind(' ') + 1;
          if (line.starts_with("holdfast_panel_database_attempts_total{")) {
            l.attempts = std::strtoull(value, nullptr, 10);
          } else if (line.starts_with("holdfast_panel_database_calls_total{")) {
            l.calls = std::strtoull(value, nullptr, 10);
          } else if (line.starts_with("holdfast_panel_server_attempts_total{")) {
            const bool standby = line.find("server=\"standby\"") != std::string::npos;
            (standby ? l.standby : l.primary) = std::strtoull(value, nullptr, 10);
          } else if (line.starts_with("holdfast_panel_pool_backing_off{") && line.ends_with(" 1")) {
            l.open |= line.find("pool=\"writes\"") != std::string::npos ? Sample::kWritesPoolOpen
                                                                        : Sample::kReadsPoolOpen;
          } else if (line.starts_with("holdfast_breaker_state{") && line.ends_with(" 1")) {
            if (line.find("state=\"open\"") != std::string::npos) {
              l.open |= line.find("db=\"club.writes\"") != std::string::npos ? Sample::kWritesOpen
                        : line.find("-replica-") != std::string::npos        ? Sample::kStandbyOpen
                                                                             : Sample::kReadsOpen;
            }
            if (line.find("state=\"half_open\"") != std::string::npos)
              s.breaker = std::max(s.breaker, 1);
          }
        }
      }
      s.attempts += l.attempts;
      s.calls += l.calls;
      s.primary_attempts += l.primary;
      s.standby_attempts += l.standby;
      s.open.push_back(l.open);
      if (l.open != 0) s.breaker = 2;
    }
    return s;
  };
}

// One number from the primary, -1 when it cannot be read.
std::int64_t count_on(const std::string& url, const std::string& sql,
                      const std::vector<std::string>& params = {}) {
  pg::ConnectOptions o;
  o.conninfo = url;
  o.application_name = "holdfast-drill-audit";
  Result<pg::Connection> conn = pg::Connection::open(o);
  if (!conn.ok()) return -1;
  const std::vector<pg::Param> bound(params.begin(), params.end());
  Result<pg::Rows> rows = conn->query(sql, bound);
  if (!rows.ok() || rows->empty()) return -1;
  Result<long long> n = rows->int64(0, 0);
  return n.ok() ? static_cast<std::int64_t>(*n) : -1;
}

// The argv of panel process `i` of strategy `s` on database `db`.
std::vector<std::string> panel_argv(const PgDrillOptions& options, const PgDrill& drill,
                                    const PgStrategy& s, const std::string& db) {
  // holdfast is given both hosts, the primary's first, so a failover finds it the new
  // primary (ADR 0024); the baselines, the origins' code, know one host.
  const auto hosts = [&](const std::string& url) {
    return s.strategy == Strategy::kHoldfast ? drill.app_hosts_url(url) : url;
  };
  std::vector<std::string> argv = {
      options.holdfast_exe,
      "panel",
      "--pg",
      drill.patroni ? drill.patroni->hosts_url(db)
                    : hosts(s.bouncer ? drill.cluster->bouncer_url(db) : drill.app_primary_url(db)),
      "--port",
      "0",
      "--strategy",
      std::string(to_string(s.strategy)),
      "--log-pause",
      fmt::format("{}", options.base.log_pause_s)};
  if (s.replica && !drill.patroni) {
    argv.emplace_back("--pg-replica");
    argv.push_back(drill.app_standby_url(db));
  }
  if (s.bouncer) {
    argv.emplace_back("--pg-pooling");
    argv.emplace_back("transaction");
    // The log store sets its timeouts at connect, which PgBouncer refuses: logs go to the
    // primary directly.
    argv.emplace_back("--pg-logs");
    argv.push_back(hosts(drill.app_primary_url(db)));
  }
  return argv;
}

// Starts the strategy's panel processes: the first alone (it creates the demo club), then
// the others together. Their ports, in order.
Result<std::vector<int>> start_panels(const PgDrillOptions& options, PgDrill& drill,
                                      const PgStrategy& s, const std::string& db) {
  const fs::path dir = fs::path(options.base.out_dir) / "panels";
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::vector<int> ports;
  std::vector<std::pair<std::size_t, std::string>> started;  // panel index, output file
  for (int i = 0; i < options.processes; ++i) {
    const std::string out = (dir / fmt::format("{}-{}.log", db, i + 1)).string();
    Result<ChildProcess> p = ChildProcess::spawn(panel_argv(options, drill, s, db), {}, out);
    if (!p.ok()) return p.status();
    drill.panels.push_back(std::move(*p));
    started.emplace_back(drill.panels.size() - 1, out);
    if (i == 0 || i + 1 == options.processes) {
      for (const auto& [index, file] : started) {
        Result<int> port = wait_for_port(drill.panels[index], file, kPanelReady, seconds(60));
        if (!port.ok()) return Status(port.status()).annotate(s.name);
        ports.push_back(*port);
      }
      started.clear();
    }
  }
  return ports;
}

Result<std::unique_ptr<Instance>> open_pg_instance(const PgDrillOptions& options, PgDrill& drill,
                                                   const PgStrategy& s) {
  const std::string db = database_for(s.name);
  if (Status st = drill.create_database(db); !st.ok()) return st;
  drill.databases.push_back(db);
  Result<std::vector<int>> ports = start_panels(options, drill, s, db);
  if (!ports.ok()) return ports.status();
  auto inst = std::make_unique<Instance>();
  inst->strategy = s.strategy;
  inst->name = s.name;
  inst->standby_reads = s.replica && !drill.patroni;
  inst->ports = *ports;
  inst->probe = metrics_probe(*ports);
  inst->payments_before =
      count_on(drill.writer_url(db), "SELECT coalesce(max(id), 0) FROM payments");
  if (inst->payments_before < 0) {
    return Status(Code::kFailedPrecondition, "cannot read the payments of " + db);
  }
  // On the primary of the moment: after a failover, the promoted standby; with Patroni,
  // the leader it names.
  const PgDrill* owner = &drill;
  inst->count = [owner, db](const std::string& sql, const std::vector<std::string>& params) {
    return count_on(owner->writer_url(db), sql, params);
  };
  return inst;
}

}  // namespace

Status open_pg_instances(DrillRun& run, PgDrill& drill, const PgDrillOptions& options) {
  std::vector<PgStrategy> strategies;
  bool bouncer = false;
  for (const std::string& name : options.strategies) {
    Result<PgStrategy> s = parse_pg_strategy(name);
    if (!s.ok()) return s.status();
    bouncer = bouncer || s->bouncer;
    strategies.push_back(*s);
  }
  Result<std::string> scripts = find_scripts_dir(options.scripts_dir, options.holdfast_exe);
  if (!scripts.ok()) return scripts.status();
  if (options.ha == "patroni") {
    PatroniOptions po;
    po.scripts_dir = *scripts;
    po.work_dir = fs::absolute(fs::path(options.base.out_dir) / "cluster").string();
    po.dcs = options.patroni_dcs;
    po.max_connections =
        std::max(100, 12 * options.processes * static_cast<int>(strategies.size()) + 40);
    Result<std::unique_ptr<PatroniCluster>> patroni = PatroniCluster::start(po);
    if (!patroni.ok()) return patroni.status();
    drill.patroni = std::move(*patroni);
    for (const PgStrategy& s : strategies) {
      Result<std::unique_ptr<Instance>> inst = open_pg_instance(options, drill, s);
      if (!inst.ok()) return inst.status();
      run.instances.push_back(std::move(*inst));
    }
    return Status();
  }
  ClusterOptions co;
  co.work_dir = fs::absolute(fs::path(options.base.out_dir) / "cluster").string();
  // About ten connections per panel process (read and write pools, logs), and room for
  // the drill's own and for the exhaust fault to take.
  co.max_connections =
      std::max(60, 12 * options.processes * static_cast<int>(strategies.size()) + 20);
  co.scripts_dir = *scripts;
  Result<std::unique_ptr<PgCluster>> cluster = PgCluster::start(co);
  if (!cluster.ok()) return cluster.status();
  drill.cluster = std::move(*cluster);
  if (Status st = drill.start_proxies(); !st.ok()) return st;
  if (bouncer) {
    const std::string server = drill.app_primary_url("postgres");
    if (Status st = drill.cluster->start_bouncer(server); !st.ok()) return st;
  }
  for (const PgStrategy& s : strategies) {
    Result<std::unique_ptr<Instance>> inst = open_pg_instance(options, drill, s);
    if (!inst.ok()) return inst.status();
    run.instances.push_back(std::move(*inst));
  }
  return Status();
}

}  // namespace holdfast::panel::drill
