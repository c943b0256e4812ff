// `holdfast sim`: retry storms and metastable failure, simulated with the real policy code.
//
//   holdfast sim --scenario capacity-drop --strategies none,naive,backoff,holdfast
//                --json sim.json --svg sim.svg
//
// Prints one row per strategy; --per-second adds the timeline; --json and --svg write the
// results. Every scenario parameter can be overridden; the same --seed gives the same
// numbers (and byte-identical JSON).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "fmt/format.h"
#include "holdfast/sim.hpp"
#include "progress.hpp"
#include "safe_print.hpp"
#include "sim_check.hpp"
#include "sim_output.hpp"

namespace {

namespace sim = holdfast::sim;
using holdfast::Duration;
using nlohmann::ordered_json;

struct SimArgs {
  std::string scenario = "capacity-drop";
  std::string strategies = "none,naive,backoff,holdfast";
  std::string json_path;
  std::string svg_path;
  bool per_second = false;
  std::string policy;  // a policy file for the holdfast strategies (else HOLDFAST_POLICY)
  bool check = false;  // --check: judge the policy on the built-in scenarios

  // Overrides: applied only when given on the command line.
  std::uint64_t seed = 1;
  std::string duration;
  double rps = 0;
  int workers = 0;
  std::string service;
  std::string distribution;
  double sigma = 0;
  int queue_limit = 0;
  std::string reject_latency;
  bool drop_abandoned = false;
  std::string timeout;
  int clients = 0;
  bool shared = false;
  std::string trigger;
  std::string trigger_start;
  std::string trigger_length;
  double factor = 0;
  double failure_ratio = 0;
  std::uint64_t requests = 0;
  double recovery_goodput = 0;
  std::string recovery_hold;
  std::string metastable_after;
  std::string mix;  // --mix critical:0.1,normal:0.8,background:0.1
  int copies = 0;
  double straggler_share = 0;

  // Defaults of every holdfast strategy in the list.
  int max_attempts = 0;
  std::string window;
  int threshold = 0;
  std::string health;
  bool no_throttle = false;
  bool no_breaker = false;
};

struct Given {
  const CLI::App* cmd;
  bool operator()(const char* name) const { return cmd->count(name) > 0; }
};

[[noreturn]] void fail(const std::string& message) {
  throw CLI::ValidationError(message);
}

Duration duration_arg(const std::string& text, const char* option) {
  holdfast::Result<Duration> d = sim::parse_duration(text);
  if (!d.ok()) fail(std::string(option) + ": " + std::string(d.status().message()));
  return *d;
}

sim::Scenario scenario_from(const SimArgs& a, const Given& given) {
  holdfast::Result<sim::Scenario> base = sim::builtin_scenario(a.scenario);
  if (!base.ok()) fail("--scenario: " + std::string(base.status().message()));
  sim::Scenario s = *base;
  sim::DatabaseModel& db = s.database;
  if (given("--seed")) s.seed = a.seed;
  if (given("--duration")) s.duration = duration_arg(a.duration, "--duration");
  if (given("--rps")) s.offered_rps = a.rps;
  if (given("--workers")) db.workers = a.workers;
  if (given("--service")) db.mean_service = duration_arg(a.service, "--service");
  if (given("--distribution") && !sim::parse_distribution(a.distribution, db.distribution)) {
    fail("--distribution: '" + a.distribution + "' is not exponential, lognormal or fixed");
  }
  if (given("--sigma")) db.lognormal_sigma = a.sigma;
  if (given("--queue-limit")) db.queue_limit = a.queue_limit;
  if (given("--copies")) db.copies = a.copies;
  if (given("--reject-latency")) {
    db.reject_latency = duration_arg(a.reject_latency, "--reject-latency");
  }
  if (given("--drop-abandoned")) db.drop_abandoned = true;
  if (given("--timeout")) s.attempt_timeout = duration_arg(a.timeout, "--timeout");
  if (given("--clients")) s.clients = a.clients;
  if (given("--shared")) s.shared_policies = true;
  if (given("--trigger") && !sim::parse_trigger(a.trigger, s.trigger.kind)) {
    fail("--trigger: '" + a.trigger +
         "' is not none, capacity-drop, spike, outage, hang, brownout, stragglers or slow-copy");
  }
  if (given("--trigger-start")) s.trigger.start = duration_arg(a.trigger_start, "--trigger-start");
  if (given("--trigger-length")) {
    s.trigger.length = duration_arg(a.trigger_length, "--trigger-length");
  }
  if (given("--factor")) s.trigger.factor = a.factor;
  if (given("--failure-ratio")) s.trigger.failure_ratio = a.failure_ratio;
  if (given("--straggler-share")) s.trigger.straggler_share = a.straggler_share;
  if (given("--requests")) s.max_requests = a.requests;
  if (given("--recovery-goodput")) s.recovery_goodput = a.recovery_goodput;
  if (given("--recovery-hold")) s.recovery_hold = duration_arg(a.recovery_hold, "--recovery-hold");
  if (given("--metastable-after")) {
    s.metastable_after = duration_arg(a.metastable_after, "--metastable-after");
  }
  if (given("--mix")) {
    holdfast::Result<sim::ClassMix> mix = sim::parse_class_mix(a.mix);
    if (!mix.ok()) fail("--mix: " + std::string(mix.status().message()));
    s.class_mix = *mix;
  }
  if (holdfast::Status st = s.validate(); !st.ok()) fail(std::string(st.message()));
  return s;
}

sim::Strategy holdfast_defaults(const SimArgs& a, const Given& given) {
  sim::Strategy h = sim::Strategy::holdfast();
  if (given("--max-attempts")) {
    if (a.max_attempts < 1) fail("--max-attempts must be at least 1");
    h.max_attempts = a.max_attempts;
  }
  if (given("--window")) {
    h.window = duration_arg(a.window, "--window");
    if (h.window <= Duration::zero()) fail("--window must be greater than zero");
  }
  if (given("--threshold")) {
    if (a.threshold < 1) fail("--threshold must be at least 1");
    h.breaker_threshold = a.threshold;
  }
  if (given("--health-probe")) h.health_interval = duration_arg(a.health, "--health-probe");
  if (given("--no-throttle")) h.throttle = false;
  if (given("--no-breaker")) h.breaker = false;
  if (holdfast::Status st = h.validate(); !st.ok()) {
    fail("--max-attempts, --window, --threshold or --health-probe: " + std::string(st.message()));
  }
  return h;
}

double seconds_of(Duration d) {
  return std::chrono::duration<double>(d).count();
}

// Failure after the command line was accepted: say so, then exit with 1 (commands.hpp).
[[noreturn]] void runtime_failure(const std::string& message) {
  holdfast::cli::eprint("holdfast sim: {}\n", message);
  throw CLI::RuntimeError(message, 1);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) runtime_failure("cannot write " + path);
}

std::string recovery_text(const sim::Report& r) {
  if (r.recovery_s) return fmt::format("{:.0f} s", *r.recovery_s);
  return r.metastable ? "never (metastable)" : "not within the run";
}

// "; 5 of 8 breakers opened 0.16 s to 8.0 s (median 1.2 s) after the trigger began", or
// nothing for a strategy without breakers.
std::string breakers_opened_text(const sim::Report& r) {
  const std::vector<double>& after = r.breaker_open_after_s;
  if (r.breakers == 0 || after.empty()) return {};
  const double median = after.size() % 2 == 1
                            ? after[after.size() / 2]
                            : (after[after.size() / 2 - 1] + after[after.size() / 2]) / 2.0;
  if (after.size() == 1) {
    return fmt::format("; {} of {} breakers opened {:.2f} s after the trigger began", after.size(),
                       r.breakers, after.front());
  }
  return fmt::format(
      "; {} of {} breakers opened {:.2f} s to {:.2f} s (median {:.2f} s) after the "
      "trigger began",
      after.size(), r.breakers, after.front(), after.back(), median);
}

void print_table(const sim::Scenario& s, const std::vector<sim::Report>& reports,
                 const std::vector<double>& walls) {
  const double capacity = s.database.workers / seconds_of(s.database.mean_service);
  fmt::print(
      "scenario {}: {:.0f} requests/s offered, capacity {:.0f} queries/s ({} workers x "
      "{:.1f} ms {}), timeout {:.2f} s, {} client process{}{}, {} cop{}, seed {}\n",
      s.name, s.offered_rps, capacity, s.database.workers,
      seconds_of(s.database.mean_service) * 1e3, sim::to_string(s.database.distribution),
      seconds_of(s.attempt_timeout), s.clients, s.clients == 1 ? "" : "es",
      s.shared_policies ? " (shared breaker and throttle)" : "", s.database.copies,
      s.database.copies == 1 ? "y" : "ies (copy 0 the primary)", s.seed);
  if (s.trigger.kind != sim::TriggerKind::kNone) {
    std::string what;
    switch (s.trigger.kind) {
      case sim::TriggerKind::kCapacityDrop:
        what = fmt::format("service time x{:g}", s.trigger.factor);
        break;
      case sim::TriggerKind::kLoadSpike:
        what = fmt::format("offered load x{:g}", s.trigger.factor);
        break;
      case sim::TriggerKind::kOutage:
        what = "every connection refused";
        break;
      case sim::TriggerKind::kBrownout:
        what = fmt::format("{:g}% of attempts refused", s.trigger.failure_ratio * 100.0);
        break;
      case sim::TriggerKind::kHang:
        what = "no answer at all: every attempt waits out its timeout";
        break;
      case sim::TriggerKind::kStragglers:
        what = fmt::format("{:g}% of attempts take x{:g} their service time",
                           s.trigger.straggler_share * 100.0, s.trigger.factor);
        break;
      case sim::TriggerKind::kSlowCopy:
        what = fmt::format("copy {} of {} x{:g} slower", s.database.copies - 1, s.database.copies,
                           s.trigger.factor);
        break;
      case sim::TriggerKind::kNone:
        break;
    }
    fmt::print("trigger {} ({}) from {:g} s to {:g} s; run {:g} s\n\n",
               sim::to_string(s.trigger.kind), what, seconds_of(s.trigger.start),
               seconds_of(s.trigger.end()), seconds_of(s.duration));
  }
  std::size_t width = 8;
  for (const sim::Report& r : reports)
    width = std::max(width, r.strategy.size());
  fmt::print("{:<{}}  {:>18} {:>8} {:>9} {:>9} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>7}\n",
             "strategy", width, "recovery", "amp max", "amp trig", "good trig", "limit", "effic",
             "errors", "p99 ms", "fail p50", "fail p99", "wall s");
  for (std::size_t k = 0; k < reports.size(); ++k) {
    const sim::Report& r = reports[k];
    const std::string efficiency = r.goodput_limit_during_trigger > 0.0
                                       ? fmt::format("{:.2f}", r.efficiency)
                                       : std::string("-");
    fmt::print(
        "{:<{}}  {:>18} {:>8.2f} {:>9.2f} {:>8.1f}% {:>6.2f} {:>6} {:>8} {:>8.0f} {:>8.0f} "
        "{:>8.0f} {:>7.2f}\n",
        r.strategy, width, recovery_text(r), r.amplification_max, r.amplification_during_trigger,
        r.goodput_during_trigger * 100.0, r.goodput_limit_during_trigger, efficiency, r.errors,
        r.p99_ms, r.failed_p50_ms, r.failed_p99_ms, walls[k]);
  }
  fmt::print("\nwhy requests failed:\n");
  for (const sim::Report& r : reports) {
    std::string why;
    for (std::size_t i = 0; i < r.errors_by_reason.size(); ++i) {
      if (r.errors_by_reason[i] == 0) continue;
      if (!why.empty()) why += ", ";
      why += fmt::format("{} {}", holdfast::to_string(static_cast<holdfast::StopReason>(i)),
                         r.errors_by_reason[i]);
    }
    if (r.breaker_waits > 0) why += fmt::format("; waited for a probe {} times", r.breaker_waits);
    why += breakers_opened_text(r);
    fmt::print("  {:<{}}  {}\n", r.strategy, width, why.empty() ? "-" : why);
  }
  fmt::print("\ntails (served requests that arrived during the trigger) and hedging:\n");
  for (const sim::Report& r : reports) {
    std::string copies;
    for (std::size_t c = 0; r.attempts_by_copy.size() > 1 && c < r.attempts_by_copy.size(); ++c) {
      copies += fmt::format("{}{}", c == 0 ? "; attempts by copy " : "/", r.attempts_by_copy[c]);
    }
    fmt::print(
        "  {:<{}}  p99 {:.0f} ms, p99.9 {:.0f} ms; {} database attempts, {} hedged ({} won){}\n",
        r.strategy, width, r.p99_during_trigger_ms, r.p999_during_trigger_ms, r.db_attempts,
        r.hedged_reads, r.hedges_won, copies);
  }
  if (!s.class_mix || reports.empty()) return;
  fmt::print("\nby class (requests that arrived during the trigger): served, p99 of the served\n");
  for (const sim::Report& r : reports) {
    std::string line;
    for (std::size_t i = 0; r.classes && i < r.classes->size(); ++i) {
      const sim::ClassReport& c = (*r.classes)[i];
      if (c.requests == 0) continue;
      if (!line.empty()) line += "; ";
      line += fmt::format("{} {:.1f}% ({:.0f} ms)",
                          holdfast::to_string(static_cast<holdfast::Priority>(i)), c.served_pct,
                          c.p99_ms);
    }
    fmt::print("  {:<{}}  {}\n", r.strategy, width, line.empty() ? "-" : line);
  }
}

void print_seconds(const sim::Report& r) {
  fmt::print("\n{}: per second\n{:>5} {:>7} {:>7} {:>7} {:>8} {:>6} {:>9} {:>6} {:>7}\n",
             r.strategy, "t", "offered", "goodput", "errors", "db/s", "amp", "p99 ms", "open",
             "queue");
  for (std::size_t i = 0; i < r.seconds.size(); ++i) {
    const sim::Second& x = r.seconds[i];
    fmt::print("{:>5} {:>7} {:>7} {:>7} {:>8} {:>6.2f} {:>9.0f} {:>6.2f} {:>7}\n", i, x.arrivals,
               x.successes, x.errors, x.db_attempts, x.amplification, x.p99_ms, x.breaker_open,
               x.queue);
  }
}

long peak_rss_kib() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return u.ru_maxrss;  // KiB on Linux
}

void run_sim(const SimArgs& a, const CLI::App& cmd) {
  const Given given{&cmd};
  const std::optional<holdfast::cli::PolicyChoice> policy = holdfast::cli::choose_policy(a.policy);
  if (a.check) {
    if (!policy) fail("--check needs a policy: --policy FILE or HOLDFAST_POLICY=FILE");
    const int rc = holdfast::cli::check_policy(*policy, true);
    if (rc != 0) throw CLI::RuntimeError(rc);
    return;
  }
  const sim::Scenario scenario = scenario_from(a, given);
  sim::Strategy base = holdfast_defaults(a, given);
  if (policy) base = holdfast::cli::with_policy(base, policy->options);
  holdfast::Result<std::vector<sim::Strategy>> strategies =
      sim::parse_strategies(a.strategies, base);
  if (!strategies.ok()) fail("--strategies: " + std::string(strategies.status().message()));

  std::vector<sim::Report> reports;
  std::vector<std::string> perf;
  std::vector<double> walls;
  holdfast::cli::ProgressBar bar(stderr, true);
  for (const sim::Strategy& st : *strategies) {
    bar.phase(static_cast<double>(walls.size()), static_cast<double>(strategies->size()),
              "strategy " + st.name);
    const auto t0 = std::chrono::steady_clock::now();
    holdfast::Result<sim::Report> r = sim::run(scenario, st);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) runtime_failure(r.status().to_string());
    perf.push_back(fmt::format(
        "{}: {} requests, {} events in {:.2f} s wall ({:.1f} M events/s, {:.2f} M requests/s); "
        "peak {} requests in flight, {} events queued",
        st.name, r->requests, r->events, wall, wall > 0 ? r->events / wall / 1e6 : 0.0,
        wall > 0 ? r->requests / wall / 1e6 : 0.0, r->peak_in_flight, r->peak_event_queue));
    reports.push_back(std::move(*r));
    walls.push_back(wall);
  }
  bar.clear();

  print_table(scenario, reports, walls);
  if (a.per_second) {
    for (const sim::Report& r : reports)
      print_seconds(r);
  }
  fmt::print(
      "\nrecovery: goodput >= {:g}% of offered load for {:g} s in a row after the trigger "
      "ends; metastable: no such run starting within {:g} s\n",
      scenario.recovery_goodput * 100.0, seconds_of(scenario.recovery_hold),
      seconds_of(scenario.metastable_after));
  if (policy) fmt::print("holdfast strategies: the policy in {}\n", policy->path);
  for (const std::string& line : perf)
    holdfast::cli::eprint("{}\n", line);
  holdfast::cli::eprint("peak resident memory of the process: {:.1f} MiB\n",
                        static_cast<double>(peak_rss_kib()) / 1024.0);

  if (!a.json_path.empty())
    write_file(a.json_path,
               holdfast::cli::sim_json(scenario, reports, *strategies, walls).dump(2) + "\n");
  if (!a.svg_path.empty()) write_file(a.svg_path, holdfast::cli::sim_svg(scenario, reports));
}

}  // namespace

namespace holdfast::cli {

void add_sim_command(CLI::App& app) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulate retry storms and metastable failure with the real policy code");
  cmd->footer(
      "Strategies: none | naive[:attempts=N] | backoff[:attempts=N] | holdfast[:attempts=N]"
      "[:window=6s][:threshold=N][:health=D][:no-throttle][:no-breaker][:no-hedge][:no-eject]"
      "[:hedge-quantile=Q]\n"
      "Durations: 250ms, 6s, 1.5s, 2m. Scenarios: capacity-drop, spike, outage, hang, brownout, "
      "many-clients. Triggers: none, capacity-drop, spike, outage, hang, brownout, stragglers, "
      "slow-copy.");
  SimArgs& a = *args;
  cmd->add_option("--scenario", a.scenario, "Built-in scenario to start from")
      ->capture_default_str();
  cmd->add_option("--strategies", a.strategies, "Comma-separated strategies to compare")
      ->capture_default_str();
  cmd->add_option("--json", a.json_path, "Write the results as JSON to this file");
  cmd->add_option("--svg", a.svg_path, "Write goodput/amplification charts as SVG to this file");
  cmd->add_flag("--per-second", a.per_second, "Print the per-second timeline of each strategy");
  cmd->add_option("--policy", a.policy,
                  "Policy file (JSON) for the holdfast strategies; default: $HOLDFAST_POLICY");
  cmd->add_flag("--check", a.check,
                "Run the built-in scenarios with the policy; exit 0 only when it is safe");

  CLI::Option_group* sc = cmd->add_option_group("Scenario");
  sc->add_option("--seed", a.seed, "Random seed (same seed, same results)");
  sc->add_option("--duration", a.duration, "Simulated time (e.g. 150s)");
  sc->add_option("--rps", a.rps, "Offered load, user requests per second");
  sc->add_option("--workers", a.workers, "Database workers (queries at once)");
  sc->add_option("--service", a.service, "Mean service time of one query (e.g. 5ms)");
  sc->add_option("--distribution", a.distribution, "exponential | lognormal | fixed");
  sc->add_option("--sigma", a.sigma, "Shape of the lognormal service time");
  sc->add_option("--queue-limit", a.queue_limit, "Queued attempts beyond which 53300 is returned");
  sc->add_option("--reject-latency", a.reject_latency, "Time for a refusal to reach the client");
  sc->add_flag("--drop-abandoned", a.drop_abandoned,
               "Skip queued work whose client already gave up (a pooler that notices)");
  sc->add_option("--timeout", a.timeout, "Client timeout of one attempt (e.g. 1s)");
  sc->add_option("--clients", a.clients, "Client processes");
  sc->add_flag("--shared", a.shared, "One breaker and throttle shared by all client processes");
  sc->add_option(
      "--trigger", a.trigger,
      "none | capacity-drop | spike | outage | hang | brownout | stragglers | slow-copy");
  sc->add_option("--trigger-start", a.trigger_start, "When the trigger starts (e.g. 20s)");
  sc->add_option("--trigger-length", a.trigger_length, "How long it lasts (e.g. 10s)");
  sc->add_option("--factor", a.factor,
                 "Capacity drop: service time x factor; spike: load x factor; stragglers: "
                 "their service time x factor; slow-copy: that copy's service time x factor");
  sc->add_option("--straggler-share", a.straggler_share,
                 "Stragglers: share of attempts that take factor x their service time");
  sc->add_option("--copies", a.copies,
                 "Copies of the database: a primary and copies - 1 standbys (default 1)");
  sc->add_option("--failure-ratio", a.failure_ratio, "Brownout: fraction of attempts refused");
  sc->add_option("--requests", a.requests, "Stop admitting requests after this many");
  sc->add_option("--recovery-goodput", a.recovery_goodput,
                 "Recovered: goodput at least this fraction of offered load");
  sc->add_option("--recovery-hold", a.recovery_hold, "... for this long in a row (e.g. 10s)");
  sc->add_option("--metastable-after", a.metastable_after,
                 "Not recovered within this long after the trigger: metastable");
  sc->add_option("--mix", a.mix,
                 "Request classes and their shares, e.g. critical:0.1,normal:0.8,background:0.1 "
                 "(each >= 0, summing to 1); the JSON then reports each class");

  CLI::Option_group* hf = cmd->add_option_group("holdfast strategy defaults");
  hf->add_option("--max-attempts", a.max_attempts, "Attempts per request (default 5)");
  hf->add_option("--window", a.window, "Retry window per request (default 6s)");
  hf->add_option("--threshold", a.threshold,
                 "Consecutive overload faults that open the breaker at low traffic (default 5)");
  hf->add_option("--health-probe", a.health,
                 "Run a HealthProbe this often while a breaker is open (default: none)");
  hf->add_flag("--no-throttle", a.no_throttle, "No retry throttle");
  hf->add_flag("--no-breaker", a.no_breaker, "No circuit breaker");

  cmd->callback([args, cmd] { run_sim(*args, *cmd); });
}

}  // namespace holdfast::cli
