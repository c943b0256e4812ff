// Internal: the simulator's live requests, in slots that are reused after completion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/random.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "queues.hpp"

namespace holdfast::sim::detail {

inline constexpr std::uint32_t kNoSlot = std::numeric_limits<std::uint32_t>::max();

enum class Phase : std::uint8_t { kFree, kInAttempt, kWaiting, kWaitingForProbe };

// Where the request in a slot stands. Slots are reused; `tag` only ever grows, so an event
// scheduled for an earlier attempt (or an earlier request in the same slot) never matches
// again. Kept apart from Request, in one dense array: most stale events are dismissed by
// looking at this alone.
struct Mark {
  std::uint32_t tag = 0;
  Phase phase = Phase::kFree;
};

// holdfast: one request's window, its way through its client's Shield (which refers to
// the window) and the breaker permit of the attempt in flight.
struct Guarded {
  Guarded(Shield& shield, Operation op, Duration window_length, Clock& clock, Random rng)
      : window(window_length, clock), call(shield, shield.reads(), op, &window, rng) {}
  RetryWindow window;
  Shield::Call call;
  CircuitBreaker::Permit permit;
};

// One user request (the state that only live events touch).
struct Request {
  std::int64_t arrival = 0;
  std::int64_t attempt_start = 0;
  std::uint64_t id = 0;
  std::uint32_t arrival_second = 0;
  std::uint32_t client = 0;
  std::uint32_t next_free = kNoSlot;
  std::uint32_t db_attempts = 0;
  Priority priority = Priority::kNormal;  // its class (Scenario::class_mix)
  // The attempt in flight: the copy it went to, its leg there and, once hedged, the hedge's
  // (copies.hpp).
  std::int32_t copy = 0;
  bool hedged = false;
  std::uint8_t hedge_looks = 0;  // times it was looked at for a hedge
  LegRef legs[2];
  // none, naive, backoff: the retry loop's state (with a window of its own); holdfast:
  // the request's window, its way through its client's Shield and the permit in flight.
  std::variant<std::monostate, RetryState, Guarded> policy;
};

// The request slots and their marks. A slot's Request never moves (its Call refers to its
// own window): slots live in chunks that are never reallocated.
class RequestSlots {
 public:
  [[nodiscard]] Request& operator[](std::uint32_t i) noexcept {
    return chunks_[i >> kShift][i & kMask];
  }
  [[nodiscard]] const Request& operator[](std::uint32_t i) const noexcept {
    return chunks_[i >> kShift][i & kMask];
  }
  [[nodiscard]] Mark& mark(std::uint32_t i) noexcept { return marks_[i]; }
  [[nodiscard]] const Mark& mark(std::uint32_t i) const noexcept { return marks_[i]; }
  // Slots ever used (free or not).
  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }

  // A free slot: the last one released, else a new one. Its Request keeps whatever the
  // last request in it left, except `policy` (empty).
  std::uint32_t allocate() {
    if (free_ != kNoSlot) {
      const std::uint32_t s = free_;
      free_ = (*this)[s].next_free;
      return s;
    }
    marks_.emplace_back();
    if (size_ == (chunks_.size() << kShift)) {
      chunks_.push_back(std::make_unique<Request[]>(std::size_t{1} << kShift));
    }
    return size_++;
  }

  // Frees slot `s`: its events become stale and its policy state is destroyed.
  void release(std::uint32_t s) {
    Request& r = (*this)[s];
    marks_[s].phase = Phase::kFree;
    ++marks_[s].tag;
    r.policy.emplace<std::monostate>();
    r.next_free = free_;
    free_ = s;
  }

 private:
  static constexpr unsigned kShift = 10;
  static constexpr std::uint32_t kMask = (1u << kShift) - 1;
  std::vector<std::unique_ptr<Request[]>> chunks_;
  std::vector<Mark> marks_;  // per slot
  std::uint32_t size_ = 0;
  std::uint32_t free_ = kNoSlot;
};

// A request waiting for a breaker's probe or for a place under its Shield's concurrency
// limit, in the order the Shield queued it.
struct Waiter {
  std::uint32_t slot;
  std::uint32_t tag;
};

}  // namespace holdfast::sim::detail
