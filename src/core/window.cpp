#include "holdfast/core/window.hpp"

#include <stdexcept>

namespace holdfast {
namespace detail {
void window_length_not_positive() {
  throw std::invalid_argument("RetryWindow: length must be greater than zero");
}
}  // namespace detail

namespace {
std::int64_t ns_of(TimePoint t) noexcept {
  return t.time_since_epoch().count();
}
}  // namespace

void RetryWindow::open(TimePoint now) noexcept {
  std::int64_t expected = kClosed;
  const std::int64_t deadline = ns_of(now + length_);
  deadline_ns_.compare_exchange_strong(expected, deadline, std::memory_order_acq_rel);
}

void RetryWindow::cap(TimePoint deadline) noexcept {
  const std::int64_t wanted = ns_of(deadline);
  std::int64_t held = cap_ns_.load(std::memory_order_relaxed);
  while (wanted < held && !cap_ns_.compare_exchange_weak(held, wanted, std::memory_order_acq_rel,
                                                         std::memory_order_relaxed)) {
  }
}

TimePoint RetryWindow::cap() const noexcept {
  const std::int64_t c = cap_ns_.load(std::memory_order_acquire);
  return c == kClosed ? TimePoint::max() : TimePoint(Duration(c));
}

TimePoint RetryWindow::deadline() const noexcept {
  const std::int64_t d = deadline_ns_.load(std::memory_order_acquire);
  const std::int64_t c = cap_ns_.load(std::memory_order_acquire);
  const std::int64_t end = d < c ? d : c;
  return end == kClosed ? TimePoint::max() : TimePoint(Duration(end));
}

Duration RetryWindow::remaining(TimePoint now) const noexcept {
  const std::int64_t d = deadline_ns_.load(std::memory_order_acquire);
  const std::int64_t c = cap_ns_.load(std::memory_order_acquire);
  Duration left = d == kClosed ? length_ : TimePoint(Duration(d)) - now;
  if (c != kClosed) {
    const Duration to_cap = TimePoint(Duration(c)) - now;
    if (to_cap < left) left = to_cap;
  }
  return left > Duration::zero() ? left : Duration::zero();
}

void WritePosition::raise(std::uint64_t to_value, std::uint32_t to_timeline) noexcept {
  if (to_timeline != 0 && timeline != 0 && to_timeline != timeline) {
    if (to_timeline < timeline) return;
    value = to_value;
    timeline = to_timeline;
    return;
  }
  if (to_timeline != 0) timeline = to_timeline;
  if (to_value > value) value = to_value;
}

// The position is a sequence lock: readers never wait (they read again if a change ran
// meanwhile); changes, rare (one per commit), take turns by making the sequence odd.
struct RequestContext::State {
  State(Duration length, Clock& clock) : window(length, clock) {}
  RetryWindow window;
  std::atomic<std::uint32_t> sequence{0};
  std::atomic<std::uint64_t> value{0};
  std::atomic<std::uint32_t> timeline{0};
  std::atomic<bool> primary_only{false};
};

RequestContext::RequestContext(Duration length, Clock& clock)
    : state_(std::make_shared<State>(length, clock)) {}

RequestContext::RequestContext(Duration length, Clock& clock, TimePoint arrived)
    : RequestContext(length, clock) {
  state_->window.open(arrived);
}

RetryWindow& RequestContext::window() const noexcept {
  return state_->window;
}

WritePosition RequestContext::position() const noexcept {
  const State& s = *state_;
  for (;;) {
    const std::uint32_t before = s.sequence.load(std::memory_order_acquire);
    if ((before & 1U) != 0) continue;  // a change is being written
    WritePosition p;
    p.value = s.value.load(std::memory_order_relaxed);
    p.timeline = s.timeline.load(std::memory_order_relaxed);
    p.primary_only = s.primary_only.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.sequence.load(std::memory_order_relaxed) == before) return p;
  }
}

template <class Change>
void RequestContext::change_position(Change&& change) const noexcept {
  State& s = *state_;
  std::uint32_t seen = s.sequence.load(std::memory_order_relaxed);
  for (;;) {
    seen &= ~1U;
    if (s.sequence.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      break;
    }
  }
  std::atomic_thread_fence(std::memory_order_release);
  WritePosition p{s.value.load(std::memory_order_relaxed),
                  s.timeline.load(std::memory_order_relaxed),
                  s.primary_only.load(std::memory_order_relaxed)};
  change(p);
  s.value.store(p.value, std::memory_order_relaxed);
  s.timeline.store(p.timeline, std::memory_order_relaxed);
  s.primary_only.store(p.primary_only, std::memory_order_relaxed);
  s.sequence.store(seen + 2, std::memory_order_release);
}

void RequestContext::raise_position(std::uint64_t value, std::uint32_t timeline) const noexcept {
  change_position([&](WritePosition& p) { p.raise(value, timeline); });
}

void RequestContext::position_unknown() const noexcept {
  change_position([](WritePosition& p) { p.primary_only = true; });
}

void RequestContext::set_position(const WritePosition& position) const noexcept {
  change_position([&](WritePosition& p) { p = position; });
}

}  // namespace holdfast
