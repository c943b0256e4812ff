// The judges of a run: the physical limit of its goodput, and whether it recovered.
#include <algorithm>
#include <chrono>
#include <cstdint>

#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {
constexpr std::int64_t kSecondNs = 1'000'000'000;
}  // namespace

double goodput_limit(const Scenario& sc) noexcept {
  const DatabaseModel& db = sc.database;
  // Every copy can answer a read (the primary too: the routing's choice is not a limit).
  const int readers = db.copies;
  double capacity = readers * db.workers / std::chrono::duration<double>(db.mean_service).count();
  double offered = sc.offered_rps;
  switch (sc.trigger.kind) {
    case TriggerKind::kCapacityDrop:
      capacity /= sc.trigger.factor;
      break;
    case TriggerKind::kLoadSpike:
      offered *= sc.trigger.factor;
      break;
    case TriggerKind::kOutage:
    case TriggerKind::kHang:
      return 0.0;
    case TriggerKind::kSlowCopy:
      // The slow copy's share of the capacity shrinks; the others are untouched.
      capacity -= (1.0 - 1.0 / sc.trigger.factor) * capacity / readers;
      break;
    case TriggerKind::kStragglers:
      // Each attempt costs 1 + share x (factor - 1) service times on average.
      capacity /= 1.0 + sc.trigger.straggler_share * (sc.trigger.factor - 1.0);
      break;
    case TriggerKind::kBrownout:  // a refused attempt costs nothing: a retry can still go
    case TriggerKind::kNone:
      break;
  }
  return std::min(1.0, capacity / offered);
}

void judge_recovery(const Scenario& scenario, Report& report) {
  const auto& secs = report.seconds;
  const std::int64_t end_ns =
      scenario.trigger.kind == TriggerKind::kNone ? 0 : scenario.trigger.end().count();
  const std::size_t first = static_cast<std::size_t>((end_ns + kSecondNs - 1) / kSecondNs);
  const auto hold = static_cast<std::size_t>(
      std::max<std::int64_t>(1, (scenario.recovery_hold.count() + kSecondNs - 1) / kSecondNs));
  const std::size_t last_start =
      first + static_cast<std::size_t>(scenario.metastable_after.count() / kSecondNs);
  report.recovery_s.reset();
  std::size_t run = 0;
  for (std::size_t i = first; i < secs.size(); ++i) {
    const bool good = static_cast<double>(secs[i].successes) >=
                      scenario.recovery_goodput * static_cast<double>(secs[i].arrivals);
    if (!good) {
      run = 0;
      if (i >= last_start) break;  // a run starting later would start too late
      continue;
    }
    if (++run >= hold) {
      const std::size_t start = i + 1 - run;
      report.recovery_s =
          static_cast<double>(static_cast<std::int64_t>(start) * kSecondNs - end_ns) / 1e9;
      break;
    }
  }
  // Metastable: no recovery starting within metastable_after, and the run was long enough
  // to have seen one.
  const bool long_enough = secs.size() >= last_start + hold;
  report.metastable = !report.recovery_s && long_enough;
}

}  // namespace holdfast::sim
