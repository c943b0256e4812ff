/// @file
/// holdfast::sim — retry storms and metastable failure, simulated with the real policy code.
///
/// A discrete-event simulation of many client processes reading from one database:
///
///   - user requests arrive open-loop (Poisson, `offered_rps` per second);
///   - the database is a pool of `workers` with one FIFO queue and a service-time
///     distribution; a full queue refuses at once ("too many connections", SQLSTATE 53300);
///   - every attempt has a client timeout; a client that times out abandons its attempt,
///     but the database still does the work (queued or running) — the mechanism that keeps
///     a database saturated with dead work after the cause is gone (metastable failure);
///   - a trigger disturbs the system for a while: capacity drop (service time x factor),
///     load spike (offered load x factor), hard outage (every attempt refused at once),
///     hang (the database goes silent: nothing is answered or refused, every attempt waits
///     out its client timeout), brownout (a fraction of attempts refused at random),
///     stragglers (a share of attempts take `factor` times their service time) or a slow
///     copy (one copy of the database `factor` times slower);
///   - the database may have copies: a primary and standbys (DatabaseModel::copies), each
///     with its own workers and queue. Reads go to a standby, the primary being the fallback
///     (as pg::Database and asio::pg::Client route them), may be hedged on another copy, and
///     a copy far slower than its peers gets fewer of them (docs/adr/0039-copies-hedging-
///     and-ejection-in-the-simulator.md).
///
/// The clients decide with holdfast's own objects on one ManualClock: RetryPolicy and
/// RetryState for the strategies without a breaker (no retry, naive immediate retry,
/// Tenacity-style exponential backoff), and for the holdfast strategy a real Shield per
/// client process (or one shared) — its CircuitBreaker, RetryThrottle and retry loop,
/// driven through the non-blocking Shield::Call — with one RetryWindow per request.
/// Faults are built by the real classifier (classify.hpp).
///
/// Everything is deterministic for a given seed; the simulation is single-threaded.
///
/// @code
///   namespace sim = holdfast::sim;
///   sim::Scenario s = *sim::builtin_scenario("capacity-drop");
///   holdfast::Result<sim::Report> r = sim::run(s, sim::Strategy::holdfast());
///   if (r.ok() && r->metastable) ...
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/status.hpp"

/// The simulator: open-loop load against a modelled database, run through a retry strategy
/// (see the top of sim.hpp).
namespace holdfast::sim {

/// How long one query's service takes, around DatabaseModel::mean_service.
enum class ServiceDistribution : std::uint8_t {
  kExponential,  ///< memoryless; the M/M/c textbook case
  kLognormal,    ///< a long right tail, as measured query times usually have
  kFixed,        ///< every query takes exactly the mean
};

/// What happens to the database during a scenario's trigger.
enum class TriggerKind : std::uint8_t {
  kNone,          ///< nothing happens
  kCapacityDrop,  ///< service time x factor (a slow disk, a vacuum, a noisy neighbour)
  kLoadSpike,     ///< offered load x factor
  kOutage,        ///< every attempt is refused at once (server restarting)
  kBrownout,      ///< failure_ratio of attempts are refused at random
  /// The database goes silent (a frozen VM, a blackholed network): no query starts or
  /// finishes and nothing is refused, so every attempt ends at its client timeout. Queries
  /// running at the start resume at the end; attempts sent meanwhile join the queue while
  /// it has room (otherwise they are never taken in) and are served after the thaw, the
  /// abandoned ones too unless DatabaseModel::drop_abandoned.
  kHang,
  /// A share of the attempts (Trigger::straggler_share) take `factor` times their service
  /// time: a cold page, a plan gone wrong, a backend descheduled. Per attempt: the next
  /// attempt of the same read is as fast as any other.
  kStragglers,
  /// One copy (the last standby; the primary when there is none) takes `factor` times its
  /// service time: slow, not silent (a noisy neighbour, a disk at its limit).
  kSlowCopy,
};

/// "exponential", "lognormal", "fixed".
[[nodiscard]] std::string_view to_string(ServiceDistribution d) noexcept;
/// "none", "capacity-drop", "spike", "outage", "brownout", "hang", "stragglers", "slow-copy".
[[nodiscard]] std::string_view to_string(TriggerKind k) noexcept;
/// "exponential", "lognormal", "fixed". False when unknown.
[[nodiscard]] bool parse_distribution(std::string_view text, ServiceDistribution& out) noexcept;
/// "none", "capacity-drop", "spike", "outage", "brownout", "hang", "stragglers", "slow-copy".
/// False when unknown.
[[nodiscard]] bool parse_trigger(std::string_view text, TriggerKind& out) noexcept;

/// The database: `workers` queries run at once, the rest wait in one FIFO queue.
struct DatabaseModel {
  int workers = 8;  ///< queries served at once
  /// 8 workers x 5 ms: a capacity of 1600 queries/s.
  Duration mean_service = std::chrono::milliseconds(5);
  /// how service times spread around the mean
  ServiceDistribution distribution = ServiceDistribution::kExponential;
  double lognormal_sigma = 0.5;  ///< shape of the lognormal (its mean stays mean_service)
  /// Attempts waiting beyond this are refused at once (53300 "too many clients"). It bounds
  /// memory, and a queue longer than capacity x timeout is what lets dead work pile up.
  int queue_limit = 10000;
  /// How long a refusal (queue full, outage, brownout) takes to reach the client.
  Duration reject_latency = std::chrono::milliseconds(1);
  /// false (default): work abandoned by a timed-out client is still done when its turn
  /// comes (the server does not know the client left). true: queued work whose client left
  /// is skipped (a pooler that notices the closed socket); running work always finishes.
  bool drop_abandoned = false;
  /// Copies of the database: copy 0 is the primary, the others are hot standbys, each with
  /// the workers, service time and queue above. Reads go to the standbys; the primary answers
  /// the reads no standby takes (and hedges). 1: the primary alone. Within [1, 16].
  int copies = 1;
};

/// The event of a scenario: what happens to the database, when and for how long.
struct Trigger {
  TriggerKind kind = TriggerKind::kNone;       ///< what happens
  Duration start = std::chrono::seconds(20);   ///< when it starts, from the start of the run
  Duration length = std::chrono::seconds(10);  ///< how long it lasts
  double factor = 2.0;         ///< capacity drop: service time x factor; spike: load x factor
  double failure_ratio = 0.2;  ///< brownout: fraction of attempts refused
  /// stragglers: the share of attempts that take `factor` times their service time
  double straggler_share = 0.01;
  /// When it ends: start + length.
  [[nodiscard]] Duration end() const noexcept { return start + length; }
};

/// The share of the requests of each class (Priority: critical, normal, background), indexed
/// by Priority. Each share >= 0; they sum to 1.
using ClassMix = std::array<double, kPriorities>;

/// One simulated run's load, database, trigger and recovery rule.
struct Scenario {
  std::string name = "custom";  ///< the scenario's name in reports
  double offered_rps = 1000.0;  ///< user requests offered per second (Poisson arrivals)
  Duration duration = std::chrono::seconds(150);  ///< how long the run lasts (simulated time)
  DatabaseModel database;                         ///< the database model
  Trigger trigger;                                ///< the event during the run
  /// Client processes. Requests are spread over them at random; each has its own retry
  /// throttle and circuit breaker unless `shared_policies`.
  int clients = 8;
  bool shared_policies =
      false;  ///< one retry throttle and circuit breaker for every client process
  /// a client gives up on an attempt after this long
  Duration attempt_timeout = std::chrono::seconds(1);
  std::uint64_t seed = 1;  ///< the seed of every random draw: equal seeds give equal runs
  /// Recovered: goodput >= recovery_goodput x offered load for recovery_hold consecutive
  /// seconds, starting at most metastable_after after the trigger ends.
  double recovery_goodput = 0.95;
  /// the good seconds in a row that make a recovery
  Duration recovery_hold = std::chrono::seconds(10);
  /// the latest a recovery may start after the trigger ends
  Duration metastable_after = std::chrono::seconds(100);
  /// Stop admitting new requests after this many (0: no limit). For scale measurements.
  std::uint64_t max_requests = 0;
  /// When set, each request gets a class at random with these shares (its own random
  /// stream: the arrivals and service times stay those of the same seed without it), the
  /// holdfast strategies pass it to the Shield (Operation::priority), and the Report has
  /// per-class figures (Report::classes). Unset: every request is normal.
  std::optional<ClassMix> class_mix;

  /// OK, or InvalidArgument naming the first field that is out of range.
  [[nodiscard]] Status validate() const;
};

/// The built-in scenarios: "capacity-drop", "spike", "outage", "hang", "brownout",
/// "many-clients".
[[nodiscard]] std::span<const std::string_view> builtin_scenario_names() noexcept;
/// NotFound naming the known scenarios when `name` is not one of them.
[[nodiscard]] Result<Scenario> builtin_scenario(std::string_view name);

/// Which retry strategy a client runs.
enum class StrategyKind : std::uint8_t {
  kNone,      ///< one attempt
  kNaive,     ///< immediate retry
  kBackoff,   ///< Tenacity-style: wait_exponential(multiplier=1, min=1, max=10), no window
  kHoldfast,  ///< the default read schedule, one window per request, throttle, breaker
};

/// "none", "naive", "backoff", "holdfast".
[[nodiscard]] std::string_view to_string(StrategyKind k) noexcept;

/// A retry strategy and its settings, as the simulator's clients run it.
struct Strategy {
  std::string name;  ///< the name in reports (parse_strategy() uses the text)
  StrategyKind kind = StrategyKind::kNone;  ///< which kind of strategy
  int max_attempts = 1;                     ///< the most attempts per request
  /// The retry window per request (holdfast); for the other kinds an effectively unlimited
  /// window (they stop on attempts only, as Tenacity's stop_after_attempt does).
  Duration window = std::chrono::seconds(6);
  /// holdfast only (a Shield per client process, or one shared):
  /// false: the throttle's floor is raised to its maximum (10^6 retries/s), so it never
  /// refuses at these rates.
  bool throttle = true;
  /// false: the breaker is configured never to open (no consecutive rule, an unreachable
  /// minimum number of calls).
  bool breaker = true;
  /// Consecutive overload faults that open the breaker at low traffic (0: its default, 5).
  int breaker_threshold = 0;
  /// > 0: each Shield's breaker also has a HealthProbe ("SELECT 1") run every this long
  /// while the breaker is open. Its answer is what an attempt sent at that moment would
  /// get (refused, 53300, or a wait longer than the timeout judged from the queue); the
  /// probe itself takes no database capacity. Zero: no health probe (the Shield default).
  Duration health_interval = Duration::zero();
  /// > 0: each Shield has a Liveness watch (holdfast/core/liveness.hpp), as pg::Database gives
  /// every server: attempts waiting this long with no answer of any kind make the database
  /// suspect, and a check (what "SELECT 1" sent then would get: no answer during a hang)
  /// confirms it; then the breaker opens and the attempts in flight give up at once. The
  /// check's own time is not modelled: its answer is known at once. Zero: no watch.
  /// The driver's default (DatabaseOptions::silence_after).
  Duration silence_after = std::chrono::milliseconds(500);
  /// holdfast only: when set, the Shield options to start from (a policy file,
  /// policy_file.hpp) instead of the library defaults. The reads policy's schedule and
  /// jitter are used as they are; its attempts and window are max_attempts and window above
  /// (set them from options->reads); the breaker and throttle settings above still apply.
  std::optional<Shield::Options> options;
  /// holdfast only: hedged reads (as asio::pg::Client makes them): an attempt that has not
  /// answered within its copy's normal latency (hedge_quantile of its last 64 answers, at
  /// least hedge_min_delay) also goes to another copy (the same one, on another connection,
  /// when there is one copy) while the Shield's limit has room for a retry and the budget
  /// allows; the first answer wins and the other is cancelled, its work released.
  bool hedge = true;
  double hedge_budget = 0.02;  ///< hedges earned per read (a token bucket of at most 10)
  /// The quantile of a copy's recent answers after which a read is hedged. 0.98 = 1 -
  /// hedge_budget: the share of reads that outlast it is what the budget pays for (ADR 0039).
  double hedge_quantile = 0.98;
  /// The least a read waits before it is hedged.
  Duration hedge_min_delay = std::chrono::milliseconds(5);
  /// holdfast only, with copies: a copy whose recent latency stays far above its peers' gets
  /// one read in 16 until it comes back (outlier ejection).
  bool eject = true;

  /// kInvalidArgument naming the first setting out of range: attempts within [1, 1000], a
  /// window > 0, a threshold within [0, 10^6], a health interval and a silence_after of 0 or
  /// within [1 ms, 1 h] (each probe is an event of the run: a shorter one would never let it
  /// end).
  [[nodiscard]] Status validate() const;

  /// One attempt per request, no retry.
  static Strategy none();
  static Strategy naive();    ///< the drill's naive: 4 attempts, no wait between them
  static Strategy backoff();  ///< the drill's backoff: stop after 3 attempts; waits 1 s, 2 s
  /// The default policy under a Shield: 5 attempts, 6 s window, throttle and breaker.
  static Strategy holdfast();
};

/// Parses one strategy: a kind, then optional ":key=value" or ":flag" settings:
/// @code
///   none | naive[:attempts=N] | backoff[:attempts=N]
///   holdfast[:attempts=N][:window=6s][:threshold=N][:health=D]
///            [:no-throttle][:no-breaker][:no-hedge][:no-eject][:hedge-quantile=Q]
/// @endcode
/// Durations take ms or s ("250ms", "6s", "1.5s"). The strategy is named after the text.
/// `base_holdfast` supplies the defaults of every holdfast entry (command-line options).
[[nodiscard]] Result<Strategy> parse_strategy(std::string_view text,
                                              const Strategy& base_holdfast = Strategy::holdfast());
/// A comma-separated list of strategies.
[[nodiscard]] Result<std::vector<Strategy>> parse_strategies(
    std::string_view list, const Strategy& base_holdfast = Strategy::holdfast());
/// "250ms", "6s", "1.5s", "2m"; a bare number is seconds. InvalidArgument when malformed.
[[nodiscard]] Result<Duration> parse_duration(std::string_view text);
/// "critical:0.1,normal:0.8,background:0.1": each class at most once, a class left out has
/// no share. InvalidArgument naming what is wrong: an unknown class, a share that is not a
/// number or is negative, a class given twice, shares that do not sum to 1 (within 0.01).
[[nodiscard]] Result<ClassMix> parse_class_mix(std::string_view text);

/// One simulated second. Counts of events that happened during [t, t+1 s), except
/// `amplification`, which belongs to the requests that *arrived* in that second.
struct Second {
  std::uint32_t arrivals = 0;     ///< user requests offered
  std::uint32_t db_attempts = 0;  ///< attempts that reached the database (refused ones too)
  std::uint32_t successes = 0;    ///< user requests answered (goodput)
  std::uint32_t errors = 0;       ///< user requests that ended in an error
  /// Database attempts made by the requests that arrived in this second, per request
  /// (0 when none arrived). Partial when some of them were still unfinished at the end.
  double amplification = 0.0;
  std::uint32_t unfinished = 0;    ///< requests of this second still in flight when the run ended
  double p99_ms = 0.0;             ///< of the user-visible latency of successes; 0 when none
  double breaker_open = 0.0;       ///< fraction of client breakers not closed at the end
  std::uint32_t queue = 0;         ///< database queue length at the end of the second
  std::uint32_t busy_workers = 0;  ///< database workers busy at the end of the second
};

/// Why user requests failed (indexed by StopReason).
using ErrorsByReason = std::array<std::uint64_t, 9>;

/// What one class of requests got in a run (Scenario::class_mix), over the requests of the
/// class that arrived during the trigger (all of the run when there is none).
struct ClassReport {
  std::uint64_t requests = 0;   ///< requests of the class that arrived during the trigger
  std::uint64_t successes = 0;  ///< of them, answered
  double served_pct = 0.0;      ///< successes / requests x 100 (0 when none arrived)
  double p99_ms = 0.0;          ///< of their successes, from arrival to the answer
};

/// What one run measured: per second and in total.
struct Report {
  std::string strategy;         ///< the strategy's name
  std::vector<Second> seconds;  ///< one entry per simulated second
  /// Seconds from the trigger's end to the start of the first run of recovery_hold good
  /// seconds; empty when there is none starting within metastable_after (metastable), or
  /// when the run ended too early to see one.
  std::optional<double> recovery_s;
  bool metastable = false;  ///< no recovery started within metastable_after of the trigger's end
  /// The highest per-second amplification (over seconds whose requests all finished).
  double amplification_max = 0.0;
  /// Database attempts per request, over the requests that arrived during the trigger.
  double amplification_during_trigger = 0.0;
  /// Fraction of the requests offered during the trigger that were answered during it.
  double goodput_during_trigger = 0.0;
  /// The most a perfect client could get: capacity during the trigger / offered load,
  /// capped at 1 (0 in an outage or a hang, where there is no capacity).
  double goodput_limit_during_trigger = 0.0;
  /// goodput_during_trigger / goodput_limit_during_trigger (0 when the limit is 0).
  double efficiency = 0.0;
  /// Latency of the requests that failed, from arrival to the error.
  double failed_p50_ms = 0.0;
  /// Latency of the requests that failed, 99th percentile.
  double failed_p99_ms = 0.0;
  std::uint64_t requests = 0;            ///< user requests offered
  std::uint64_t successes = 0;           ///< user requests answered
  std::uint64_t errors = 0;              ///< user requests that ended in an error
  std::uint64_t in_flight_at_end = 0;    ///< requests still in flight when the run ended
  std::uint64_t db_attempts = 0;         ///< attempts that reached the database (refused ones too)
  std::uint64_t breaker_rejections = 0;  ///< requests failed at once by an open breaker
  std::uint64_t breaker_waits = 0;       ///< times a request waited for a breaker's probe
  /// holdfast: the client breakers (one per Shield), and for each that opened at or after
  /// the trigger's start, the seconds from that start to its first opening, ascending. How
  /// soon the Shields notice the trigger (a hang: how long silence goes unnoticed).
  std::uint32_t breakers = 0;
  /// holdfast: per breaker that opened at or after the trigger's start, the seconds from that
  /// start to its first opening, ascending.
  std::vector<double> breaker_open_after_s;
  ErrorsByReason errors_by_reason{};  ///< user requests that failed, by StopReason
  double p99_ms = 0.0;                ///< of all successes
  double p999_ms = 0.0;               ///< of all successes, 99.9th percentile
  /// Of the successes of the requests that arrived during the trigger (all of the run when
  /// there is none), from arrival to the answer.
  double p99_during_trigger_ms = 0.0;
  /// Of the same successes, 99.9th percentile.
  double p999_during_trigger_ms = 0.0;
  /// holdfast: reads hedged on another copy (each one more database attempt, counted in
  /// db_attempts), and those the hedge answered first.
  std::uint64_t hedged_reads = 0;
  std::uint64_t hedges_won = 0;  ///< hedged reads whose hedge answered first
  /// Attempts (hedges included) sent to each copy, indexed by copy (0: the primary), over the
  /// trigger (all of the run when there is none).
  std::vector<std::uint64_t> attempts_by_copy;
  /// With Scenario::class_mix: per class (indexed by Priority), what it got.
  std::optional<std::array<ClassReport, kPriorities>> classes;
  /// Engine statistics (deterministic): events processed, peak live requests and pending
  /// events. Memory follows the peaks, not the number of requests.
  std::uint64_t events = 0;
  std::uint64_t peak_in_flight = 0;    ///< the most requests in flight at once
  std::uint64_t peak_event_queue = 0;  ///< the most events pending at once
};

/// What the simulator asked the library and what it answered, in order. For tests that
/// replay the same inputs through stand-alone objects (see tests/sim).
struct TraceEvent {
  /// What happened.
  enum class Kind : std::uint8_t {
    kArrival,      ///< request `request` arrived and goes to client process `client`
    kAdmit,        ///< holdfast: Shield::Call::admit(at) answered `admission`
    kSucceeded,    ///< the attempt succeeded after `latency` (reported at `at`)
    kFailed,       ///< the attempt failed with *status after `latency`; the decision follows
    kHealthProbe,  ///< HealthProbe::probe_now() of Shield `client` at `at` (see below)
  };
  Kind kind = Kind::kArrival;  ///< which event this is
  std::uint64_t request = 0;   ///< the request's number (0-based arrival order)
  std::uint32_t client = 0;    ///< the client process (the Shield)
  TimePoint at{};              ///< when it happened (simulated time)
  /// kAdmit: what admit() answered.
  Shield::Admission::Kind admission = Shield::Admission::Kind::kAttempt;
  TimePoint until{};  ///< kWait
  /// kSucceeded, kFailed: how long the attempt took.
  Duration latency{};
  const Status* status = nullptr;  ///< kFailed: the fault; kAdmit kStop: why
  /// kFailed: true to retry after `delay`, false to stop for `stop`.
  bool retry = false;
  Duration delay{};                     ///< kFailed: the wait before the retry
  StopReason stop = StopReason::kNone;  ///< kFailed: why it stopped
  /// kHealthProbe: whether it ran, its answer (*status), whether it closed the breaker (`closed`);
  /// afterwards the next run was announced for `until`.
  bool ran = false;
  bool closed = false;  ///< kHealthProbe: whether its success closed the breaker
};
/// Receives every TraceEvent of a run, in order.
using Tracer = std::function<void(const TraceEvent&)>;

/// Runs one strategy through one scenario; `trace`, when set, sees every decision.
/// InvalidArgument when the scenario or strategy is invalid.
[[nodiscard]] Result<Report> run(const Scenario& scenario, const Strategy& strategy,
                                 const Tracer& trace = {});

/// The exact configuration the simulator gives the library (for replaying its decisions):
/// the retry policy of `strategy` on `clock` (for holdfast, the Shield's reads policy).
[[nodiscard]] RetryPolicy retry_policy(const Strategy& strategy, Clock& clock);
/// The Shield options of a holdfast strategy on `clock` (see retry_policy()).
[[nodiscard]] Shield::Options shield_options(const Strategy& strategy, Clock& clock);
/// The seed of request number `request` (0-based arrival order) of a run with `seed` (see
/// retry_policy()).
[[nodiscard]] std::uint64_t request_seed(std::uint64_t seed, std::uint64_t request) noexcept;

/// Capacity during the trigger / offered load, capped at 1 (see Report).
[[nodiscard]] double goodput_limit(const Scenario& scenario) noexcept;

/// The recovery rule (see Scenario), applied to per-second results. Sets recovery_s and
/// metastable in `report` from report.seconds.
void judge_recovery(const Scenario& scenario, Report& report);

}  // namespace holdfast::sim
