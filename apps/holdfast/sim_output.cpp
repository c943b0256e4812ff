// The results of `holdfast sim` as JSON and SVG (sim_output.hpp).
#include "sim_output.hpp"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "svg_plot.hpp"

namespace holdfast::cli {
namespace {

namespace sim = holdfast::sim;
using nlohmann::ordered_json;

double seconds_of(Duration d) {
  return std::chrono::duration<double>(d).count();
}

holdfast::svg::LineChart timeline(std::string title, std::string y_label) {
  holdfast::svg::LineChart c;
  c.title = std::move(title);
  c.x.label = "time (s)";
  c.y.label = std::move(y_label);
  return c;
}

holdfast::svg::Series line(std::string name, std::string color = {}, bool dashed = false) {
  holdfast::svg::Series s;
  s.name = std::move(name);
  s.color = std::move(color);
  s.dashed = dashed;
  return s;
}

}  // namespace

// The JSON document: the scenario, then per strategy the summary and the timeline as
// columns. Only wall_s (the run's real time) depends on the machine.

ordered_json sim_json(const sim::Scenario& s, const std::vector<sim::Report>& reports,
                      const std::vector<sim::Strategy>& strategies,
                      const std::vector<double>& walls) {
  ordered_json doc;
  ordered_json& sc = doc["scenario"];
  sc["name"] = s.name;
  sc["seed"] = s.seed;
  sc["offered_rps"] = s.offered_rps;
  sc["duration_s"] = seconds_of(s.duration);
  sc["workers"] = s.database.workers;
  sc["mean_service_ms"] = seconds_of(s.database.mean_service) * 1e3;
  sc["capacity_qps"] = s.database.workers / seconds_of(s.database.mean_service);
  sc["distribution"] = std::string(sim::to_string(s.database.distribution));
  sc["queue_limit"] = s.database.queue_limit;
  sc["copies"] = s.database.copies;
  sc["drop_abandoned"] = s.database.drop_abandoned;
  sc["attempt_timeout_s"] = seconds_of(s.attempt_timeout);
  sc["clients"] = s.clients;
  sc["shared_policies"] = s.shared_policies;
  ordered_json& tr = sc["trigger"];
  tr["kind"] = std::string(sim::to_string(s.trigger.kind));
  tr["start_s"] = seconds_of(s.trigger.start);
  tr["length_s"] = seconds_of(s.trigger.length);
  tr["factor"] = s.trigger.factor;
  tr["failure_ratio"] = s.trigger.failure_ratio;
  tr["straggler_share"] = s.trigger.straggler_share;
  if (s.class_mix) {
    ordered_json mix = ordered_json::object();
    for (std::size_t i = 0; i < s.class_mix->size(); ++i) {
      mix[std::string(holdfast::to_string(static_cast<holdfast::Priority>(i)))] = (*s.class_mix)[i];
    }
    sc["class_mix"] = std::move(mix);
  }
  sc["recovery"] = {{"goodput_ratio", s.recovery_goodput},
                    {"hold_s", seconds_of(s.recovery_hold)},
                    {"metastable_after_s", seconds_of(s.metastable_after)}};

  ordered_json& list = doc["strategies"];
  list = ordered_json::array();
  for (std::size_t k = 0; k < reports.size(); ++k) {
    const sim::Report& r = reports[k];
    const sim::Strategy& st = strategies[k];
    ordered_json j;
    j["name"] = r.strategy;
    j["recovery_s"] = r.recovery_s ? ordered_json(*r.recovery_s) : ordered_json(nullptr);
    j["metastable"] = r.metastable;
    j["amplification_max"] = r.amplification_max;
    j["amplification_during_trigger"] = r.amplification_during_trigger;
    j["goodput_during_trigger"] = r.goodput_during_trigger;
    j["goodput_limit_during_trigger"] = r.goodput_limit_during_trigger;
    j["efficiency"] =
        r.goodput_limit_during_trigger > 0.0 ? ordered_json(r.efficiency) : ordered_json(nullptr);
    j["failed_p50_ms"] = r.failed_p50_ms;
    j["failed_p99_ms"] = r.failed_p99_ms;
    j["wall_s"] = walls[k];
    j["errors"] = r.errors;
    j["kind"] = std::string(sim::to_string(st.kind));
    j["max_attempts"] = st.max_attempts;
    if (st.kind == sim::StrategyKind::kHoldfast) {
      j["window_s"] = seconds_of(st.window);
      j["throttle"] = st.throttle;
      j["breaker"] = st.breaker;
      j["breaker_threshold"] = st.breaker_threshold;  // 0: the breaker's default
      j["health_probe_interval_s"] = seconds_of(st.health_interval);
      j["hedge"] = st.hedge;
      j["hedge_quantile"] = st.hedge_quantile;
      j["eject"] = st.eject;
    }
    j["requests"] = r.requests;
    j["successes"] = r.successes;
    j["in_flight_at_end"] = r.in_flight_at_end;
    j["db_attempts"] = r.db_attempts;
    j["hedged_reads"] = r.hedged_reads;
    j["hedges_won"] = r.hedges_won;
    // Over the trigger (all of the run without one), per copy; copy 0 is the primary.
    j["attempts_by_copy"] = r.attempts_by_copy;
    j["breaker_rejections"] = r.breaker_rejections;
    j["breaker_waits"] = r.breaker_waits;
    if (st.kind == sim::StrategyKind::kHoldfast) {
      j["breakers"] = r.breakers;
      j["breaker_open_after_s"] = r.breaker_open_after_s;
    }
    ordered_json reasons = ordered_json::object();
    for (std::size_t i = 0; i < r.errors_by_reason.size(); ++i) {
      if (r.errors_by_reason[i] == 0) continue;
      reasons[std::string(holdfast::to_string(static_cast<holdfast::StopReason>(i)))] =
          r.errors_by_reason[i];
    }
    j["errors_by_reason"] = reasons;
    j["p99_ms"] = r.p99_ms;
    j["p99_during_trigger_ms"] = r.p99_during_trigger_ms;
    j["p999_ms"] = r.p999_ms;
    j["p999_during_trigger_ms"] = r.p999_during_trigger_ms;
    if (r.classes) {
      // Per class, over its requests that arrived during the trigger.
      ordered_json classes = ordered_json::object();
      for (std::size_t i = 0; i < r.classes->size(); ++i) {
        const sim::ClassReport& c = (*r.classes)[i];
        classes[std::string(holdfast::to_string(static_cast<holdfast::Priority>(i)))] = {
            {"requests", c.requests}, {"served_pct", c.served_pct}, {"p99_ms", c.p99_ms}};
      }
      j["classes"] = std::move(classes);
    }
    j["events"] = r.events;
    j["peak_in_flight"] = r.peak_in_flight;
    j["peak_event_queue"] = r.peak_event_queue;
    ordered_json& sec = j["seconds"];
    auto column = [&](const char* name, auto get) {
      ordered_json c = ordered_json::array();
      for (const sim::Second& x : r.seconds)
        c.push_back(get(x));
      sec[name] = std::move(c);
    };
    column("offered", [](const sim::Second& x) { return x.arrivals; });
    column("goodput", [](const sim::Second& x) { return x.successes; });
    column("errors", [](const sim::Second& x) { return x.errors; });
    column("db_attempts", [](const sim::Second& x) { return x.db_attempts; });
    column("amplification", [](const sim::Second& x) { return x.amplification; });
    column("unfinished", [](const sim::Second& x) { return x.unfinished; });
    column("p99_ms", [](const sim::Second& x) { return x.p99_ms; });
    column("breaker_open", [](const sim::Second& x) { return x.breaker_open; });
    column("queue", [](const sim::Second& x) { return x.queue; });
    list.push_back(std::move(j));
  }
  return doc;
}

std::string sim_svg(const sim::Scenario& s, const std::vector<sim::Report>& reports) {
  namespace svg = holdfast::svg;
  std::vector<svg::Span> spans;
  if (s.trigger.kind != sim::TriggerKind::kNone) {
    svg::Span span;
    span.from = seconds_of(s.trigger.start);
    span.to = seconds_of(s.trigger.end());
    span.label = std::string(sim::to_string(s.trigger.kind)) + " active";
    spans.push_back(span);
  }
  svg::LineChart goodput =
      timeline("scenario " + s.name + ": goodput (answered requests per second)", "requests/s");
  svg::LineChart amp = timeline(
      "amplification (database attempts per user request, by arrival second)", "attempts/request");
  svg::LineChart load =
      timeline("database load (attempts per second, refused ones included)", "attempts/s");
  svg::LineChart breaker =
      timeline("circuit breakers not closed (fraction of client processes)", "fraction");
  breaker.y.min = 0.0;
  breaker.y.max = 1.0;
  bool any_breaker = false;
  if (!reports.empty()) {
    svg::Series offered = line("offered load", "#888888", true);
    for (std::size_t i = 0; i < reports.front().seconds.size(); ++i) {
      offered.x.push_back(static_cast<double>(i) + 0.5);
      offered.y.push_back(reports.front().seconds[i].arrivals);
    }
    goodput.series.push_back(offered);
    svg::Series capacity = line("capacity", "#888888", true);
    const double cap = s.database.workers / seconds_of(s.database.mean_service);
    capacity.x = {0.0, seconds_of(s.duration)};
    capacity.y = {cap, cap};
    load.series.push_back(capacity);
  }
  for (const sim::Report& r : reports) {
    svg::Series g = line(r.strategy);
    svg::Series a = line(r.strategy);
    svg::Series l = line(r.strategy);
    svg::Series b = line(r.strategy);
    for (std::size_t i = 0; i < r.seconds.size(); ++i) {
      const sim::Second& x = r.seconds[i];
      const double t = static_cast<double>(i) + 0.5;
      g.x.push_back(t);
      g.y.push_back(x.successes);
      a.x.push_back(t);
      // Seconds whose requests were still in flight at the end are partial: left out.
      a.y.push_back(x.arrivals > 0 && x.unfinished == 0 ? x.amplification : std::nan(""));
      l.x.push_back(t);
      l.y.push_back(x.db_attempts);
      b.x.push_back(t);
      b.y.push_back(x.breaker_open);
      any_breaker = any_breaker || x.breaker_open > 0.0;
    }
    goodput.series.push_back(std::move(g));
    amp.series.push_back(std::move(a));
    load.series.push_back(std::move(l));
    breaker.series.push_back(std::move(b));
  }
  // Same colour for a strategy in every chart: the first two goodput/load lines are the
  // dashed references.
  for (std::size_t i = 0; i < reports.size(); ++i) {
    static constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c",
                                              "#9467bd", "#8c564b", "#e377c2", "#17becf"};
    const char* c = kColors[i % 8];
    goodput.series[i + 1].color = c;
    amp.series[i].color = c;
    load.series[i + 1].color = c;
    breaker.series[i].color = c;
  }
  for (svg::LineChart* c : {&goodput, &amp, &load, &breaker}) {
    c->spans = spans;
    c->x.min = 0.0;
    c->x.max = seconds_of(s.duration);
  }
  std::vector<svg::LineChart> charts = {goodput, amp, load};
  if (any_breaker) charts.push_back(breaker);
  return svg::render(charts);
}

}  // namespace holdfast::cli
