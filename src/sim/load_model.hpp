// Internal: the simulated world's random draws — when user requests arrive and how long the
// database takes over a query. Times are ns since the start of the run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "holdfast/core/random.hpp"
#include "holdfast/sim.hpp"

namespace holdfast::sim::detail {

// Poisson arrivals at `offered_rps`, times the spike's factor while a load spike lasts,
// spread over the client processes at random.
class Arrivals {
 public:
  Arrivals(const Scenario& sc, Random rng) noexcept
      : sc_(sc),
        rng_(rng),
        end_ns_(sc.duration.count()),
        spike_(sc.trigger.kind == TriggerKind::kLoadSpike),
        trigger_start_ns_(sc.trigger.start.count()),
        trigger_end_ns_(sc.trigger.end().count()) {}

  // The time of the arrival after `from`, or kNone when it falls at or after the end of
  // the run. The rate changes at the spike's edges: one Exp(1) draw of integrated rate is
  // spent across the pieces (time rescaling).
  static constexpr std::int64_t kNone = -1;
  [[nodiscard]] std::int64_t next_after(std::int64_t from) noexcept {
    double budget = -std::log1p(-rng_.uniform());
    std::int64_t t = from;
    for (;;) {
      std::int64_t edge = std::numeric_limits<std::int64_t>::max();
      if (spike_) {
        if (t < trigger_start_ns_) {
          edge = trigger_start_ns_;
        } else if (t < trigger_end_ns_) {
          edge = trigger_end_ns_;
        }
      }
      const double rate = rate_per_ns(t);
      const bool last_piece = edge == std::numeric_limits<std::int64_t>::max();
      if (last_piece || budget < rate * static_cast<double>(edge - t)) {
        const double dt = budget / rate;
        if (static_cast<double>(t) + dt >= static_cast<double>(end_ns_)) return kNone;
        return t + static_cast<std::int64_t>(dt);
      }
      budget -= rate * static_cast<double>(edge - t);
      t = edge;
    }
  }

  // The client process of the request arriving now (uniform over Scenario::clients).
  [[nodiscard]] std::uint32_t pick_client() noexcept {
    return static_cast<std::uint32_t>(
        ((rng_.next() >> 32) * static_cast<std::uint64_t>(sc_.clients)) >> 32);
  }

 private:
  [[nodiscard]] double rate_per_ns(std::int64_t t) const noexcept {
    double rate = sc_.offered_rps;
    if (spike_ && t >= trigger_start_ns_ && t < trigger_end_ns_) rate *= sc_.trigger.factor;
    return rate / 1e9;
  }

  const Scenario& sc_;
  Random rng_;
  const std::int64_t end_ns_;
  const bool spike_;
  const std::int64_t trigger_start_ns_;
  const std::int64_t trigger_end_ns_;
};

// Query service times drawn from DatabaseModel::distribution around mean_service.
class ServiceTimes {
 public:
  ServiceTimes(const Scenario& sc, Random rng) noexcept
      : db_(sc.database),
        factor_(sc.trigger.factor),
        rng_(rng),
        // The mean of the lognormal exp(mu + sigma Z) is exp(mu + sigma^2 / 2): keep it at
        // the configured mean.
        lognormal_mu_(std::log(static_cast<double>(sc.database.mean_service.count())) -
                      sc.database.lognormal_sigma * sc.database.lognormal_sigma / 2.0) {}

  // One query's service time in ns (at least 1); `slowed`: a capacity drop is in force
  // (service time x the trigger's factor).
  [[nodiscard]] std::int64_t draw(bool slowed) noexcept {
    double ns = static_cast<double>(db_.mean_service.count());
    switch (db_.distribution) {
      case ServiceDistribution::kExponential:
        ns *= -std::log1p(-rng_.uniform());
        break;
      case ServiceDistribution::kLognormal: {
        // Box-Muller, one normal per draw.
        const double u1 = 1.0 - rng_.uniform();
        const double u2 = rng_.uniform();
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        ns = std::exp(lognormal_mu_ + db_.lognormal_sigma * z);
        break;
      }
      case ServiceDistribution::kFixed:
        break;
    }
    if (slowed) ns *= factor_;
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(ns));
  }

 private:
  const DatabaseModel& db_;
  const double factor_;
  Random rng_;
  const double lognormal_mu_;
};

}  // namespace holdfast::sim::detail
