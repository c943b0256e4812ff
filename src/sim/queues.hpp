// Internal: the simulator's event queue and the database's job queue.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace holdfast::sim::detail {

enum class EventType : std::uint8_t {
  kArrival,      // the next user request arrives
  kAttempt,      // a request's wait (backoff, or for a probe) is over: try again
  kServiceDone,  // a worker finished the job (slot, tag)
  kRefused,      // the attempt's connection was refused (outage) and the client knows
  kTooMany,      // the attempt was refused with 53300 (queue full, brownout) and the client knows
  kTimeout,      // the attempt's client timeout
  kHealthProbe,  // Shield `slot`'s HealthProbe is due
  kFreeze,       // a hang starts: the database goes silent
  kThaw,         // the hang ends: frozen work resumes, queued work starts
  kLiveness,     // Shield `slot`'s Liveness watch looks (its tick)
  kHedge,        // a read's attempt has waited its copy's hedge delay: hedge it if allowed
};

struct Event {
  std::int64_t t;     // ns since the start of the run
  std::uint64_t seq;  // ties in the order they were scheduled
  std::uint32_t slot;
  std::uint32_t tag;
  EventType type;
};
static_assert(sizeof(Event) <= 32);

[[nodiscard]] inline bool before(const Event& a, const Event& b) noexcept {
  return a.t != b.t ? a.t < b.t : a.seq < b.seq;
}

// The pending events, popped in (time, scheduling order) order.
//
// Most events are scheduled a fixed delay after the present: client timeouts, refusals,
// and the retries of un-jittered schedules (naive: 0; Tenacity: 1 s, 2 s, 4 s). Events
// with the same delay arrive in time order, so each such delay gets a FIFO lane of its own
// (push_after). Everything else (service completions, jittered backoff, arrivals) goes to
// a 4-ary min-heap (push). Popping takes the earliest of the lane heads and the heap top:
// the order is exactly that of one heap ordered by (time, sequence number).
class EventQueue {
 public:
  void push(std::int64_t t, EventType type, std::uint32_t slot = 0, std::uint32_t tag = 0) {
    heap_push(Event{t, seq_++, slot, tag, type});
    grew();
  }
  // An event `delay` after `now` (which never decreases between calls).
  void push_after(std::int64_t now, std::int64_t delay, EventType type, std::uint32_t slot,
                  std::uint32_t tag) {
    const Event e{now + delay, seq_++, slot, tag, type};
    for (std::size_t i = 0; i < lane_count_; ++i) {
      if (lane_delay_[i] == delay) {
        lanes_[i].push(e);
        grew();
        return;
      }
    }
    if (lane_count_ < kLanes) {
      lane_delay_[lane_count_] = delay;
      lanes_[lane_count_++].push(e);
    } else {
      heap_push(e);
    }
    grew();
  }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  // REQUIRES: !empty().
  [[nodiscard]] const Event& top() noexcept {
    const Event* best = heap_.empty() ? nullptr : &heap_.front();
    source_ = kFromHeap;
    for (std::size_t i = 0; i < lane_count_; ++i) {
      if (lanes_[i].empty()) continue;
      const Event& head = lanes_[i].front();
      if (best == nullptr || before(head, *best)) {
        best = &head;
        source_ = i;
      }
    }
    return *best;
  }
  // Removes the event top() returned. REQUIRES: top() was called since the last change.
  void pop() noexcept {
    if (source_ == kFromHeap) {
      heap_pop();
    } else {
      lanes_[source_].pop();
    }
    --size_;
  }
  [[nodiscard]] std::uint64_t peak() const noexcept { return peak_; }
  // Events scheduled so far: every event scheduled from now on has a sequence number at
  // least this.
  [[nodiscard]] std::uint64_t scheduled() const noexcept { return seq_; }

 private:
  // A FIFO ring of events that grows by doubling.
  class Fifo {
   public:
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] const Event& front() const noexcept { return buf_[head_]; }
    [[nodiscard]] const Event& back() const noexcept {
      return buf_[(head_ + size_ - 1) & (buf_.size() - 1)];
    }
    void push(const Event& e) {
      if (size_ == buf_.size()) {
        std::vector<Event> bigger(buf_.empty() ? 256 : buf_.size() * 2);
        for (std::size_t i = 0; i < size_; ++i)
          bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
        buf_ = std::move(bigger);
        head_ = 0;
      }
      buf_[(head_ + size_) & (buf_.size() - 1)] = e;
      ++size_;
    }
    void pop() noexcept {
      head_ = (head_ + 1) & (buf_.size() - 1);
      --size_;
    }

   private:
    std::vector<Event> buf_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
  };

  static constexpr std::size_t kArity = 4;
  static constexpr std::size_t kLanes = 8;
  static constexpr std::size_t kFromHeap = kLanes;

  void grew() noexcept {
    ++size_;
    peak_ = std::max<std::uint64_t>(peak_, size_);
  }
  void heap_push(const Event& e) {
    heap_.push_back(e);
    std::size_t i = heap_.size() - 1;
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  void heap_pop() noexcept {
    const Event last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n == 0) return;
    std::size_t i = 0;
    for (;;) {
      const std::size_t first = i * kArity + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t end = std::min(first + kArity, n);
      for (std::size_t c = first + 1; c < end; ++c) {
        if (before(heap_[c], heap_[best])) best = c;
      }
      if (!before(heap_[best], last)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = last;
  }

  std::vector<Event> heap_;
  Fifo lanes_[kLanes];
  std::int64_t lane_delay_[kLanes] = {};
  std::size_t lane_count_ = 0;
  std::size_t source_ = kFromHeap;
  std::uint64_t seq_ = 0;
  std::uint64_t size_ = 0;
  std::uint64_t peak_ = 0;
};

inline constexpr std::uint32_t kNoLeg = 0xffffffffu;

// A leg (copies.hpp) as a request keeps it: its index and the generation it had then.
struct LegRef {
  std::uint32_t leg = kNoLeg;
  std::uint32_t generation = 0;
};

// One piece of work waiting in a copy's queue: a leg (copies.hpp) and its generation.
struct Job {
  std::uint32_t slot;
  std::uint32_t tag;
};

// A FIFO ring buffer that grows by doubling (it never holds more than queue_limit).
class JobQueue {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  void push(Job j) {
    if (size_ == buf_.size()) grow();
    buf_[(head_ + size_) & (buf_.size() - 1)] = j;
    ++size_;
  }
  Job pop() noexcept {
    const Job j = buf_[head_];
    head_ = (head_ + 1) & (buf_.size() - 1);
    --size_;
    return j;
  }

 private:
  void grow() {
    std::vector<Job> bigger(buf_.empty() ? 64 : buf_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i)
      bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<Job> buf_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace holdfast::sim::detail
