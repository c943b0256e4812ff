/// @file
/// The options of a Shield (holdfast::ShieldOptions, also Shield::Options) and of its parts:
/// the circuit breaker, the concurrency limit and the retry throttle. Plain copyable structs
/// with documented defaults, in a header of their own so that an engine's options hold them
/// without the Shield itself (holdfast/core/shield.hpp).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "holdfast/core/duration.hpp"
#include "holdfast/core/priority.hpp"
#include "holdfast/core/retry_policy.hpp"

namespace holdfast {

/// The options of a CircuitBreaker (CircuitBreaker::Options): plain configuration, validated
/// by its constructor (std::invalid_argument names the field). Defaults: the ratio rule follows
/// Hystrix (50% over a 10 s window of 10 buckets, at least 20 calls); the consecutive rule and the
/// 30 s cap are a common hand-written breaker's (threshold 5, recovery timeout 30 s). See
/// docs/adr/0003-breaker-and-throttle.md; for busy_consecutive_failures, ADR 0007; for the open
/// period, ADR 0008.
struct CircuitBreakerOptions {
  double failure_ratio = 0.5;  ///< the failed share of the window that opens it; in (0, 1]
  int minimum_calls = 20;      ///< >= 1: the ratio rule needs this many calls in the window
  Duration window = std::chrono::seconds(10);  ///< the sliding window's length; > 0
  int window_buckets = 10;  ///< in [1, 64]; window / window_buckets >= 1 microsecond
  /// Overload faults in a row that open it at low traffic (and refusals at any traffic);
  /// >= 0; 0 turns the low-traffic rule off.
  int consecutive_failures = 5;
  /// >= 0; 0 turns it off. Once the window holds minimum_calls calls, this many overload
  /// faults in a row open the breaker too: a whole ratio sample that failed, without
  /// waiting for the failures to outweigh up to 10 s of earlier successes.
  int busy_consecutive_failures = 20;
  /// A success slower than this counts as a failure; >= 0; 0: latency never counts.
  Duration slow_call_threshold = Duration::zero();
  /// The first open period; > 0. A Shield's breaker opens for 250 to 800 ms instead
  /// (Shield::Options::shield_breaker(), ADR 0008).
  Duration open_initial = std::chrono::milliseconds(500);
  Duration open_max = std::chrono::seconds(30);    ///< the longest open period; >= open_initial
  int half_open_probes = 1;                        ///< in [1, 64]: probes admitted at a time
  int probe_successes_to_close = 1;                ///< successful probes that close it; >= 1
  Duration probe_lease = std::chrono::seconds(5);  ///< how long a probe may hold its lease; > 0
};

/// ConcurrencyLimit::Options, validated by its constructor (std::invalid_argument names a field).
struct ConcurrencyLimitOptions {
  int initial = 20;  ///< in [min, max]; Netflix concurrency-limits' default
  int min = 2;       ///< >= 1
  int max = 1000;    ///< >= min
  /// How far the recent latency may rise above the long-run one before the limit
  /// shrinks: 2 = twice as slow. >= 1.
  double tolerance = 2.0;
  double smoothing = 0.2;  ///< in (0, 1]: how much of each new estimate is taken
  int short_samples = 5;   ///< >= 1: short average's length; as many first set the normal
  /// > short_samples: the normal latency may rise by half in this many samples.
  int long_samples = 5000;
  /// Retries start only while the work in flight is below this share of the limit. In
  /// (0, 1].
  double retry_share = 0.9;
};

/// RetryThrottle::Options, validated by its constructor (std::invalid_argument names a field).
struct RetryThrottleOptions {
  double max_tokens = 10.0;      ///< in (0, 1000] (gRFC A6's bounds)
  double token_ratio = 0.1;      ///< in (0, max_tokens]; kept to 3 decimals, as in gRPC
  double floor_per_second = 10;  ///< in [0, 1e6]; 0 turns the floor off
};

/// Shield::Options: copyable configuration, validated by the Shield's constructor.
struct ShieldOptions {
  /// A Shield's breaker options: CircuitBreaker's, with an open period of 250 ms doubling to
  /// at most 800 ms.
  static CircuitBreakerOptions shield_breaker() {
    CircuitBreakerOptions o;
    o.open_initial = std::chrono::milliseconds(250);
    o.open_max = std::chrono::milliseconds(800);
    return o;
  }

  /// The breaker's open period is 250 ms, doubling on each probe that fails for the
  /// database's own reasons, to at most 800 ms: the first probe after an outage comes
  /// within 800 ms of its end, and its answer within a second (ADR 0008). The concurrency limit
  /// and the throttle keep the load down meanwhile; a fixed 30 s open period kept a page failing
  /// 28 s after the lock.
  CircuitBreakerOptions breaker = shield_breaker();
  RetryThrottleOptions throttle;                 ///< the retry throttle's bucket and floor
  ConcurrencyLimitOptions limit;                 ///< the concurrency limit's learning
  RetryPolicy reads = RetryPolicy::standard();   ///< the policy of idempotent operations
  RetryPolicy writes = RetryPolicy::standard();  ///< the policy of everything else
  /// The most a first attempt ever queues for a place under the concurrency limit: the
  /// ceiling of the line's target and interval (queue_target(), queue_interval()), which
  /// are learned from the database's normal latency. Zero never queues. >= 0.
  Duration queue_wait = std::chrono::milliseconds(500);
  /// The longest a request waits for the breaker's next probe (and only after lock
  /// contention: see above). >= 0; zero never waits.
  Duration probe_wait = std::chrono::seconds(1);
  /// The class of the operations with these labels, whatever their code says (a policy
  /// file's "priorities"); the others keep Operation::priority. Read only when a request
  /// has to wait for a place, never on the success path.
  std::map<std::string, Priority, std::less<>> priorities;

  /// holdfast switched off, for callers that retry on their own and for comparisons: one
  /// attempt per call, a breaker that never opens, no concurrency limit to speak of, and a
  /// window of an hour (only the driver's own timeouts bound an attempt).
  static ShieldOptions single_attempt();
};

}  // namespace holdfast
