// `holdfast drill`: the origin's incident, replayed against real SQLite files, every
// strategy side by side (see apps/drill/drill.hpp).
//
//   $ holdfast drill                       # 2, 5 and 20 s storms, write and read locks
//   $ holdfast drill --storms 2 --kinds write --workers 4 --out /tmp/d
//   $ holdfast drill --engine postgres     # primary + standby, 3 processes per strategy,
//                                          # fourteen real faults (apps/drill/drill_pg.hpp)
//   $ holdfast drill --engine postgres --ha patroni   # etcd + 3 nodes under Patroni, its faults
#include <fmt/core.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "drill.hpp"
#ifdef HOLDFAST_HAVE_PG
#include "drill_pg.hpp"
#endif
#include "progress.hpp"
#include "safe_print.hpp"
#include "validators.hpp"

namespace holdfast::cli {
namespace {

// The names of every strategy (baselines/strategy.hpp): the drill's default.
std::vector<std::string> every_strategy() {
  std::vector<std::string> names;
  for (baselines::Strategy s : baselines::kAllStrategies)
    names.emplace_back(to_string(s));
  return names;
}

struct DrillArgs {
  panel::DrillOptions options;
  std::vector<double> storms = {2, 5, 20};
  std::vector<std::string> kinds = {"write", "read"};
  std::vector<std::string> strategies = every_strategy();
  std::string engine = "sqlite";
  std::vector<std::string> faults;  // empty: all of them
  int processes = 3;
  double fault_scale = 1.0;
  std::string ha;  // "" or "patroni"
  std::string patroni_dcs = "etcd3";
};

// Prints the table and writes the reports; exits 1 when the run failed.
void report(const panel::DrillOptions& options, const Result<panel::DrillResult>& result) {
  if (!result.ok()) {
    eprint("error: {}\n", result.status().to_string());
    throw CLI::RuntimeError(1);
  }
  fmt::print("{}", panel::drill_table(*result));
  if (Status s = panel::write_drill_reports(options, *result); !s.ok()) {
    eprint("error: {}\n", s.to_string());
    throw CLI::RuntimeError(1);
  }
  fmt::print("\nreports: {0}/drill-report.md, {0}/drill-report.json, {0}/drill-timeline.svg\n",
             options.out_dir);
}

#ifdef HOLDFAST_HAVE_PG
// This program's path, which the panel processes run as.
std::string self_exe() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// While it lives, Ctrl-C, SIGTERM and SIGHUP set `flag` instead of ending the process, so the
// PostgreSQL drill can stop its panels and its cluster first. REQUIRES: made before any
// thread starts (threads inherit the blocked signals).
class StopSignals {
 public:
  explicit StopSignals(std::atomic<bool>& flag) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);  // the terminal went away: clean up all the same
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    watcher_ = std::thread([this, &flag] {
      const timespec tick{0, 200'000'000};
      while (!done_) {
        if (sigtimedwait(&set_, nullptr, &tick) > 0) flag = true;
      }
    });
  }
  ~StopSignals() {
    done_ = true;
    watcher_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  sigset_t set_{};
  sigset_t old_{};
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

// The scale-out drill on PostgreSQL. Strategies default to none, holdfast and
// holdfast+pgbouncer unless --strategies was given.
void run_pg_drill_command(const DrillArgs& args, bool strategies_given) {
  panel::PgDrillOptions options;
  options.base = args.options;
  options.ha = args.ha;
  options.patroni_dcs = args.patroni_dcs;
  if (strategies_given) {
    options.strategies = args.strategies;
  } else if (args.ha == "patroni") {
    options.strategies.clear();  // holdfast only: the baselines cannot follow a new leader
  }
  if (!args.faults.empty()) {
    options.faults = args.faults;
  } else if (args.ha == "patroni") {
    options.faults.clear();  // all of Patroni's
  }
  options.processes = args.processes;
  options.fault_scale = args.fault_scale;
  options.holdfast_exe = self_exe();
  std::atomic<bool> interrupted{false};
  options.cancel = &interrupted;
  const StopSignals signals(interrupted);
  ProgressBar bar(stderr, options.base.progress, "s");
  Result<panel::DrillResult> result = panel::run_drill_pg(
      options,
      [&](double done, double total, const std::string& what) { bar.phase(done, total, what); });
  bar.finish();
  report(options.base, result);
}
#endif

void run_drill_command(DrillArgs& args) {
  panel::DrillOptions options = args.options;
  options.storms.clear();
  for (double s : args.storms) {
    for (const std::string& k : args.kinds) {
      if (k != "write" && k != "read") {
        eprint("error: --kinds takes write and/or read, not '{}'\n", k);
        throw CLI::RuntimeError(2);
      }
      options.storms.push_back(
          {k == "write" ? panel::StormKind::kWrite : panel::StormKind::kRead, s});
    }
  }
  options.strategies.clear();
  for (const std::string& name : args.strategies) {
    panel::Strategy s;
    if (!baselines::parse_strategy(name, s)) {
      eprint("error: unknown strategy '{}' ({})\n", name, baselines::strategy_names());
      throw CLI::RuntimeError(2);
    }
    options.strategies.push_back(s);
  }
  // A bar redrawn in place on a terminal; a line per phase into a log file.
  ProgressBar bar(stderr, options.progress, "s");
  Result<panel::DrillResult> result = panel::run_drill(
      options,
      [&](double done, double total, const std::string& what) { bar.phase(done, total, what); });
  bar.finish();
  report(options, result);
}

}  // namespace

void add_drill_command(CLI::App& app) {
  auto args = std::make_shared<DrillArgs>();
  CLI::App* cmd = app.add_subcommand(
      "drill", "Replay the origin's lock-storm incident, every strategy side by side");
  // Bounds: a storm, warm-up or gap over 10 minutes is a typo, not a drill.
  cmd->add_option("--storms", args->storms, "Storm lengths in seconds")
      ->delimiter(',')
      ->check(seconds_in(600))
      ->capture_default_str();
  cmd->add_option("--kinds", args->kinds, "Storm kinds: write (batch job), read (exclusive lock)")
      ->delimiter(',')
      ->capture_default_str();
  CLI::Option* strategies =
      cmd->add_option("--strategies", args->strategies,
                      "none, naive, backoff, origin-breaker, holdfast; with --engine postgres "
                      "also holdfast+pgbouncer (default there: none,holdfast,holdfast+pgbouncer)")
          ->delimiter(',')
          ->capture_default_str();
  cmd->add_option("--engine", args->engine,
                  "sqlite (lock storms on SQLite files, panels in process) or postgres (a "
                  "primary + hot standby, panel processes, real faults)")
      ->check(CLI::IsMember({"sqlite", "postgres"}))
      ->capture_default_str();
  cmd->add_option("--faults", args->faults,
                  "postgres: write-lock, read-lock, terminate, restart, stop, exhaust, cpu, "
                  "standby-stop, standby-lag, standby-slow, hang, blackhole, standby-hang, "
                  "pooler-pause, failover (default: all, in this order); also failover-async and "
                  "switchover, "
                  "which rebuild the old primary as the standby: any fault may follow them")
      ->delimiter(',');
  cmd->add_option("--ha", args->ha,
                  "postgres: patroni runs the drill on one etcd and three PostgreSQL nodes "
                  "under Patroni (holdfast only, with the nodes' multi-host URL) and its faults: "
                  "patroni-kill, patroni-freeze, patroni-switchover, dcs-down, "
                  "dcs-down-failsafe")
      ->check(CLI::IsMember({"patroni"}));
  cmd->add_option("--patroni-dcs", args->patroni_dcs,
                  "postgres --ha patroni: Patroni's etcd client, etcd3 (v3) or etcd (v2)")
      ->check(CLI::IsMember({"etcd3", "etcd"}))
      ->capture_default_str();
  cmd->add_option("--processes", args->processes, "postgres: panel processes per strategy")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--fault-scale", args->fault_scale,
                  "postgres: every fault's length times this (0.3: a short drill)")
      ->check(CLI::Range(0.01, 10.0))
      ->capture_default_str();
  cmd->add_option("--workers", args->options.workers,
                  "Virtual workers per strategy (postgres: at most 64)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--warmup", args->options.warmup_s, "Seconds before the first storm")
      ->check(seconds_in(600))
      ->capture_default_str();
  cmd->add_option("--log-pause", args->options.log_pause_s,
                  "Seconds holdfast's logger pauses after the database refuses a log batch "
                  "(the origin's is 30; shorter keeps the drill short)")
      ->check(seconds_in(3600))
      ->capture_default_str();
  CLI::Option* gap = cmd->add_option("--gap", args->options.gap_s,
                                     "Quiet seconds after each storm (postgres: 5 unless given)")
                         ->check(seconds_in(600))
                         ->capture_default_str();
  cmd->add_option("--think-ms", args->options.think_ms, "A worker's pause between requests")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  cmd->add_option("--pay-every", args->options.pay_every,
                  "Every Nth request of a worker is a payment")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--seed", args->options.seed, "Seed for the workers' pacing")
      ->capture_default_str();
  cmd->add_option("--out", args->options.out_dir, "Folder for the databases and reports")
      ->check(not_empty("--out"))
      ->capture_default_str();
  cmd->add_flag("!--no-progress", args->options.progress, "No progress bar");
  cmd->callback([args, strategies, gap] {
    if (args->engine == "postgres") {
      if (args->options.workers > 64) {
        // A usage error, like the other bounds (exit 2), not a failed run.
        eprint("error: --workers {} with --engine postgres: at most 64\n", args->options.workers);
        throw CLI::RuntimeError(2);
      }
#ifdef HOLDFAST_HAVE_PG
      // A standby reconnects to a restarted primary within wal_retrieve_retry_interval
      // (5 s): the gap lets it catch up before the next fault.
      if (gap->count() == 0) args->options.gap_s = 5.0;
      run_pg_drill_command(*args, strategies->count() > 0);
      return;
#else
      eprint("error: this build has no PostgreSQL support (libpq)\n");
      throw CLI::RuntimeError(2);
#endif
    }
    (void)strategies;
    (void)gap;
    run_drill_command(*args);
  });
}

}  // namespace holdfast::cli
