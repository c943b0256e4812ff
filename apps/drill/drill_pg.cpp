#include "drill_pg.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "drill_pg_run.hpp"

namespace holdfast::panel {

const std::vector<std::string>& all_pg_faults() {
  static const std::vector<std::string> kAll = {
      "write-lock", "read-lock", "terminate",    "restart",      "stop",
      "exhaust",    "cpu",       "standby-stop", "standby-lag",  "standby-slow",
      "hang",       "blackhole", "standby-hang", "pooler-pause", "failover"};
  return kAll;
}

const std::vector<std::string>& all_patroni_faults() {
  static const std::vector<std::string> kAll = {
      "patroni-kill", "patroni-freeze", "patroni-switchover", "dcs-down", "dcs-down-failsafe"};
  return kAll;
}

namespace {

bool is_patroni_fault(const std::string& f) {
  const auto& all = all_patroni_faults();
  return std::find(all.begin(), all.end(), f) != all.end();
}

// The faults to run, in the order given, with their scaled lengths.
Result<std::vector<StormSpec>> fault_specs(const PgDrillOptions& options) {
  if (options.faults.empty()) return Status(Code::kInvalidArgument, "no faults to run");
  std::vector<StormSpec> specs;
  const bool ha = options.ha == "patroni";
  for (const std::string& f : options.faults) {
    const double s = drill::default_fault_seconds(f);
    if (s < 0) {
      std::string known;
      for (const std::string& k : all_pg_faults())
        known += (known.empty() ? "" : ", ") + k;
      known += ", failover-async, switchover; with --ha patroni: ";
      for (const std::string& k : all_patroni_faults())
        known += k + (k == all_patroni_faults().back() ? "" : ", ");
      return Status(Code::kInvalidArgument, fmt::format("unknown fault '{}' ({})", f, known));
    }
    if (is_patroni_fault(f) != ha) {
      return Status(Code::kInvalidArgument,
                    ha ? fmt::format("the fault '{}' needs the drill's own primary and standby; "
                                     "with --ha patroni: patroni-kill, patroni-freeze, "
                                     "patroni-switchover, dcs-down, dcs-down-failsafe",
                                     f)
                       : fmt::format("the fault '{}' needs the Patroni cluster (--ha patroni)", f));
    }
    if ((f == "pooler-pause" || f == "switchover") &&
        std::find(options.strategies.begin(), options.strategies.end(), "holdfast+pgbouncer") ==
            options.strategies.end()) {
      return Status(
          Code::kInvalidArgument,
          fmt::format("the {} fault needs the holdfast+pgbouncer strategy (PgBouncer)", f));
    }
    StormSpec spec;
    spec.fault = f;
    spec.seconds = s * options.fault_scale;
    specs.push_back(spec);
  }
  return specs;
}

Status check(const PgDrillOptions& options) {
  if (options.strategies.empty()) return Status(Code::kInvalidArgument, "no strategies to run");
  if (options.processes < 1 || options.processes > 16) {
    return Status(Code::kInvalidArgument, "processes must be between 1 and 16");
  }
  if (options.base.workers < 1 || options.base.workers > 64) {
    return Status(Code::kInvalidArgument, "workers must be between 1 and 64");
  }
  if (!(options.fault_scale > 0 && options.fault_scale <= 10)) {
    return Status(Code::kInvalidArgument, "the fault scale must be in (0, 10]");
  }
  if (!options.ha.empty() && options.ha != "patroni") {
    return Status(Code::kInvalidArgument,
                  fmt::format("unknown HA stack '{}' (patroni, or none)", options.ha));
  }
  if (options.ha == "patroni") {
    for (const std::string& s : options.strategies) {
      if (s != "holdfast") {
        return Status(Code::kInvalidArgument,
                      fmt::format("the HA drill runs holdfast only, not '{}': the baselines know "
                                  "one host and cannot follow a change of leader, and PgBouncer "
                                  "is not part of it",
                                  s));
      }
    }
  }
  if (options.holdfast_exe.empty()) {
    return Status(Code::kInvalidArgument, "the holdfast executable for the panels is not set");
  }
  return Status();
}

}  // namespace

Result<DrillResult> run_drill_pg(
    const PgDrillOptions& given,
    const std::function<void(double, double, const std::string&)>& progress) {
  PgDrillOptions options = given;
  if (options.ha == "patroni") {
    if (options.faults.empty()) options.faults = all_patroni_faults();
    if (options.strategies.empty()) options.strategies = {"holdfast"};
  }
  if (Status s = check(options); !s.ok()) return s;
  Result<std::vector<StormSpec>> faults = fault_specs(options);
  if (!faults.ok()) return faults.status();
  std::error_code ec;
  std::filesystem::create_directories(options.base.out_dir, ec);
  if (ec) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot create {}: {}", options.base.out_dir, ec.message()));
  }
  // Declared first, destroyed last: the cluster outlives the load that talks to it.
  drill::PgDrill pg;
  drill::DrillRun run(options.base);
  run.cancel = options.cancel;
  if (progress) {
    progress(0, 1,
             options.ha == "patroni"
                 ? "starting etcd and three PostgreSQL nodes under Patroni, and the panels"
                 : "starting PostgreSQL (primary and standby) and the panels");
  }
  if (Status s = drill::open_pg_instances(run, pg, options); !s.ok()) return s;
  drill::start_load(run);
  DrillResult result;
  result.engine = "postgres";
  if (Status s = drill::run_pg_faults(run, pg, *faults, progress, result); !s.ok()) return s;
  if (run.cancelled()) return Status(Code::kCancelled, "the drill was interrupted");
  run.stop_load();
  result.seconds = run.since();
  drill::summarize(run, result);
  return result;
}

}  // namespace holdfast::panel
