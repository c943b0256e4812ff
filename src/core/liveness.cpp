#include "holdfast/core/liveness.hpp"

#include <pthread.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "holdfast/core/shield.hpp"

namespace holdfast {
namespace {

void require_positive(Duration d, const char* field) {
  if (d <= Duration::zero()) {
    throw std::invalid_argument(std::string("Liveness::Options::") + field +
                                " must be greater than zero, got " + ms_text(d));
  }
}

void require_valid(const Liveness::Options& o) {
  require_positive(o.suspect_after, "suspect_after");
  require_positive(o.check_timeout, "check_timeout");
  require_positive(o.recheck, "recheck");
  require_positive(o.tick, "tick");
  if (o.suspect_max < o.suspect_after) {
    throw std::invalid_argument("Liveness::Options::suspect_max (" + ms_text(o.suspect_max) +
                                ") must not be below suspect_after (" + ms_text(o.suspect_after) +
                                ")");
  }
}

}  // namespace

Liveness::Liveness(Shield& shield, CheckFn check, ChangeFn on_change)
    : Liveness(shield, std::move(check), std::move(on_change), Options{}) {}

Liveness::Liveness(ChangeFn on_change, Options options)
    : shield_(nullptr), on_change_(std::move(on_change)), options_(options) {
  require_valid(options_);
  if (options_.each_wait) slots_ = std::make_unique<Slot[]>(kSlots);
  if (options_.background) {
    throw std::invalid_argument(
        "a Liveness without a Shield runs no thread of its own: Options::background must be "
        "false (the driver calls begin_check() and end_check())");
  }
}

Liveness::Liveness(Shield& shield, CheckFn check, ChangeFn on_change, Options options)
    : shield_(&shield),
      check_(std::move(check)),
      on_change_(std::move(on_change)),
      options_(options) {
  if (!check_) throw std::invalid_argument("Liveness needs a check");
  require_valid(options_);
  if (options_.each_wait) slots_ = std::make_unique<Slot[]>(kSlots);
  if (options_.background) {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "hf-liveness");  // seen in top -H and /proc
      loop();
    });
  }
}

Liveness::~Liveness() {
  stop();
}

void Liveness::stop() noexcept {
  if (stopping_.exchange(true)) return;
  stop_signal_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Duration Liveness::quiet_for(TimePoint now) const noexcept {
  if (waiting_.load(std::memory_order_relaxed) <= 0) return Duration::zero();
  const Duration quiet = now - TimePoint(Duration(quiet_since_ns_.load(std::memory_order_relaxed)));
  return std::max(quiet, Duration::zero());
}

std::uint32_t Liveness::take_slot(std::int64_t now_ns) noexcept {
  // From a place of this thread's own, so that waits on different threads rarely meet.
  static thread_local const std::uint32_t start =
      static_cast<std::uint32_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    const std::uint32_t at = (start + i) % kSlots;
    std::int64_t free = kFree;
    if (slots_[at].heard_ns.load(std::memory_order_relaxed) == kFree &&
        slots_[at].heard_ns.compare_exchange_strong(free, now_ns, std::memory_order_relaxed)) {
      return at;
    }
  }
  return kNoSlot;
}

Duration Liveness::longest_wait(TimePoint now) const noexcept {
  Duration longest = Duration::zero();
  if (!slots_) return longest;
  const std::int64_t now_ns = now.time_since_epoch().count();
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    const std::int64_t heard = slots_[i].heard_ns.load(std::memory_order_relaxed);
    if (heard != kFree) longest = std::max(longest, Duration(now_ns - heard));
  }
  return longest;
}

Duration Liveness::suspicion(TimePoint now, Duration waited) const noexcept {
  if (waited == Duration::max()) return quiet_for(now);
  // One wait's quiet time, counted from the last check the server answered at the latest: a
  // wait that was only slow then waits as long again before it asks again.
  const TimePoint answered(Duration(check_answered_ns_.load(std::memory_order_relaxed)));
  return std::min(waited, now - answered);
}

Duration Liveness::suspicion_threshold() const noexcept {
  // Doubled by every check the server answered while work still waited (a long lock, a
  // long query): a slow server pays one check per doubling, not one per suspect_after.
  const int answered = std::min(checks_answered_.load(std::memory_order_relaxed), 16);
  Duration threshold = options_.suspect_after;
  for (int i = 0; i < answered && threshold < options_.suspect_max; ++i)
    threshold *= 2;
  return std::min(threshold, options_.suspect_max);
}

Duration Liveness::check_due_in(TimePoint now, Duration waited) const noexcept {
  if (checking_.load(std::memory_order_acquire)) return Duration::zero();
  Duration left{};
  if (silent()) {
    if (quiet_since_ns_.load(std::memory_order_relaxed) >
        silent_since_ns_.load(std::memory_order_relaxed))
      return Duration::zero();  // heard from since the silence began
    left = options_.recheck -
           (now - TimePoint(Duration(last_check_end_ns_.load(std::memory_order_relaxed))));
  } else {
    left = suspicion_threshold() - suspicion(now, waited);
  }
  return std::max(left, Duration::zero());
}

bool Liveness::begin_check(TimePoint now, Duration waited) noexcept {
  if (checking_.exchange(true, std::memory_order_acq_rel)) return false;  // one at a time
  const std::int64_t now_ns = now.time_since_epoch().count();
  bool due = false;
  if (silent()) {
    if (quiet_since_ns_.load(std::memory_order_relaxed) >
        silent_since_ns_.load(std::memory_order_relaxed)) {
      // An exchange heard from the server since the silence began: it is back.
      found(CheckResult::kAnswered, now);
    } else {
      due = now_ns - last_check_end_ns_.load(std::memory_order_relaxed) >= options_.recheck.count();
    }
  } else {
    due = suspicion(now, waited) >= suspicion_threshold();
  }
  if (!due) {
    checking_.store(false, std::memory_order_release);
    return false;
  }
  checks_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Liveness::end_check(CheckResult result, TimePoint now) noexcept {
  found(result, now);
  checking_.store(false, std::memory_order_release);
}

bool Liveness::tick(TimePoint now) {
  if (!check_ || !begin_check(now, options_.each_wait ? longest_wait(now) : Duration::max())) {
    return false;
  }
  CheckResult result = CheckResult::kAnswered;
  try {
    result = check_(now + options_.check_timeout);
  } catch (...) {
    result = CheckResult::kAnswered;  // no evidence either way
  }
  end_check(result, (shield_ != nullptr ? shield_->clock() : Clock::system()).now());
  return true;
}

void Liveness::found(CheckResult result, TimePoint now) noexcept {
  const std::int64_t now_ns = now.time_since_epoch().count();
  last_check_end_ns_.store(now_ns, std::memory_order_relaxed);
  if (result == CheckResult::kSilent) {
    if (!silent()) {
      silent_since_ns_.store(now_ns, std::memory_order_relaxed);
      silent_.store(true, std::memory_order_release);
      silences_.fetch_add(1, std::memory_order_relaxed);
      try {
        if (shield_ != nullptr) shield_->server_silent(now);
      } catch (...) {
      }
      if (on_change_) on_change_(true);
    } else {
      // Still silent: the breaker stays open (a new period if the last one ran out).
      try {
        if (shield_ != nullptr) (void)shield_->breaker().trip(now);
      } catch (...) {
      }
    }
    return;
  }
  // Answered. The quiet time starts again now; while work still waits, the next suspicion
  // needs a longer one.
  quiet_since_ns_.store(now_ns, std::memory_order_relaxed);
  check_answered_ns_.store(now_ns, std::memory_order_relaxed);
  if (silent()) {
    silent_.store(false, std::memory_order_release);
    checks_answered_.store(0, std::memory_order_relaxed);
    if (on_change_) on_change_(false);
    try {
      if (shield_ != nullptr) shield_->server_back(now, Duration::zero());
    } catch (...) {
    }
    return;
  }
  checks_answered_.fetch_add(1, std::memory_order_relaxed);
}

void Liveness::loop() noexcept {
  Clock& clock = shield_->clock();
  while (!stopping_.load(std::memory_order_acquire)) {
    const std::uint64_t seen = stop_signal_.generation();
    if (stopping_.load(std::memory_order_acquire)) break;
    try {
      clock.sleep_until(clock.now() + options_.tick, &stop_signal_, seen);
    } catch (...) {
    }
    if (stopping_.load(std::memory_order_acquire)) break;
    try {
      (void)tick(clock.now());
    } catch (...) {
    }
  }
}

}  // namespace holdfast
