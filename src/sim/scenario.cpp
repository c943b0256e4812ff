// Scenarios, strategies and their text forms.
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "baselines/parameters.hpp"
#include "drill_strategy.hpp"
#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Status invalid(std::string message) {
  return Status(Code::kInvalidArgument, std::move(message));
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool parse_int(std::string_view text, int& out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && p == end;
}

// Shares of a class mix may be written to two decimals: they must sum to 1 within this.
constexpr double kMixTolerance = 0.01;

// "" when `mix` is a valid class mix; otherwise what is wrong with it.
std::string mix_fault(const ClassMix& mix) {
  double sum = 0.0;
  for (std::size_t i = 0; i < mix.size(); ++i) {
    if (!(mix[i] >= 0.0) || !std::isfinite(mix[i])) {
      return "the share of " + std::string(to_string(static_cast<Priority>(i))) +
             " must be a number >= 0, got " + std::to_string(mix[i]);
    }
    sum += mix[i];
  }
  if (std::abs(sum - 1.0) > kMixTolerance) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", sum);
    return std::string("the shares must sum to 1, they sum to ") + text;
  }
  return {};
}

constexpr std::array<std::string_view, 6> kScenarioNames = {
    "capacity-drop", "spike", "outage", "hang", "brownout", "many-clients"};

}  // namespace

std::string_view to_string(ServiceDistribution d) noexcept {
  switch (d) {
    case ServiceDistribution::kExponential:
      return "exponential";
    case ServiceDistribution::kLognormal:
      return "lognormal";
    case ServiceDistribution::kFixed:
      return "fixed";
  }
  return "?";
}

std::string_view to_string(TriggerKind k) noexcept {
  switch (k) {
    case TriggerKind::kNone:
      return "none";
    case TriggerKind::kCapacityDrop:
      return "capacity-drop";
    case TriggerKind::kLoadSpike:
      return "spike";
    case TriggerKind::kOutage:
      return "outage";
    case TriggerKind::kBrownout:
      return "brownout";
    case TriggerKind::kHang:
      return "hang";
    case TriggerKind::kStragglers:
      return "stragglers";
    case TriggerKind::kSlowCopy:
      return "slow-copy";
  }
  return "?";
}

std::string_view to_string(StrategyKind k) noexcept {
  return baselines::to_string(detail::drill_strategy(k));
}

bool parse_distribution(std::string_view text, ServiceDistribution& out) noexcept {
  for (auto d : {ServiceDistribution::kExponential, ServiceDistribution::kLognormal,
                 ServiceDistribution::kFixed}) {
    if (text == to_string(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

bool parse_trigger(std::string_view text, TriggerKind& out) noexcept {
  for (auto k : {TriggerKind::kNone, TriggerKind::kCapacityDrop, TriggerKind::kLoadSpike,
                 TriggerKind::kOutage, TriggerKind::kBrownout, TriggerKind::kHang,
                 TriggerKind::kStragglers, TriggerKind::kSlowCopy}) {
    if (text == to_string(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

Status Scenario::validate() const {
  const DatabaseModel& db = database;
  if (!(offered_rps > 0.0) || !std::isfinite(offered_rps)) {
    return invalid("offered load (rps) must be a positive number");
  }
  if (duration < seconds(1)) return invalid("duration must be at least 1 s");
  if (duration > std::chrono::hours(24 * 30)) return invalid("duration must be at most 30 days");
  if (db.workers < 1) return invalid("database workers must be at least 1");
  if (db.mean_service <= Duration::zero()) return invalid("mean service time must be > 0");
  if (!(db.lognormal_sigma >= 0.0) || db.lognormal_sigma > 5.0) {
    return invalid("lognormal sigma must be within [0, 5]");
  }
  if (db.queue_limit < 0) return invalid("queue limit must not be negative");
  if (db.copies < 1 || db.copies > 16) return invalid("copies must be within [1, 16]");
  if (db.reject_latency <= Duration::zero()) return invalid("reject latency must be > 0");
  if (attempt_timeout <= Duration::zero()) return invalid("attempt timeout must be > 0");
  if (clients < 1) return invalid("clients must be at least 1");
  if (clients > 1'000'000) return invalid("clients must be at most 1000000");
  const Trigger& t = trigger;
  if (t.kind != TriggerKind::kNone) {
    if (t.start < Duration::zero()) return invalid("trigger start must not be negative");
    if (t.length <= Duration::zero()) return invalid("trigger length must be > 0");
    if ((t.kind == TriggerKind::kCapacityDrop || t.kind == TriggerKind::kLoadSpike ||
         t.kind == TriggerKind::kStragglers || t.kind == TriggerKind::kSlowCopy) &&
        (!(t.factor > 0.0) || !std::isfinite(t.factor) || t.factor > 1000.0)) {
      return invalid("trigger factor must be within (0, 1000]");
    }
    if (t.kind == TriggerKind::kBrownout && !(t.failure_ratio >= 0.0 && t.failure_ratio <= 1.0)) {
      return invalid("brownout failure ratio must be within [0, 1]");
    }
    if (t.kind == TriggerKind::kStragglers &&
        !(t.straggler_share >= 0.0 && t.straggler_share <= 1.0)) {
      return invalid("straggler share must be within [0, 1]");
    }
  }
  // What fits in memory and in a minute: a request in flight takes about 200 bytes, a
  // collapsed client keeps one for seconds (Tenacity-style waits), and four strategies run.
  const double seconds_total = std::chrono::duration<double>(duration).count();
  const bool spike = t.kind == TriggerKind::kLoadSpike;
  const double peak_rps = offered_rps * (spike ? t.factor : 1.0);
  if (peak_rps > 200'000) {
    return invalid("offered load (rps), times the spike factor, must be at most 200000 a second");
  }
  const double spike_extra =
      spike ? offered_rps * (t.factor - 1.0) * std::chrono::duration<double>(t.length).count()
            : 0.0;
  if (offered_rps * seconds_total + spike_extra > 2e7 && max_requests == 0) {
    return invalid(
        "offered load (rps) x duration must be at most 20000000 requests (or set "
        "a request limit)");
  }
  if (db.workers > 1'000'000) return invalid("database workers must be at most 1000000");
  if (db.queue_limit > 10'000'000) return invalid("queue limit must be at most 10000000");
  if (!(recovery_goodput > 0.0 && recovery_goodput <= 1.0)) {
    return invalid("recovery goodput must be within (0, 1]");
  }
  if (recovery_hold < seconds(1)) return invalid("recovery hold must be at least 1 s");
  if (metastable_after < Duration::zero()) return invalid("metastable-after must not be negative");
  if (class_mix) {
    if (std::string why = mix_fault(*class_mix); !why.empty()) return invalid("class mix: " + why);
  }
  return {};
}

std::span<const std::string_view> builtin_scenario_names() noexcept {
  return kScenarioNames;
}

Result<Scenario> builtin_scenario(std::string_view name) {
  // The common stage: 8 workers x 5 ms = 1600 queries/s of capacity, 1000 requests/s
  // offered (62% busy), a 1 s client timeout, a 10 s trigger at t = 20 s, 150 s in all
  // (room to see 100 s + 10 s of recovery after the trigger).
  Scenario s;
  s.name = std::string(name);
  s.trigger.start = seconds(20);
  s.trigger.length = seconds(10);
  if (name == "capacity-drop") {
    // The database gets 2x slower: 800 queries/s for 1000 requests/s.
    s.trigger.kind = TriggerKind::kCapacityDrop;
    s.trigger.factor = 2.0;
  } else if (name == "spike") {
    // 2.5x the load: 2500 requests/s against 1600 queries/s.
    s.trigger.kind = TriggerKind::kLoadSpike;
    s.trigger.factor = 2.5;
  } else if (name == "outage") {
    // The server restarts: every connection is refused for 10 s.
    s.trigger.kind = TriggerKind::kOutage;
  } else if (name == "hang") {
    // The server freezes (a paused VM, a blackholed network) for 10 s: no attempt is
    // answered or refused; each waits out its 1 s client timeout. At the thaw the frozen
    // work resumes, the abandoned part of it included.
    s.trigger.kind = TriggerKind::kHang;
  } else if (name == "brownout") {
    // 20% of attempts refused at random for 20 s while capacity is plentiful.
    s.trigger.kind = TriggerKind::kBrownout;
    s.trigger.failure_ratio = 0.2;
    s.trigger.length = seconds(20);
  } else if (name == "many-clients") {
    // 200 application processes, ten times the traffic and the database, and a capacity
    // drop (2x), with each process's breaker and throttle seeing only 1/200 of the traffic.
    s.offered_rps = 10000.0;
    s.database.workers = 80;
    s.database.queue_limit = 100000;
    s.clients = 200;
    s.trigger.kind = TriggerKind::kCapacityDrop;
    s.trigger.factor = 2.0;
  } else {
    std::string known;
    for (std::string_view n : kScenarioNames) {
      if (!known.empty()) known += ", ";
      known += n;
    }
    return Status(Code::kNotFound,
                  "unknown scenario '" + std::string(name) + "' (known: " + known + ")");
  }
  return s;
}

namespace {
Strategy strategy_of(std::string name, StrategyKind kind, int max_attempts) {
  Strategy s;
  s.name = std::move(name);
  s.kind = kind;
  s.max_attempts = max_attempts;
  return s;
}
}  // namespace

Strategy Strategy::none() {
  return strategy_of("none", StrategyKind::kNone, 1);
}

Strategy Strategy::naive() {
  return strategy_of("naive", StrategyKind::kNaive, baselines::kNaiveAttempts);
}

Strategy Strategy::backoff() {
  return strategy_of("backoff", StrategyKind::kBackoff, baselines::kBackoffAttempts);
}

Strategy Strategy::holdfast() {
  // The origin's read policy: 5 attempts, 200/600/1500/3000 ms, 6 s.
  Strategy s = strategy_of("holdfast", StrategyKind::kHoldfast, 5);
  s.window = seconds(6);
  return s;
}

Result<Duration> parse_duration(std::string_view text) {
  std::string_view number = text;
  double unit = 1e9;
  if (text.ends_with("ms")) {
    number.remove_suffix(2);
    unit = 1e6;
  } else if (text.ends_with("us")) {
    number.remove_suffix(2);
    unit = 1e3;
  } else if (text.ends_with("s")) {
    number.remove_suffix(1);
  } else if (text.ends_with("m")) {
    number.remove_suffix(1);
    unit = 60e9;
  }
  double value = 0.0;
  const char* end = number.data() + number.size();
  auto [p, ec] = std::from_chars(number.data(), end, value);
  if (number.empty() || ec != std::errc() || p != end || !std::isfinite(value) || value < 0.0 ||
      value * unit > 1e18) {
    std::string message = "'";
    message.append(text);
    message.append("' is not a duration (e.g. 250ms, 6s, 1.5s, 2m)");
    return invalid(std::move(message));
  }
  return Duration(static_cast<Duration::rep>(std::llround(value * unit)));
}

Result<ClassMix> parse_class_mix(std::string_view text) {
  static constexpr const char* kForm = " (e.g. critical:0.1,normal:0.8,background:0.1)";
  ClassMix mix{};
  std::array<bool, kPriorities> given{};
  const std::string whole(text);
  if (text.empty()) return invalid(std::string("class mix: empty") + kForm);
  while (!text.empty()) {
    const std::string_view item = text.substr(0, text.find(','));
    text.remove_prefix(std::min(text.size(), item.size() + 1));
    const std::size_t colon = item.find(':');
    const std::string name = lower(item.substr(0, colon));
    Priority p = Priority::kNormal;
    if (!parse_priority(name, p)) {
      return invalid("class mix '" + whole + "': '" + name +
                     "' is not a class (critical, normal, background)" + kForm);
    }
    const auto i = static_cast<std::size_t>(p);
    if (given[i]) return invalid("class mix '" + whole + "': " + name + " is given twice");
    given[i] = true;
    const std::string_view share =
        colon == std::string_view::npos ? std::string_view() : item.substr(colon + 1);
    double value = 0.0;
    const char* end = share.data() + share.size();
    auto [q, ec] = std::from_chars(share.data(), end, value);
    if (share.empty() || ec != std::errc() || q != end) {
      return invalid("class mix '" + whole + "': the share of " + name + " ('" +
                     std::string(share) + "') is not a number" + kForm);
    }
    mix[i] = value;
  }
  if (std::string why = mix_fault(mix); !why.empty()) {
    return invalid("class mix '" + whole + "': " + why);
  }
  return mix;
}

Status Strategy::validate() const {
  if (max_attempts < 1 || max_attempts > 1000) {
    return invalid("attempts must be a whole number within [1, 1000]");
  }
  if (window <= Duration::zero()) return invalid("window must be > 0");
  if (breaker_threshold < 0 || breaker_threshold > 1'000'000) {
    return invalid("threshold must be a whole number within [1, 1000000] (0: the default)");
  }
  if (health_interval != Duration::zero() &&
      (health_interval < std::chrono::milliseconds(1) || health_interval > std::chrono::hours(1))) {
    return invalid("health probe interval must be within [1ms, 1h] (or 0: no probe)");
  }
  if (silence_after != Duration::zero() &&
      (silence_after < std::chrono::milliseconds(1) || silence_after > std::chrono::hours(1))) {
    return invalid("silence_after must be within [1ms, 1h] (or 0: no liveness watch)");
  }
  if (!(hedge_quantile > 0.0 && hedge_quantile < 1.0)) {
    return invalid("hedge quantile must be within (0, 1)");
  }
  if (!(hedge_budget >= 0.0 && hedge_budget <= 1.0)) {
    return invalid("hedge budget must be within [0, 1]");
  }
  if (hedge_min_delay < std::chrono::microseconds(1) || hedge_min_delay > std::chrono::hours(1)) {
    return invalid("hedge_min_delay must be within [1us, 1h]");
  }
  return Status();
}

Result<Strategy> parse_strategy(std::string_view text, const Strategy& base_holdfast) {
  const std::string_view kind = text.substr(0, text.find(':'));
  baselines::Strategy named{};
  if (!baselines::parse_strategy(kind, named) || named == baselines::Strategy::kOriginBreaker) {
    return invalid("unknown strategy '" + std::string(kind) +
                   "' (known: none, naive, backoff, holdfast)");
  }
  Strategy s;
  switch (named) {
    case baselines::Strategy::kNone:
      s = Strategy::none();
      break;
    case baselines::Strategy::kNaive:
      s = Strategy::naive();
      break;
    case baselines::Strategy::kBackoff:
    case baselines::Strategy::kOriginBreaker:
      s = Strategy::backoff();
      break;
    case baselines::Strategy::kHoldfast:
      s = base_holdfast;
      s.kind = StrategyKind::kHoldfast;
      break;
  }
  s.name = std::string(text);
  std::string_view rest = text.substr(kind.size());
  while (!rest.empty()) {
    rest.remove_prefix(1);  // ':'
    const std::string_view item = rest.substr(0, rest.find(':'));
    rest.remove_prefix(item.size());
    const std::size_t eq = item.find('=');
    const std::string key = lower(item.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    const bool holdfast = s.kind == StrategyKind::kHoldfast;
    const std::string where = "strategy '" + std::string(text) + "': ";
    // Ranges are checked once, by Strategy::validate() below.
    if (key == "attempts" && s.kind != StrategyKind::kNone) {
      if (!parse_int(value, s.max_attempts)) {
        return invalid(where + "attempts must be a whole number within [1, 1000]");
      }
    } else if (key == "window" && holdfast) {
      Result<Duration> d = parse_duration(value);
      if (!d.ok()) return invalid(where + std::string(d.status().message()));
      s.window = *d;
    } else if (key == "threshold" && holdfast) {
      // 0 is the breaker's default: written out, it is a mistake.
      if (!parse_int(value, s.breaker_threshold) || s.breaker_threshold < 1) {
        return invalid(where + "threshold must be a whole number within [1, 1000000]");
      }
    } else if (key == "health" && holdfast) {
      Result<Duration> d = parse_duration(value);
      if (!d.ok()) return invalid(where + std::string(d.status().message()));
      s.health_interval = *d;
    } else if (key == "no-throttle" && holdfast && value.empty()) {
      s.throttle = false;
    } else if (key == "no-breaker" && holdfast && value.empty()) {
      s.breaker = false;
    } else if (key == "no-hedge" && holdfast && value.empty()) {
      s.hedge = false;
      s.eject = false;
    } else if (key == "no-eject" && holdfast && value.empty()) {
      s.eject = false;
    } else if (key == "hedge-quantile" && holdfast) {
      const char* end = value.data() + value.size();
      auto [p, ec] = std::from_chars(value.data(), end, s.hedge_quantile);
      if (value.empty() || ec != std::errc() || p != end) {
        return invalid(where + "hedge-quantile must be a number within (0, 1)");
      }
    } else {
      return invalid(
          where + "'" + std::string(item) + "' is not a setting of " + std::string(kind) +
          (holdfast ? " (attempts=N, window=D, threshold=N, health=D, "
                      "no-throttle, no-breaker, no-hedge, no-eject, hedge-quantile=Q)"
                    : (s.kind == StrategyKind::kNone ? " (it has none)" : " (attempts=N)")));
    }
  }
  if (Status checked = s.validate(); !checked.ok()) {
    return invalid("strategy '" + std::string(text) + "': " + std::string(checked.message()));
  }
  return s;
}

Result<std::vector<Strategy>> parse_strategies(std::string_view list,
                                               const Strategy& base_holdfast) {
  std::vector<Strategy> out;
  while (!list.empty()) {
    const std::string_view item = list.substr(0, list.find(','));
    list.remove_prefix(std::min(list.size(), item.size() + 1));
    if (item.empty()) continue;
    Result<Strategy> s = parse_strategy(item, base_holdfast);
    if (!s.ok()) return s.status();
    for (const Strategy& seen : out) {
      if (seen.name == s->name) return invalid("strategy '" + s->name + "' is listed twice");
    }
    out.push_back(std::move(*s));
  }
  if (out.empty()) return invalid("no strategy given (e.g. none,naive,backoff,holdfast)");
  return out;
}

}  // namespace holdfast::sim
