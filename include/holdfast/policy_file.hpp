/// @file
/// Policy files: a Shield's options (the reads and writes RetryPolicy, the breaker, the
/// throttle, the concurrency limit, queue_wait and probe_wait) as a JSON document, so that a
/// policy can be reviewed, versioned and checked (`holdfast sim --check`) before it ships.
///
/// @code
///   holdfast::Result<holdfast::Shield::Options> o = holdfast::load_policy("policy.json");
///   if (!o.ok()) { log(o.status().message()); return; }  // "policy.json: /reads/window: ..."
///   holdfast::Shield shield("main", *o);
/// @endcode
///
/// The format (examples/policies/default.json holds every key with the library defaults):
///
/// @code
///   { "reads":  { "max_attempts": 5, "window": "6s", "last_attempt_time": "50ms",
///                 "backoff": { "steps": ["200ms", "600ms", "1500ms", "3000ms"],
///                              "jitter": "proportional", "jitter_ratio": 0.5 } },
///     "writes": { ... as reads ... },
///     "breaker":  { "failure_ratio": 0.5, "open_initial": "250ms", ... },  //
///     CircuitBreaker::Options "throttle": { "max_tokens": 10, "token_ratio": 0.1,
///     "floor_per_second": 10 }, "limit":    { "initial": 20, "min": 2, "max": 1000, ... }, //
///     ConcurrencyLimit::Options "queue_wait": "500ms", "probe_wait": "1s" }
/// @endcode
///
/// Rules:
///   - every key is optional; a key left out keeps the library default (Shield::Options{});
///   - an unknown key is an error: a typo must not silently give a default;
///   - a duration is a string: a number and a unit, "ms" or "s" ("250ms", "6s", "1.5s"); a
///     bare number is an error (is 6 six seconds or six milliseconds?);
///   - a backoff is either "steps" (a list of durations; the last one repeats) or exponential
///     ("base", "cap", optional "factor", default 2); "jitter" is none, proportional (with
///     "jitter_ratio", default 0.5), full, equal or decorrelated. Its default is
///     proportional 0.5 for steps and full for exponential, as in Backoff;
///   - each section is validated by the constructor it is for (RetryPolicy, CircuitBreaker,
///     RetryThrottle, ConcurrencyLimit), so a file is accepted exactly when a Shield built
///     from it would be.
///
/// Errors are values: InvalidArgument whose message names the file, the JSON Pointer of the
/// bad field and what is wrong with it: `naive.json: /breaker/open_max: must be >= open_initial`.
/// NotFound when the file cannot be read.
///
/// The parser lives in its own library, holdfast::policy (docs/adr/0012), so that
/// holdfast::core keeps needing only the standard library.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "holdfast/core/result.hpp"
#include "holdfast/core/shield.hpp"

namespace holdfast {

/// The environment variable that names a policy file for the holdfast tool.
inline constexpr const char* kPolicyEnvironmentVariable = "HOLDFAST_POLICY";

/// Parses a policy document. `source` names it in error messages (a file name).
[[nodiscard]] Result<Shield::Options> parse_policy(std::string_view text,
                                                   std::string_view source = "policy");

/// Reads and parses the policy file at `path`.
[[nodiscard]] Result<Shield::Options> load_policy(const std::string& path);

/// The path in HOLDFAST_POLICY, or nullopt when it is unset or empty.
[[nodiscard]] std::optional<std::string> policy_path_from_environment();

}  // namespace holdfast
