// `holdfast drill`: the origin's incident, replayed against real SQLite files, every
// strategy side by side (see apps/panel/drill.hpp).
//
//   $ holdfast drill                       # 2, 5 and 20 s storms, write and read locks
//   $ holdfast drill --storms 2 --kinds write --workers 4 --out /tmp/d
#include <fmt/core.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "drill.hpp"
#include "progress.hpp"
#include "validators.hpp"

namespace holdfast::cli {
namespace {

struct DrillArgs {
  panel::DrillOptions options;
  std::vector<double> storms = {2, 5, 20};
  std::vector<std::string> kinds = {"write", "read"};
  std::vector<std::string> strategies = {"none", "naive", "backoff", "origin-breaker", "holdfast"};
};

void run_drill_command(DrillArgs& args) {
  panel::DrillOptions options = args.options;
  options.storms.clear();
  for (double s : args.storms) {
    for (const std::string& k : args.kinds) {
      if (k != "write" && k != "read") {
        fmt::print(stderr, "error: --kinds takes write and/or read, not '{}'\n", k);
        throw CLI::RuntimeError(2);
      }
      options.storms.push_back(
          {k == "write" ? panel::StormKind::kWrite : panel::StormKind::kRead, s});
    }
  }
  options.strategies.clear();
  for (const std::string& name : args.strategies) {
    panel::Strategy s;
    if (!panel::parse_strategy(name, s)) {
      fmt::print(stderr, "error: unknown strategy '{}'\n", name);
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
  if (!result.ok()) {
    fmt::print(stderr, "error: {}\n", result.status().to_string());
    throw CLI::RuntimeError(1);
  }
  fmt::print("{}", panel::drill_table(*result));
  if (Status s = panel::write_drill_reports(options, *result); !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.to_string());
    throw CLI::RuntimeError(1);
  }
  fmt::print("\nreports: {0}/drill-report.md, {0}/drill-report.json, {0}/drill-timeline.svg\n",
             options.out_dir);
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
  cmd->add_option("--strategies", args->strategies,
                  "none, naive, backoff, origin-breaker, holdfast")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--workers", args->options.workers, "Virtual workers per strategy")
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
  cmd->add_option("--gap", args->options.gap_s, "Quiet seconds after each storm")
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
  cmd->callback([args] { run_drill_command(*args); });
}

}  // namespace holdfast::cli
