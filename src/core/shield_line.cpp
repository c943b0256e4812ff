// The Shield's wait queue: the line of requests waiting for a place under the concurrency
// limit, one list per class, judged by how long its waiters wait (ADRs 0033, 0035).
#include <limits>

#include "shield_line.hpp"

namespace holdfast {

using namespace shield_detail;

// ---- the wait queue ----------------------------------------------------------------------

Duration Shield::queue_target() const noexcept {
  const Duration learned = kTargetLatencies * limit_.normal_latency();
  return std::min(options_.queue_wait, std::max(kTargetFloor, learned));
}

Duration Shield::queue_interval() const noexcept {
  const Duration learned = kIntervalLatencies * limit_.normal_latency();
  return std::min(options_.queue_wait, std::max(kIntervalFloor, learned));
}

bool Shield::standing_locked(TimePoint now) noexcept {
  bool standing = standing_.load(std::memory_order_relaxed);
  const Duration interval = queue_interval();
  if (standing) {
    // Overloaded until nothing has waited past the target for an interval.
    if (now - last_over_ >= interval) {
      standing = false;
      over_since_ = {};
    }
  } else if (over_since_ != TimePoint{} && now - over_since_ >= interval) {
    standing = true;  // waits stayed above the target for an interval
  }
  standing_.store(standing, std::memory_order_relaxed);
  return standing;
}

void Shield::over_target_locked(TimePoint now) noexcept {
  if (over_since_ == TimePoint{}) over_since_ = now;
  last_over_ = std::max(last_over_, now);
  (void)standing_locked(now);
}

void Shield::waited_locked(const Call& call, TimePoint now) noexcept {
  if (call.for_probe_ || now == TimePoint{}) return;  // waited for the database to come back
  if (now - call.queued_at_ > queue_target()) {
    over_target_locked(now);
  } else if (!standing_locked(now)) {
    over_since_ = {};  // a wait within the target: a burst, not a standing line
  }
}

Shield::LineView Shield::line_view(Priority p, TimePoint now) {
  std::lock_guard<std::mutex> lock(wait_mutex_);
  const bool standing = standing_locked(now);
  LineView v;
  switch (p) {
    case Priority::kCritical:  // may wait longer than the target: the interval
      v.allowance = queue_interval();
      break;
    case Priority::kNormal:
      v.allowance = standing ? queue_target() : queue_interval();
      break;
    case Priority::kBackground:  // shed as soon as the line stands; else the target
      v.allowance = standing ? Duration::zero() : queue_target();
      break;
  }
  for (int c = 0; c <= line_of(p); ++c)
    v.ahead += waiting_by_class_[c].load(std::memory_order_relaxed);
  return v;
}

Priority Shield::priority_by_label(Operation op) const noexcept {
  const auto it = options_.priorities.find(op.label);
  return it != options_.priorities.end() ? it->second : op.priority;
}

void Shield::turned_away(TimePoint now) {
  std::lock_guard<std::mutex> lock(wait_mutex_);
  overloaded_locked(now);
}

void Shield::overloaded_locked(TimePoint now) noexcept {
  over_target_locked(now);
  standing_.store(true, std::memory_order_relaxed);
}

void Shield::on_transition(const BreakerTransition& t) {
  metrics_.count_transition(t.to);
  // Open -> half-open admits only the probe, which is not waiting: it wakes nobody.
  if (t.to == BreakerState::kHalfOpen) return;
  bool woke = false;
  {
    std::lock_guard<std::mutex> lock(wait_mutex_);
    if (t.to == BreakerState::kClosed) {
      // The database answers again: as many waiters go as the limit has room for; the
      // others get the places their predecessors free, one by one.
      woke = grant_locked(t.at);
    } else {
      // Opened (or isolated): every waiter decides again, most of them to fail now.
      while (Call* first = first_locked()) {
        wake_locked(*first, false);
        woke = true;
      }
    }
  }
  if (woke) wakes_.notify_all();
}

Shield::Call* Shield::first_locked() const noexcept {
  for (Call* head : heads_) {
    if (head != nullptr) return head;
  }
  return nullptr;
}

Shield::Call* Shield::next_locked() noexcept {
  int top = 0;
  while (top < kPriorities && heads_[top] == nullptr)
    ++top;
  if (top == kPriorities) return nullptr;
  // The oldest waiter of the classes below the first one in line.
  Call* oldest = nullptr;
  for (int c = top + 1; c < kPriorities; ++c) {
    if (heads_[c] != nullptr && (oldest == nullptr || heads_[c]->queued_at_ < oldest->queued_at_)) {
      oldest = heads_[c];
    }
  }
  if (oldest == nullptr) {
    passed_ = 0;
    return heads_[top];
  }
  if (++passed_ >= kShareEvery) {
    passed_ = 0;
    return oldest;  // its share: passed over kShareEvery - 1 times in a row
  }
  return heads_[top];
}

Shield::Call* Shield::last_locked() const noexcept {
  for (int c = kPriorities - 1; c >= 0; --c) {
    if (tails_[c] != nullptr) return tails_[c];
  }
  return nullptr;
}

bool Shield::grant_locked(TimePoint now) noexcept {
  if (breaker_.state() != BreakerState::kClosed) return false;
  bool woke = false;
  while (first_locked() != nullptr &&
         static_cast<double>(limit_.in_flight()) + 1.0 <= std::max(limit_.limit(), 1.0)) {
    // Only background waits: room it may take is spare room (below retry_share), as when it
    // came. A place someone gives back still goes to it (release_place()).
    if (first_locked()->line_ == line_of(Priority::kBackground) && !limit_.has_room_for_retry()) {
      break;
    }
    Call& next = *next_locked();
    limit_.acquire();
    waited_locked(next, now);
    wake_locked(next, true);
    woke = true;
  }
  // The last in line (of the lowest class waiting) whose expected wait no longer fits what
  // it was given (the database answers slower, the limit shrank, a higher class came in
  // ahead of it): told now, not at the end of its wait. The lowest class goes first.
  for (Call* last = last_locked(); last != nullptr && !last->for_probe_; last = last_locked()) {
    std::int64_t ahead = -1;
    for (int c = 0; c <= last->line_; ++c)
      ahead += waiting_by_class_[c].load(std::memory_order_relaxed);
    if (now + kWaitMargin * limit_.expected_wait(ahead) <= last->until_) break;
    // Background was given less than the others: its wait running out says nothing of theirs.
    if (last->line_ != line_of(Priority::kBackground)) overloaded_locked(now);
    wake_locked(*last, false);
    woke = true;
  }
  return woke;
}

void Shield::enqueue(Call& call, TimePoint now, TimePoint until) {
  if (!call.signal_) call.signal_.emplace();
  bool woke = false;
  {
    std::lock_guard<std::mutex> lock(wait_mutex_);
    call.queued_at_ = now;
    call.until_ = until;
    call.for_probe_ = call.waited_for_probe_;
    const int line = line_of(priority_of(call.op_));
    call.line_ = static_cast<std::uint8_t>(line);
    call.prev_ = tails_[line];
    call.next_ = nullptr;
    if (tails_[line] != nullptr) {
      tails_[line]->next_ = &call;
    } else {
      heads_[line] = &call;
    }
    tails_[line] = &call;
    waiting_by_class_[line].fetch_add(1, std::memory_order_relaxed);
    call.linked_ = true;
    call.granted_ = false;
    call.woken_ = false;
    limit_.queued(1);
    call.queued_ = true;
    // Room under the limit (it grew, or places were freed before anyone queued): it goes
    // to the first in line, which may be this call.
    woke = grant_locked(now);
  }
  if (woke) wakes_.notify_all();
}

// REQUIRES: wait_mutex_ held and `call` linked. Unlinks it and wakes it (under the lock, so
// the call cannot be gone before its signal is notified).
void Shield::wake_locked(Call& call, bool granted) noexcept {
  const int line = call.line_;
  if (call.prev_ != nullptr) {
    call.prev_->next_ = call.next_;
  } else {
    heads_[line] = call.next_;
  }
  if (call.next_ != nullptr) {
    call.next_->prev_ = call.prev_;
  } else {
    tails_[line] = call.prev_;
  }
  waiting_by_class_[line].fetch_sub(1, std::memory_order_relaxed);
  call.next_ = call.prev_ = nullptr;
  call.linked_ = false;
  call.granted_ = granted;
  call.woken_ = true;
  limit_.queued(-1);
  call.signal_->notify_all();
}

bool Shield::leave_queue(Call& call, TimePoint now) {
  std::lock_guard<std::mutex> lock(wait_mutex_);
  call.queued_ = false;
  if (call.linked_) {
    waited_locked(call, now);  // its wait ended without a place
    wake_locked(call, false);  // leaves by itself: nobody else to notify
    return false;
  }
  const bool granted = call.granted_;
  call.granted_ = false;
  return granted;
}

void Shield::release_place() noexcept {
  if (limit_.queued() > 0) [[unlikely]] {
    bool woke = false;
    {
      const TimePoint now = clock_->now();  // how long the first waiter waited
      std::lock_guard<std::mutex> lock(wait_mutex_);
      if (first_locked() != nullptr && breaker_.state() == BreakerState::kClosed) {
        // The place goes to the first waiter of the highest class (or, for its share, to
        // the oldest of a class passed over), and only to it.
        Call& next = *next_locked();
        waited_locked(next, now);
        wake_locked(next, true);
        grant_locked(now);  // and any room the limit gained since, to the next ones
        woke = true;
      } else {
        limit_.release();
      }
    }
    if (woke) wakes_.notify_all();
    return;
  }
  limit_.release();
}

}  // namespace holdfast
