#include "holdfast/core/health_probe.hpp"

#include <pthread.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace holdfast {

HealthProbe::HealthProbe(CircuitBreaker& breaker, ProbeFn probe)
    : HealthProbe(breaker, std::move(probe), Options{}) {}

HealthProbe::HealthProbe(CircuitBreaker& breaker, ProbeFn probe, Options options)
    : breaker_(&breaker), probe_(std::move(probe)), options_(options) {
  if (!probe_) throw std::invalid_argument("HealthProbe: probe must not be empty");
  if (options_.interval <= Duration::zero()) {
    throw std::invalid_argument("HealthProbe::Options::interval must be greater than zero");
  }
  if (options_.background) {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "hf-probe");  // seen in top -H and /proc
      loop();
    });
  }
}

HealthProbe::~HealthProbe() {
  stop();
}

void HealthProbe::stop() noexcept {
  if (stopping_.exchange(true)) return;
  stop_signal_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Withdraw the announcement, so nobody waits for a probe that will not come.
  breaker_->expect_health_probes(TimePoint{}, Duration::zero());
}

HealthProbe::ProbeReport HealthProbe::probe_now() {
  Clock& clock = breaker_->clock();
  const TimePoint start = clock.now();
  CircuitBreaker::Permit permit = breaker_->acquire_health_probe(start);
  ProbeReport out;
  if (!permit) return out;
  out.ran = true;
  runs_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t before = breaker_->generation();
  try {
    out.status = probe_();
  } catch (const std::exception& e) {
    out.status = Status(Code::kUnknown, std::string("health probe threw: ") + e.what());
  } catch (...) {
    out.status = Status(Code::kUnknown, "health probe threw");
  }
  const Duration latency = clock.now() - start;
  if (out.status.ok()) {
    successes_.fetch_add(1, std::memory_order_relaxed);
    permit.record_success(latency);
    out.closed = breaker_->generation() != before && breaker_->state() == BreakerState::kClosed;
  } else {
    permit.record_failure(latency);
  }
  return out;
}

void HealthProbe::loop() noexcept {
  Clock& clock = breaker_->clock();
  TimePoint next = clock.now() + options_.interval;
  while (!stopping_.load(std::memory_order_acquire)) {
    breaker_->expect_health_probes(next, options_.interval);
    const std::uint64_t seen = stop_signal_.generation();
    if (stopping_.load(std::memory_order_acquire)) break;
    try {
      clock.sleep_until(next, &stop_signal_, seen);
    } catch (...) {
    }
    if (stopping_.load(std::memory_order_acquire)) break;
    try {
      (void)probe_now();
    } catch (...) {
      // probe_now() only throws on allocation failure; try again next time.
    }
    const TimePoint now = clock.now();
    next += options_.interval;
    if (next <= now) next = now + options_.interval;
  }
}

}  // namespace holdfast
