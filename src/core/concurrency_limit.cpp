#include "holdfast/core/concurrency_limit.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "holdfast/detail/stripes.hpp"

namespace holdfast {
namespace {

[[noreturn]] void bad_option(const char* field, const std::string& rule) {
  throw std::invalid_argument(std::string("ConcurrencyLimit::Options::") + field + " " + rule);
}

const ConcurrencyLimit::Options& validated(const ConcurrencyLimit::Options& o) {
  if (o.min < 1) bad_option("min", "must be at least 1, got " + std::to_string(o.min));
  if (o.max < o.min) {
    bad_option("max", "must be at least min (" + std::to_string(o.min) + "), got " +
                          std::to_string(o.max));
  }
  if (o.initial < o.min || o.initial > o.max) {
    bad_option("initial", "must be within [min, max], got " + std::to_string(o.initial));
  }
  if (!(o.tolerance >= 1.0) || !std::isfinite(o.tolerance)) {
    bad_option("tolerance", "must be a finite number >= 1, got " + std::to_string(o.tolerance));
  }
  if (!(o.smoothing > 0.0 && o.smoothing <= 1.0)) {
    bad_option("smoothing", "must be in (0, 1], got " + std::to_string(o.smoothing));
  }
  if (o.short_samples < 1) {
    bad_option("short_samples", "must be at least 1, got " + std::to_string(o.short_samples));
  }
  if (o.long_samples <= o.short_samples) {
    bad_option("long_samples",
               "must be greater than short_samples, got " + std::to_string(o.long_samples));
  }
  if (!(o.retry_share > 0.0 && o.retry_share <= 1.0)) {
    bad_option("retry_share", "must be in (0, 1], got " + std::to_string(o.retry_share));
  }
  return o;
}

// The allowance shrinks once the recent latency is more than this many times the tolerated
// one (tolerance x normal; 8 x the normal latency by default), in proportion to how far above
// it is. Measured in the simulator, seeds 1-6 (ADR 0045): at 8 many-clients kept 95-108 ms at
// p99, at 3 the capacity drop fell to 0.937 of its limit; 4 gives 79-87 ms and 0.956 or more.
constexpr double kCrowded = 4.0;

}  // namespace

// One cache line per stripe: the calls its owner started and those it finished (a call
// may finish on another thread than the one that started it: only the sums mean anything).
struct ConcurrencyLimit::Stripe {
  alignas(64) std::atomic<std::int64_t> counts[2] = {0, 0};
};

ConcurrencyLimit::ConcurrencyLimit() : ConcurrencyLimit(Options{}) {}

ConcurrencyLimit::ConcurrencyLimit(Options options)
    : options_(validated(options)),
      short_weight_(2.0 / (options.short_samples + 1.0)),
      long_weight_(2.0 / (options.long_samples / 50.0 + 1.0)),
      base_creep_(std::exp(std::log(1.5) / options.long_samples)),
      stripes_(new Stripe[detail::kStripes]),
      limit_(static_cast<double>(options.initial)) {}

ConcurrencyLimit::~ConcurrencyLimit() = default;

void ConcurrencyLimit::count(Counter which) noexcept {
  const unsigned s = detail::thread_stripe();
  std::atomic<std::int64_t>& cell = stripes_[s].counts[which];
  if (s < detail::kOwnedStripes) {
    cell.store(cell.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  } else {
    cell.fetch_add(1, std::memory_order_relaxed);
  }
}

std::int64_t ConcurrencyLimit::in_flight() const noexcept {
  std::int64_t sum = 0;
  for (unsigned s = 0; s < detail::kStripes; ++s) {
    sum += stripes_[s].counts[kStarted].load(std::memory_order_relaxed) -
           stripes_[s].counts[kFinished].load(std::memory_order_relaxed);
  }
  return std::max<std::int64_t>(sum, 0);
}

bool ConcurrencyLimit::has_room_for_retry() const noexcept {
  const double room = limit() * options_.retry_share;
  return static_cast<double>(in_flight()) + 1.0 <= std::max(room, 1.0);
}

void ConcurrencyLimit::queued(std::int64_t change) noexcept {
  if (queued_.fetch_add(change, std::memory_order_relaxed) + change > 0) {
    tight_.store(true, std::memory_order_relaxed);
    busy_.store(true, std::memory_order_relaxed);
  }
}

bool ConcurrencyLimit::try_acquire_tight(bool retry) noexcept {
  if (queued() > 0) return false;
  if (retry ? !has_room_for_retry() : static_cast<double>(in_flight()) + 1.0 > limit()) {
    return false;
  }
  count(kStarted);
  return true;
}

void ConcurrencyLimit::record(Duration latency, bool dropped) noexcept {
  const auto rtt = static_cast<double>(latency.count());
  if (!(rtt > 0.0)) return;
  double s = short_ns_.load(std::memory_order_relaxed);
  double base = long_ns_.load(std::memory_order_relaxed);
  const int seen = samples_.load(std::memory_order_relaxed);
  if (!dropped && seen < options_.short_samples) {
    // The first answers: both averages are their plain mean. One answer alone would set the
    // normal latency for minutes (it rises only by creeping): a lucky first answer of 10 us
    // (an exponential service of 5 ms gives one in 500) made every later latency look 100 x
    // too slow. A dropped call is no answer: its latency is the caller's timeout.
    samples_.store(seen + 1, std::memory_order_relaxed);
    s = seen == 0 ? rtt : s + (rtt - s) / (seen + 1);
    base = seen == 0 ? rtt : base + (rtt - base) / (seen + 1);
  } else if (base == 0.0) {
    s = rtt;  // a dropped call before any answer: no normal latency yet
  } else {
    // The normal latency: the low end of the recent (short-average) latency. It follows
    // lower latencies at once (averaged over long_samples / 50 samples, so one lucky run
    // does not set it; over the answers seen so far while there are fewer, so that a young
    // limit finds its low end within a hundred answers, not thousands) and higher ones only
    // by creeping up by half every long_samples samples, enough to follow a database that
    // got slower for good. It does not follow a queue, so a long overload cannot teach it
    // that the queue is normal.
    const int low_end = options_.long_samples / 50;
    double low_weight = long_weight_;
    if (!dropped && seen < low_end) {
      samples_.store(seen + 1, std::memory_order_relaxed);
      low_weight = std::max(low_weight, 2.0 / (seen + 1.0));
    }
    s += (rtt - s) * short_weight_;
    base = s < base ? base + (s - base) * low_weight : std::min(base * base_creep_, s);
  }
  short_ns_.store(s, std::memory_order_relaxed);
  long_ns_.store(base, std::memory_order_relaxed);

  const double limit = limit_.load(std::memory_order_relaxed);
  const auto in_flight = static_cast<double>(this->in_flight());
  double next = limit;
  if (dropped) {
    next = limit * (1.0 - options_.smoothing * 0.5);
  } else if (in_flight >= limit / 2.0 || s > options_.tolerance * base) {
    // Gradient2's step: shrink in proportion to how far the latency rose above normal (at
    // most by half), plus a queue allowance: a few calls may wait at the database so its
    // workers never idle between answers (fewer for a small limit).
    // The allowance is per process, so N processes queue N of them at the database; and
    // against a gradient clamped at 0.5 it holds the limit at 2 x allowance >= 4 whatever
    // the latency. Far above tolerance (kCrowded) the database already has a queue many
    // answers long: the allowance shrinks in proportion, and the limit can fall to its
    // minimum (ADR 0045).
    const double ratio = options_.tolerance * base / s;
    const double gradient = std::clamp(ratio, 0.5, 1.0);
    const double queue = std::clamp(std::sqrt(limit), 1.0, 4.0) * std::min(1.0, ratio * kCrowded);
    next = limit * (1.0 - options_.smoothing) + (limit * gradient + queue) * options_.smoothing;
  }
  next = std::clamp(next, static_cast<double>(options_.min), static_cast<double>(options_.max));
  limit_.store(next, std::memory_order_relaxed);
  const bool slow = s > options_.tolerance * base;
  const bool busy =
      (tight_.load(std::memory_order_relaxed) && in_flight >= next / 2.0) || queued() > 0;
  busy_.store(busy, std::memory_order_relaxed);
  tight_.store(slow || busy, std::memory_order_relaxed);
}

Duration ConcurrencyLimit::recent_latency() const noexcept {
  return Duration(static_cast<Duration::rep>(short_ns_.load(std::memory_order_relaxed)));
}

Duration ConcurrencyLimit::normal_latency() const noexcept {
  return Duration(static_cast<Duration::rep>(long_ns_.load(std::memory_order_relaxed)));
}

Duration ConcurrencyLimit::expected_wait(std::int64_t ahead) const noexcept {
  const double per_place = short_ns_.load(std::memory_order_relaxed) / std::max(limit(), 1.0);
  return Duration(static_cast<Duration::rep>(per_place * static_cast<double>(ahead + 1)));
}

}  // namespace holdfast
