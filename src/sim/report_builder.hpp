// Internal: a run's Report, counted as the events happen and completed at the end.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "holdfast/sim.hpp"
#include "latency_histogram.hpp"

namespace holdfast::sim::detail {

inline constexpr std::int64_t kSecondNs = 1'000'000'000;

// The per-second rows and the totals of one run. Seconds are closed in order; counts go to
// the one that is open (current()). Times are ns since the start of the run.
class ReportBuilder {
 public:
  ReportBuilder(const Scenario& scenario, std::string strategy);

  // The totals; the engine counts requests, attempts and breaker decisions here directly.
  [[nodiscard]] Report& out() noexcept { return out_; }
  // The open second.
  [[nodiscard]] Second& current() noexcept { return out_.seconds[closed_]; }
  // Where the open second ends.
  [[nodiscard]] std::int64_t next_second_ns() const noexcept { return next_second_ns_; }
  [[nodiscard]] bool all_closed() const noexcept { return closed_ == out_.seconds.size(); }

  // A request of class `p` arrived at `arrival_ns` (counted per class with a class mix).
  void arrived(Priority p, std::int64_t arrival_ns) noexcept {
    if (by_class_ && in_trigger(arrival_ns)) ++classes_[static_cast<std::size_t>(p)].requests;
  }
  // A request of class `p` that arrived at `arrival_ns` answered at `now_ns`.
  void succeeded(std::int64_t arrival_ns, std::int64_t now_ns,
                 Priority p = Priority::kNormal) noexcept {
    const auto micros = static_cast<std::uint64_t>((now_ns - arrival_ns) / 1000);
    second_latency_.add(micros);
    all_latency_.add(micros);
    if (in_trigger(arrival_ns)) {
      trigger_latency_.add(micros);
      if (by_class_) {
        ClassCounts& c = classes_[static_cast<std::size_t>(p)];
        ++c.successes;
        c.latency.add(micros);
      }
    }
    ++current().successes;
    ++out_.successes;
  }
  // An attempt (or a hedge) went to copy `c` at `now_ns`.
  void sent_to(int c, std::int64_t now_ns) noexcept {
    if (in_trigger(now_ns)) ++out_.attempts_by_copy[static_cast<std::size_t>(c)];
  }
  // A request that ended in an error `since_arrival_ns` after it arrived.
  void failed(std::int64_t since_arrival_ns, StopReason reason) noexcept {
    failed_latency_.add(static_cast<std::uint64_t>(since_arrival_ns / 1000));
    ++current().errors;
    ++out_.errors;
    ++out_.errors_by_reason[static_cast<std::size_t>(reason)];
  }
  // A finished request's database attempts; they count for the second it arrived in.
  void attempts_made(std::uint32_t arrival_second, std::uint32_t attempts) noexcept {
    attempts_by_arrival_[arrival_second] += attempts;
  }
  // A request still in flight when the run ended, with the attempts it made so far.
  void unfinished(std::uint32_t arrival_second, std::uint32_t attempts) noexcept;

  // Closes the open second with the state of the system at its end: the fraction of client
  // breakers not closed (none without breakers), the database's queue and busy workers.
  void close_second(std::optional<double> breakers_open, std::uint32_t queue,
                    std::uint32_t busy_workers) noexcept;

  // The figures over the whole run and over the trigger, and the recovery judgement.
  // REQUIRES: all_closed(). The builder is spent afterwards.
  [[nodiscard]] Report finish(std::uint64_t peak_event_queue);

 private:
  struct ClassCounts {
    std::uint64_t requests = 0;
    std::uint64_t successes = 0;
    LatencyHistogram latency;
  };
  [[nodiscard]] bool in_trigger(std::int64_t arrival_ns) const noexcept {
    return arrival_ns >= trigger_from_ns_ && arrival_ns < trigger_to_ns_;
  }

  const Scenario& sc_;
  Report out_;
  std::size_t closed_ = 0;
  std::int64_t next_second_ns_ = kSecondNs;
  std::vector<std::uint64_t> attempts_by_arrival_;  // per second of arrival
  // The trigger (all of the run when there is none): requests that arrive within it.
  std::int64_t trigger_from_ns_ = 0;
  std::int64_t trigger_to_ns_ = 0;
  LatencyHistogram second_latency_;
  LatencyHistogram all_latency_;
  LatencyHistogram trigger_latency_;  // successes of the requests that arrived in the trigger
  LatencyHistogram failed_latency_;
  // With a class mix: per class, the requests that arrived during the trigger.
  bool by_class_ = false;
  std::array<ClassCounts, kPriorities> classes_;
};

}  // namespace holdfast::sim::detail
