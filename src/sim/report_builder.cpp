#include "report_builder.hpp"

#include <algorithm>
#include <utility>

namespace holdfast::sim::detail {

ReportBuilder::ReportBuilder(const Scenario& scenario, std::string strategy) : sc_(scenario) {
  const auto seconds =
      static_cast<std::size_t>((scenario.duration.count() + kSecondNs - 1) / kSecondNs);
  out_.strategy = std::move(strategy);
  by_class_ = scenario.class_mix.has_value();
  out_.seconds.resize(seconds);
  out_.attempts_by_copy.assign(static_cast<std::size_t>(scenario.database.copies), 0);
  attempts_by_arrival_.assign(seconds, 0);
  trigger_to_ns_ = scenario.duration.count();
  if (scenario.trigger.kind != TriggerKind::kNone) {
    trigger_from_ns_ = scenario.trigger.start.count();
    trigger_to_ns_ = scenario.trigger.end().count();
  }
}

void ReportBuilder::unfinished(std::uint32_t arrival_second, std::uint32_t attempts) noexcept {
  attempts_by_arrival_[arrival_second] += attempts;
  ++out_.seconds[arrival_second].unfinished;
  ++out_.in_flight_at_end;
}

void ReportBuilder::close_second(std::optional<double> breakers_open, std::uint32_t queue,
                                 std::uint32_t busy_workers) noexcept {
  Second& sec = current();
  sec.p99_ms = second_latency_.quantile(0.99) / 1000.0;
  second_latency_.clear();
  if (breakers_open) sec.breaker_open = *breakers_open;
  sec.queue = queue;
  sec.busy_workers = busy_workers;
  ++closed_;
  next_second_ns_ += kSecondNs;
}

Report ReportBuilder::finish(std::uint64_t peak_event_queue) {
  const std::size_t count = out_.seconds.size();
  for (std::size_t i = 0; i < count; ++i) {
    Second& sec = out_.seconds[i];
    if (sec.arrivals > 0) {
      sec.amplification =
          static_cast<double>(attempts_by_arrival_[i]) / static_cast<double>(sec.arrivals);
    }
    // A second whose requests are not all done yet has not made all its attempts.
    if (sec.unfinished == 0) {
      out_.amplification_max = std::max(out_.amplification_max, sec.amplification);
    }
  }
  // The trigger's seconds (all of the run when there is no trigger).
  std::size_t from = 0;
  std::size_t to = count;
  if (sc_.trigger.kind != TriggerKind::kNone) {
    const std::int64_t start_ns = sc_.trigger.start.count();
    const std::int64_t end_ns = sc_.trigger.end().count();
    from = std::min(static_cast<std::size_t>(start_ns / kSecondNs), count);
    to = std::min(static_cast<std::size_t>((end_ns + kSecondNs - 1) / kSecondNs), count);
  }
  std::uint64_t arrivals = 0;
  std::uint64_t attempts = 0;
  std::uint64_t answered = 0;
  for (std::size_t i = from; i < to; ++i) {
    arrivals += out_.seconds[i].arrivals;
    attempts += attempts_by_arrival_[i];
    answered += out_.seconds[i].successes;
  }
  if (arrivals > 0) {
    out_.amplification_during_trigger =
        static_cast<double>(attempts) / static_cast<double>(arrivals);
    out_.goodput_during_trigger = static_cast<double>(answered) / static_cast<double>(arrivals);
  }
  out_.p99_ms = all_latency_.quantile(0.99) / 1000.0;
  out_.p999_ms = all_latency_.quantile(0.999) / 1000.0;
  out_.p99_during_trigger_ms = trigger_latency_.quantile(0.99) / 1000.0;
  out_.p999_during_trigger_ms = trigger_latency_.quantile(0.999) / 1000.0;
  if (by_class_) {
    std::array<ClassReport, kPriorities> classes;
    for (std::size_t i = 0; i < classes.size(); ++i) {
      const ClassCounts& c = classes_[i];
      classes[i].requests = c.requests;
      classes[i].successes = c.successes;
      if (c.requests > 0) {
        classes[i].served_pct =
            100.0 * static_cast<double>(c.successes) / static_cast<double>(c.requests);
      }
      classes[i].p99_ms = c.latency.quantile(0.99) / 1000.0;
    }
    out_.classes = classes;
  }
  out_.failed_p50_ms = failed_latency_.quantile(0.50) / 1000.0;
  out_.failed_p99_ms = failed_latency_.quantile(0.99) / 1000.0;
  out_.goodput_limit_during_trigger = goodput_limit(sc_);
  if (out_.goodput_limit_during_trigger > 0.0) {
    out_.efficiency = out_.goodput_during_trigger / out_.goodput_limit_during_trigger;
  }
  out_.peak_event_queue = peak_event_queue;
  judge_recovery(sc_, out_);
  return std::move(out_);
}

}  // namespace holdfast::sim::detail
