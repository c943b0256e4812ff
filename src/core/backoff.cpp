#include "holdfast/core/backoff.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/random.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;

Duration scale(Duration d, double k) noexcept {
  return Duration(static_cast<Duration::rep>(static_cast<double>(d.count()) * k));
}

}  // namespace

Jitter Jitter::proportional(double ratio) {
  if (!(ratio >= 0.0 && ratio <= 1.0)) {
    throw std::invalid_argument("Jitter::proportional: ratio must be within [0, 1], got " +
                                std::to_string(ratio));
  }
  return Jitter(Kind::kProportional, ratio);
}

Backoff::Backoff() : Backoff(standard()) {}

Backoff::Backoff(std::vector<Duration> steps, Duration base, double factor, Duration cap,
                 Jitter jitter)
    : steps_(std::move(steps)), base_(base), factor_(factor), cap_(cap), jitter_(jitter) {}

Backoff Backoff::steps(std::vector<Duration> delays, Jitter jitter) {
  if (delays.empty()) throw std::invalid_argument("Backoff::steps: delays must not be empty");
  for (std::size_t i = 0; i < delays.size(); ++i) {
    if (delays[i] < Duration::zero()) {
      throw std::invalid_argument("Backoff::steps: delays[" + std::to_string(i) +
                                  "] must not be negative, got " + ms_text(delays[i]));
    }
  }
  const Duration first = delays.front();
  const Duration largest = *std::max_element(delays.begin(), delays.end());
  return Backoff(std::move(delays), first, 1.0, largest, jitter);
}

Backoff Backoff::exponential(Duration base, double factor, Duration cap, Jitter jitter) {
  if (base < Duration::zero()) {
    throw std::invalid_argument("Backoff::exponential: base must not be negative, got " +
                                ms_text(base));
  }
  if (!(factor >= 1.0) || !std::isfinite(factor)) {
    throw std::invalid_argument("Backoff::exponential: factor must be a finite number >= 1, got " +
                                std::to_string(factor));
  }
  if (cap < base) {
    throw std::invalid_argument("Backoff::exponential: cap (" + ms_text(cap) +
                                ") must not be less than base (" + ms_text(base) + ")");
  }
  return Backoff({}, base, factor, cap, jitter);
}

Backoff Backoff::standard() {
  return steps({milliseconds(200), milliseconds(600), milliseconds(1500), milliseconds(3000)},
               Jitter::proportional(0.5));
}

Backoff Backoff::session_reads() {
  return steps({milliseconds(150), milliseconds(500), milliseconds(1500), milliseconds(3000)},
               Jitter::proportional(0.5));
}

Duration Backoff::nominal(int retry) const noexcept {
  const int n = std::max(retry, 1);
  if (!steps_.empty()) {
    const std::size_t i = std::min(static_cast<std::size_t>(n - 1), steps_.size() - 1);
    return steps_[i];
  }
  // base * factor^(n-1), computed in double and capped before converting back.
  const double value = static_cast<double>(base_.count()) * std::pow(factor_, n - 1);
  if (!(value < static_cast<double>(cap_.count()))) return cap_;
  return Duration(static_cast<Duration::rep>(value));
}

Duration Backoff::max_delay() const noexcept {
  switch (jitter_.kind()) {
    case Jitter::Kind::kProportional:
      return scale(cap_, 1.0 + jitter_.ratio());
    default:
      return cap_;
  }
}

Duration Backoff::delay(int retry, Duration previous, Random& rng) const noexcept {
  const Duration d = nominal(retry);
  switch (jitter_.kind()) {
    case Jitter::Kind::kNone:
      return d;
    case Jitter::Kind::kProportional: {
      const double r = jitter_.ratio();
      return scale(d, rng.uniform(1.0 - r, 1.0 + r));
    }
    case Jitter::Kind::kFull:
      return scale(d, rng.uniform());
    case Jitter::Kind::kEqual:
      return d / 2 + scale(d - d / 2, rng.uniform());
    case Jitter::Kind::kDecorrelated: {
      const Duration lo = base_;
      const Duration prev = previous > Duration::zero() ? previous : base_;
      const Duration hi = std::max(lo, scale(prev, 3.0));
      const Duration drawn = lo + scale(hi - lo, rng.uniform());
      return std::min(drawn, cap_);
    }
  }
  return d;
}

}  // namespace holdfast
