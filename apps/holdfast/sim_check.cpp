// `holdfast sim --policy FILE` and `--check` (sim_check.hpp).
#include "sim_check.hpp"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "holdfast/policy_file.hpp"
#include "progress.hpp"
#include "safe_print.hpp"

namespace holdfast::cli {
namespace policy_check {

using std::chrono::seconds;

// What --check asks of a policy (issue 16): service back after the trigger (not
// metastable), within kMaxRecovery, with at most kMaxAmplification database attempts per
// request during the trigger.
constexpr double kMaxRecoveryS = 2.0;
constexpr double kMaxAmplification = 1.1;
// In the brownout a fifth of the attempts is refused at random while the database has
// capacity to spare: retrying them is the point, and the library's defaults make 1.25
// attempts per request there. The bound is the simulator's own target for it (SimTargets).
constexpr double kMaxBrownoutAmplification = 1.3;
// The classes (ADR 0035), judged on the spike of issue 44: load x3 with 10 % critical, 80 %
// normal and 10 % background requests. Critical requests keep their places (at least
// 99.5 % served) and background is shed before normal.
constexpr double kMinCriticalServedPct = 99.5;
constexpr const char* kClassesName = "spike+classes";
// The tails of issue 44: in the overloads (spike, capacity drop, many clients) the served
// requests of the trigger answered within 100 ms at p99, the shed ones told within 20 ms, at
// 0.95 or more of the physical limit; the brownout serves 98 % or more.
constexpr double kMaxServedP99Ms = 100.0;
constexpr double kMaxShedP99Ms = 20.0;
constexpr double kMinEfficiency = 0.95;
constexpr double kMinBrownoutServed = 0.98;
// Stragglers (1 % of attempts 50 times slower): the served p99.9 at most 3 times that of the
// same policy on a quiet database, for at most 5 % more database attempts than without
// hedging. A slow copy (one standby of two 2.5 times slower): fewer reads go to it than to the
// primary, and the p99 is no worse than without hedging and ejection.
constexpr double kMaxStragglerP999Ratio = 3.0;
constexpr double kMaxHedgeCost = 1.05;
constexpr const char* kStragglersName = "stragglers";
constexpr const char* kSlowCopyName = "slow-copy";

// The built-in scenario, shortened to seconds of wall time: the trigger (of its built-in
// length) starts after 5 s, and a run of 5 good seconds must start within 10 s of its end
// (else: metastable).
sim::Scenario check_scenario(std::string_view name) {
  sim::Scenario s = *sim::builtin_scenario(name);
  s.trigger.start = seconds(5);
  s.recovery_hold = seconds(5);
  s.metastable_after = seconds(10);
  s.duration = s.trigger.end() + s.metastable_after + s.recovery_hold;
  return s;
}

// The spike with classes, shortened as check_scenario() shortens the others.
sim::Scenario classes_scenario() {
  sim::Scenario s = check_scenario("spike");
  s.name = kClassesName;
  s.trigger.factor = 3.0;
  s.class_mix = sim::ClassMix{0.1, 0.8, 0.1};
  return s;
}

// The spike's stage with 1 % of the attempts 50 times slower (stragglers), shortened.
sim::Scenario stragglers_scenario() {
  sim::Scenario s = check_scenario("spike");
  s.name = kStragglersName;
  s.trigger.kind = sim::TriggerKind::kStragglers;
  s.trigger.straggler_share = 0.01;
  s.trigger.factor = 50.0;
  return s;
}

// The spike's stage on a primary and a standby; the standby 2.5 times slower, shortened.
sim::Scenario slow_copy_scenario() {
  sim::Scenario s = check_scenario("spike");
  s.name = kSlowCopyName;
  s.database.copies = 2;
  s.trigger.kind = sim::TriggerKind::kSlowCopy;
  return s;
}

bool overload(const sim::Scenario& s) {
  return s.name == "spike" || s.name == "capacity-drop" || s.name == "many-clients";
}

double amplification_bound(const sim::Scenario& s) {
  return s.trigger.kind == sim::TriggerKind::kBrownout ? kMaxBrownoutAmplification
                                                       : kMaxAmplification;
}

// "" when the report meets every rule; otherwise why not, in one line.
std::string verdict(const sim::Scenario& s, const sim::Report& r) {
  std::vector<std::string> why;
  if (r.metastable || !r.recovery_s) {
    why.push_back(fmt::format("metastable: service not back within {:g} s after the trigger",
                              std::chrono::duration<double>(s.metastable_after).count()));
  } else if (*r.recovery_s > kMaxRecoveryS) {
    why.push_back(
        fmt::format("recovery took {:.0f} s (at most {:g} s)", *r.recovery_s, kMaxRecoveryS));
  }
  const double bound = amplification_bound(s);
  if (r.amplification_during_trigger > bound) {
    why.push_back(fmt::format("{:.2f} attempts per request during the trigger (at most {:.1f})",
                              r.amplification_during_trigger, bound));
  }
  if (overload(s)) {
    if (r.p99_during_trigger_ms > kMaxServedP99Ms) {
      why.push_back(fmt::format("served p99 {:.0f} ms during the trigger (at most {:g} ms)",
                                r.p99_during_trigger_ms, kMaxServedP99Ms));
    }
    if (r.failed_p99_ms > kMaxShedP99Ms) {
      why.push_back(fmt::format("shed requests told after {:.0f} ms at p99 (at most {:g} ms)",
                                r.failed_p99_ms, kMaxShedP99Ms));
    }
    if (r.efficiency < kMinEfficiency) {
      why.push_back(fmt::format("efficiency {:.3f} (at least {:g})", r.efficiency, kMinEfficiency));
    }
  }
  if (s.trigger.kind == sim::TriggerKind::kBrownout &&
      r.goodput_during_trigger < kMinBrownoutServed) {
    why.push_back(fmt::format("{:.1f}% served during the brownout (at least {:g}%)",
                              r.goodput_during_trigger * 100.0, kMinBrownoutServed * 100.0));
  }
  if (r.classes) {
    const auto& c = *r.classes;
    const double critical = c[static_cast<std::size_t>(Priority::kCritical)].served_pct;
    const double normal = c[static_cast<std::size_t>(Priority::kNormal)].served_pct;
    const double background = c[static_cast<std::size_t>(Priority::kBackground)].served_pct;
    if (critical < kMinCriticalServedPct) {
      why.push_back(
          fmt::format("critical requests {:.1f}% served during the trigger (at least {:g}%)",
                      critical, kMinCriticalServedPct));
    }
    if (background > normal) {
      why.push_back(
          fmt::format("background {:.1f}% served, more than normal ({:.1f}%): it must "
                      "be shed first",
                      background, normal));
    }
  }
  std::string line;
  for (const std::string& w : why)
    line += (line.empty() ? "" : "; ") + w;
  return line;
}

// The hedging targets, from three runs each: "" when met, else why not.
std::string tails_verdict(const sim::Strategy& strategy, std::string* summary) {
  sim::Strategy plain = strategy;
  plain.hedge = false;
  plain.eject = false;
  const sim::Scenario stragglers = stragglers_scenario();
  sim::Scenario quiet = stragglers;
  quiet.trigger.kind = sim::TriggerKind::kNone;
  const sim::Scenario slow = slow_copy_scenario();
  Result<sim::Report> hedged = sim::run(stragglers, strategy);
  Result<sim::Report> unhedged = sim::run(stragglers, plain);
  Result<sim::Report> calm = sim::run(quiet, strategy);
  Result<sim::Report> slow_hedged = sim::run(slow, strategy);
  Result<sim::Report> slow_plain = sim::run(slow, plain);
  for (const Result<sim::Report>* r : {&hedged, &unhedged, &calm, &slow_hedged, &slow_plain}) {
    if (!r->ok()) return r->status().to_string();
  }
  std::vector<std::string> why;
  const double ratio = hedged->p999_during_trigger_ms / std::max(calm->p999_ms, 1e-3);
  const double cost = static_cast<double>(hedged->db_attempts) /
                      static_cast<double>(std::max<std::uint64_t>(unhedged->db_attempts, 1));
  if (ratio > kMaxStragglerP999Ratio) {
    why.push_back(
        fmt::format("stragglers: p99.9 {:.0f} ms, {:.1f}x the quiet run's {:.0f} ms (at "
                    "most {:g}x)",
                    hedged->p999_during_trigger_ms, ratio, calm->p999_ms, kMaxStragglerP999Ratio));
  }
  if (cost > kMaxHedgeCost) {
    why.push_back(
        fmt::format("stragglers: {:.3f}x the database attempts of no hedging (at most "
                    "{:g}x)",
                    cost, kMaxHedgeCost));
  }
  const std::vector<std::uint64_t>& by_copy = slow_hedged->attempts_by_copy;
  if (by_copy.size() != 2 || by_copy[1] >= by_copy[0]) {
    why.push_back("slow-copy: the slow standby got as many reads as the primary or more");
  }
  if (slow_hedged->p99_during_trigger_ms > slow_plain->p99_during_trigger_ms) {
    why.push_back(fmt::format("slow-copy: p99 {:.0f} ms, above the {:.0f} ms of no hedging",
                              slow_hedged->p99_during_trigger_ms,
                              slow_plain->p99_during_trigger_ms));
  }
  *summary = fmt::format(
      "stragglers p99.9 {:.0f} ms ({:.1f}x quiet), {:.3f}x the attempts of no hedging; slow-copy "
      "p99 {:.0f} ms (no hedging {:.0f} ms), reads primary/slow standby {}/{}",
      hedged->p999_during_trigger_ms, ratio, cost, slow_hedged->p99_during_trigger_ms,
      slow_plain->p99_during_trigger_ms, by_copy.empty() ? 0 : by_copy[0],
      by_copy.size() < 2 ? 0 : by_copy[1]);
  std::string line;
  for (const std::string& w : why)
    line += (line.empty() ? "" : "; ") + w;
  return line;
}

}  // namespace policy_check

std::optional<PolicyChoice> choose_policy(const std::string& flag) {
  PolicyChoice choice;
  if (!flag.empty()) {
    choice.path = flag;
  } else if (std::optional<std::string> env = policy_path_from_environment()) {
    choice.path = *env;
  } else {
    return std::nullopt;
  }
  Result<Shield::Options> options = load_policy(choice.path);
  if (!options.ok()) {
    eprint("holdfast sim: policy: {}\n", options.status().message());
    throw CLI::RuntimeError(2);
  }
  choice.options = std::move(*options);
  return choice;
}

sim::Strategy with_policy(sim::Strategy base, const Shield::Options& options) {
  base.options = options;
  base.max_attempts = options.reads.max_attempts();
  base.window = options.reads.window();
  return base;
}

int check_policy(const PolicyChoice& policy, bool progress) {
  using namespace policy_check;
  sim::Strategy strategy = with_policy(sim::Strategy::holdfast(), policy.options);
  strategy.name = "policy";
  const auto builtin = sim::builtin_scenario_names();
  std::vector<sim::Scenario> scenarios;
  for (std::string_view name : builtin)
    scenarios.push_back(check_scenario(name));
  scenarios.push_back(classes_scenario());
  fmt::print(
      "policy {}: {} built-in scenarios, the spike with classes, stragglers and a slow copy, seed "
      "1; each must recover within {:g} s, with at most {:.1f} attempts per request during the "
      "trigger ({:.1f} in the brownout, with {:g}% served); in the overloads the served p99 within "
      "{:g} ms, the shed told within {:g} ms, efficiency at least {:g}; with classes, at least "
      "{:g}% of critical requests served and background shed before normal; stragglers' p99.9 "
      "within {:g}x a quiet run's for at most {:g}x the attempts of no hedging; reads avoid a "
      "slow copy\n",
      policy.path, builtin.size(), kMaxRecoveryS, kMaxAmplification, kMaxBrownoutAmplification,
      kMinBrownoutServed * 100.0, kMaxServedP99Ms, kMaxShedP99Ms, kMinEfficiency,
      kMinCriticalServedPct, kMaxStragglerP999Ratio, kMaxHedgeCost);
  std::fflush(stdout);
  ProgressBar bar(stderr, progress);
  int failed = 0;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    const sim::Scenario& s = scenarios[i];
    const std::string& name = s.name;
    bar.phase(static_cast<double>(i), static_cast<double>(scenarios.size()), "scenario " + name);
    Result<sim::Report> r = sim::run(s, strategy);
    if (!r.ok()) {
      bar.finish();
      eprint("holdfast sim: {}: {}\n", name, r.status().to_string());
      return 1;
    }
    const std::string why = verdict(s, *r);
    bar.clear();
    if (why.empty()) {
      std::string classes;
      if (r->classes) {
        for (std::size_t c = 0; c < r->classes->size(); ++c) {
          classes += fmt::format("{}{} {:.1f}%", c == 0 ? "; served: " : ", ",
                                 to_string(static_cast<Priority>(c)), (*r->classes)[c].served_pct);
        }
      }
      fmt::print(
          "  ok    {:<14} recovery {:.0f} s, {:.2f} attempts per request during the "
          "trigger{}\n",
          name, *r->recovery_s, r->amplification_during_trigger, classes);
    } else {
      ++failed;
      fmt::print("  FAIL  {:<14} {}\n", name, why);
    }
    std::fflush(stdout);
  }
  bar.phase(static_cast<double>(scenarios.size()), static_cast<double>(scenarios.size() + 1),
            "stragglers and a slow copy");
  std::string summary;
  const std::string tails = tails_verdict(strategy, &summary);
  bar.clear();
  if (tails.empty()) {
    fmt::print("  ok    {:<14} {}\n", "hedging", summary);
  } else {
    ++failed;
    fmt::print("  FAIL  {:<14} {}\n", "hedging", tails);
  }
  bar.finish();
  if (failed == 0) {
    fmt::print("policy {} passes: no metastability, recovery and amplification within bounds\n",
               policy.path);
    return 0;
  }
  fmt::print("policy {} refused: {} of {} scenarios failed\n", policy.path, failed,
             scenarios.size() + 1);
  return 1;
}

}  // namespace holdfast::cli
