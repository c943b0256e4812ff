// `holdfast sim --policy FILE` and `holdfast sim --check --policy FILE`: the simulator run
// with a policy file (policy_file.hpp) instead of the library defaults.
#pragma once

#include <optional>
#include <string>

#include "holdfast/core/shield.hpp"
#include "holdfast/sim.hpp"

namespace holdfast::cli {

// A policy file named by --policy (`flag`, when not empty) or else by HOLDFAST_POLICY.
struct PolicyChoice {
  std::string path;  // empty: none given
  Shield::Options options;
};

// Loads the policy chosen by `flag` or the environment; nullopt when neither names one.
// A file that cannot be read or parsed: one line on stderr, then CLI::RuntimeError(2).
[[nodiscard]] std::optional<PolicyChoice> choose_policy(const std::string& flag);

// `base` made to run `options`: the reads policy's attempts and window, the rest as given.
[[nodiscard]] sim::Strategy with_policy(sim::Strategy base, const Shield::Options& options);

// sim --check: runs the built-in scenarios (shortened to seconds of wall time) with the
// policy and prints one line per scenario. Returns 0 when every scenario passes: service is
// back (not metastable), within 2 s of the trigger's end, with at most 1.1 database attempts
// per request during the trigger (1.3 in the brownout, whose database has capacity to spare
// for the refused fifth); and, on a spike of three times the load with 10 % critical, 80 %
// normal and 10 % background requests, at least 99.5 % of the critical ones served and
// background served less than normal. The tails of issue 44: in spike, capacity-drop and
// many-clients the served p99 during the trigger at most 100 ms, the shed told within 20 ms
// at p99, efficiency at least 0.95; the brownout serves at least 98 %; with stragglers (1 % of
// attempts 50 x slower) the p99.9 at most 3 x a quiet run's for at most 1.05 x the attempts of
// no hedging; with a slow standby of two, it gets fewer reads than the primary and the p99 is
// no worse than without hedging. Otherwise 1.
// `progress`: a progress bar on stderr (a line per scenario when stderr is no terminal).
[[nodiscard]] int check_policy(const PolicyChoice& policy, bool progress);

}  // namespace holdfast::cli
