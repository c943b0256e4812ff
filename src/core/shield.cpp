#include "holdfast/shield.hpp"

#include <limits>
#include <stdexcept>
#include <string>

namespace holdfast {
namespace {

// Our own shedding: worth trying again later (HTTP 503), but never an overload fault, so
// it can never feed a breaker.
constexpr Fault kShedding{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, false};

// The line's target and interval in units of the normal latency, and their floors for a
// database that answers in a millisecond or two: CoDel's 5 ms target, and half its 100 ms
// interval (a network's round trip; a query's is shorter) (ADR 0033).
constexpr int kTargetLatencies = 3;
constexpr int kIntervalLatencies = 10;
constexpr Duration kTargetFloor = std::chrono::milliseconds(5);
constexpr Duration kIntervalFloor = std::chrono::milliseconds(50);
// Places free up at random moments: a wait expected to take all of what a waiter is given
// overruns it about one time in three (answer times spread like an exponential), and the
// waiter would learn it only then. A newcomer queues when three times its expected wait
// fits (an exponential wait exceeds three times its mean 5 % of the time), and a waiter is
// told to go when three times its wait no longer fits.
constexpr int kWaitMargin = 3;
// Classes (ADR 0035): a lower class passed over for this many places in a row while it waits
// gets the next one (its oldest waiter), so that no class starves while places change hands.
constexpr int kShareEvery = 8;

int line_of(Priority p) noexcept {
  return static_cast<int>(p);
}

}  // namespace

Shield::Options Shield::with_clock(Options options, Clock& clock) {
  if (options.queue_wait < Duration::zero()) {
    throw std::invalid_argument("Shield::Options::queue_wait must not be negative, got " +
                                ms_text(options.queue_wait));
  }
  if (options.probe_wait < Duration::zero()) {
    throw std::invalid_argument("Shield::Options::probe_wait must not be negative, got " +
                                ms_text(options.probe_wait));
  }
  options.reads.clock(clock);
  options.writes.clock(clock);
  return options;
}

Shield::Options Shield::Options::single_attempt() {
  Options o;
  o.breaker.failure_ratio = 1.0;
  o.breaker.minimum_calls = std::numeric_limits<int>::max();
  o.breaker.consecutive_failures = 0;
  o.breaker.busy_consecutive_failures = 0;
  constexpr int kUnlimited = 1 << 20;
  o.limit.initial = o.limit.min = o.limit.max = kUnlimited;
  o.reads = RetryPolicy::no_retry();
  o.reads.window(std::chrono::hours(1));
  o.writes = o.reads;
  o.queue_wait = Duration::zero();
  o.probe_wait = Duration::zero();
  return o;
}

Shield::Shield(std::string name, Clock& clock) : Shield(std::move(name), Options{}, clock) {}

Shield::Shield(std::string name, Options options, Clock& clock)
    : name_(std::move(name)),
      clock_(&clock),
      system_clock_(&clock == &Clock::system()),
      options_(with_clock(std::move(options), clock)),
      breaker_(options_.breaker, clock),
      limit_(options_.limit),
      throttle_(options_.throttle) {
  breaker_.add_listener([this](const BreakerTransition& t) { on_transition(t); });
  metrics_.attach(&breaker_, &throttle_, &limit_);
}

Shield::~Shield() = default;

std::string Shield::metrics_text() const {
  return metrics_.prometheus_text(name_);
}

void Shield::server_silent(TimePoint now) {
  last_overload_fast_.store(false, std::memory_order_relaxed);
  metrics_.count_silence();
  (void)breaker_.trip(now);
}

void Shield::server_back(TimePoint now, Duration latency) {
  CircuitBreaker::Permit permit = breaker_.acquire_health_probe(now);
  if (permit) permit.record(Status(), latency);
}

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

// ---- Call ------------------------------------------------------------------------------

RetryState& Shield::Call::state() {
  if (!state_) {
    if (rng_) {
      state_.emplace(*policy_, op_, window_, *rng_);
    } else {
      state_.emplace(*policy_, op_, window_);
    }
  }
  return *state_;
}

void Shield::Call::release_place() noexcept {
  holds_place_ = false;
  shield_->release_place();
}

void Shield::Call::abandon() noexcept {
  // Gone (cancelled, an exception): its wait says nothing about the line.
  if (queued_ && shield_->leave_queue(*this, TimePoint{})) holds_place_ = true;
  if (holds_place_) release_place();
}

Duration Shield::Call::attempt_time() const noexcept {
  return std::max(policy_->last_attempt_time(), 2 * shield_->limit_.normal_latency());
}

Shield::Admission Shield::Call::admit_after_wait(TimePoint now) {
  if (!shield_->leave_queue(*this, now)) return admit(now);
  // Handed a place: it is this call's, unless the breaker refuses it now.
  CircuitBreaker::Permit permit = shield_->breaker_.acquire(now);
  if (!permit) {
    shield_->release_place();
    return refused(permit, now);
  }
  return attempt(std::move(permit));
}

Shield::Admission Shield::Call::admit_slow(CircuitBreaker::Permit&& permit, TimePoint now) {
  Shield& shield = *shield_;
  if (!permit.is_probe()) return at_capacity(now);  // the permit goes unused: neutral
  // A probe: only for a caller whose window still covers an attempt, so that a probe that
  // fails tells about the database and not about the caller's window.
  if (window_ != nullptr && window_->is_open() && window_->remaining(now) < attempt_time()) {
    permit.cancel();
    shield.metrics_.count_window_spent();
    stop_ = StopReason::kWindowSpent;
    Status s(Code::kUnavailable,
             "the database of '" + shield.name_ +
                 "' is being probed; this request's window is too short to carry the probe",
             kShedding);
    s.with_stop(StopReason::kWindowSpent, attempts_, shield.breaker_.options().open_initial);
    return stop(StopReason::kWindowSpent, std::move(s));
  }
  shield.limit_.acquire();
  return attempt(std::move(permit));
}

Shield::Admission Shield::Call::wait(TimePoint now, TimePoint until) {
  // What the signal said before joining the line: a place handed to this call during
  // enqueue(), or by another thread right after it, notifies the signal, and a sleeper that
  // had read the generation after that notice would sleep until `until` (the end of its
  // wait) with its place granted.
  if (!signal_) signal_.emplace();
  const std::uint64_t seen = signal_->generation();
  shield_->enqueue(*this, now, until);
  Admission a;
  a.kind = Admission::Kind::kWait;
  a.until = until;
  a.wake = &*signal_;
  a.seen = seen;
  return a;
}

Shield::Admission Shield::Call::stop(StopReason reason, Status status) {
  stop_ = reason;
  Admission a;
  a.kind = Admission::Kind::kStop;
  a.status = std::move(status);
  return a;
}

Shield::Admission Shield::Call::at_capacity(TimePoint now) {
  Shield& shield = *shield_;
  const Priority priority = shield.priority_of(op_);
  // What the line allows this class now, and how many wait ahead of it (its class and the
  // higher ones: a lower class never delays it).
  const LineView line = shield.line_view(priority, now);
  const Duration expected = shield.limit_.expected_wait(line.ahead);
  // Queued, a request waits: its window opens now (window.hpp's rule).
  RetryWindow& window = state().window();
  window.open(now);
  // A first attempt queues for what the line allows its class (ADR 0035: critical the
  // interval; normal the target while the line stands, else the interval; background the
  // target, and nothing while it stands), given once, at its first wait. A request that waited for
  // the breaker's probe keeps its place in line while its window lasts: the database it waited for
  // is back, and the line moves at the pace it answers. Other retries do not queue: they use spare
  // capacity only.
  if ((attempts_ == 0 || waited_for_probe_) && shield.options_.queue_wait > Duration::zero()) {
    const TimePoint last_start = window.deadline() - attempt_time();
    if (waited_for_probe_) {
      // The estimate is of no use to a request that waited out the outage: the recent
      // latency is from before it. It waits for its turn while its window lasts.
      if (now < last_start) return wait(now, last_start);
    } else {
      if (queue_deadline_ == TimePoint{}) queue_deadline_ = now + line.allowance;
      const TimePoint until = std::min(queue_deadline_, last_start);
      const Duration need = kWaitMargin * expected;
      if (now + need <= until) return wait(now, until);
      // Not even what the line allows: overload, whatever the line's age. Background is
      // allowed less than the others: its being shed says nothing about them.
      if (now + need > queue_deadline_ && priority != Priority::kBackground) {
        shield.turned_away(now);
      }
    }
  }
  shield.metrics_.count_at_capacity(priority);
  const Duration retry_after = std::max<Duration>(expected, std::chrono::milliseconds(1));
  Status s(Code::kUnavailable,
           "the database of '" + shield.name_ + "' is at its capacity (" +
               std::to_string(static_cast<long long>(shield.limit_.limit())) +
               " calls at once); retry after " + ms_text(retry_after),
           kShedding);
  s.with_stop(StopReason::kAtCapacity, attempts_, retry_after);
  return stop(StopReason::kAtCapacity, std::move(s));
}

void Shield::Call::succeeded(CircuitBreaker::Permit&& permit, Duration latency) noexcept {
  if (holds_place_) release_place();
  ++attempts_;
  stop_ = StopReason::kNone;
  shield_->on_success(std::move(permit), latency);
  if (state_) state_->on_success();
}

bool Shield::Call::after_failure(CircuitBreaker::Permit&& permit, const Status& status,
                                 TimePoint t0, TimePoint& start, Status& stop) {
  Clock& clock = *shield_->clock_;
  const TimePoint end = clock.now();
  RetryDecision d = failed(std::move(permit), status, end, end - t0);
  if (!d.retry) {
    stop = std::move(d.status);
    return false;
  }
  clock.sleep_for(d.delay);
  start = clock.now();
  add_slept(start - end);
  return true;
}

RetryDecision Shield::Call::failed(CircuitBreaker::Permit&& permit, const Status& status,
                                   TimePoint now, Duration latency) {
  if (holds_place_) release_place();
  ++attempts_;
  queue_deadline_ = {};
  waited_for_probe_ = false;
  Shield& shield = *shield_;
  const Fault& fault = status.fault();
  const bool shedding = is_own_shedding(status);
  RetryState& st = state();
  if (permit.is_probe() && st.window().is_open() && now >= st.window().deadline()) {
    // The probe ran out of its caller's window: no evidence against the database.
    permit.cancel();
  } else {
    permit.record(status, latency);
  }
  // A refusal by holdfast itself (a pool in its reconnect backoff, an inner Shield) never
  // reached the database: no attempt in the metrics.
  if (!shedding) shield.metrics_.count_fault(fault);
  if (fault.overload && !shedding) {
    shield.last_overload_fast_.store(fault.pace == Pace::kFast, std::memory_order_relaxed);
    // Timed out with its work still on the database: a dropped call for the limit.
    if (fault.outcome == Outcome::kUnknown && latency > Duration::zero()) {
      shield.limit_.record(latency, true);
    }
  }
  if (fault.transient() && !shedding) shield.throttle_.record_failure();

  RetryDecision d = st.on_failure(status, now);
  if (!d.retry) {
    if (d.reason == StopReason::kPermanent && status.code() == Code::kCancelled) {
      d.reason = StopReason::kCancelled;
    }
    if (d.reason == StopReason::kWindowSpent) shield.metrics_.count_window_spent();
    stop_ = d.reason;
    d.status = st.give_up(Status(status), d.reason);
    return d;
  }
  // Retries use spare capacity: while the database has room to spare they go (admit()
  // checks the room); once it is busy, the throttle must allow them too.
  if (shield.limit_.busy() && !shield.throttle_.allow_retry(now)) {
    shield.metrics_.count_throttled();
    return stop_after_failure(
        st.give_up(Status(status), StopReason::kThrottled)
            .with_stop(StopReason::kThrottled, st.attempts(), shield.throttle_.retry_after(now)));
  }
  // The breaker is open now (this failure may have opened it) and the database is down
  // rather than locked: the retry would only be refused after its backoff. Answer now.
  const bool contention = shield.last_overload_fast_.load(std::memory_order_relaxed);
  if (!contention && shield.breaker_.state() != BreakerState::kClosed) {
    const Duration retry_after = shield.breaker_.retry_after(now);
    shield.metrics_.count_breaker_rejected();
    return stop_after_failure(st.give_up(Status(status), StopReason::kBreakerOpen)
                                  .with_stop(StopReason::kBreakerOpen, st.attempts(), retry_after));
  }
  shield.metrics_.count_retry();
  policy_->notify_retry(
      RetryEvent{op_.label, st.attempts(), d.delay, st.window().remaining(now), status});
  return d;
}

RetryDecision Shield::Call::stop_after_failure(Status status) {
  stop_ = status.stop_reason();
  RetryDecision d;
  d.reason = stop_;
  d.status = std::move(status);
  return d;
}

Shield::Admission Shield::Call::refused(const CircuitBreaker::Permit& permit, TimePoint now) {
  Shield& shield = *shield_;
  // The breaker changes its state before it wakes anyone: if it has changed since it
  // refused us, the refusal may be stale.
  if (shield.breaker_.generation() != permit.generation()) return admit(now);

  // Refused, a request waits or gives up: its window opens now (window.hpp's rule).
  RetryWindow& window = state().window();
  window.open(now);
  const Duration retry_after = permit.retry_after();
  // Waiting for the probe pays only when the breaker opened on lock contention (the holder
  // will let go), the probe is due soon, and the window covers it and one more attempt.
  // After a refused connection or a timeout the answer is now, with Retry-After.
  const bool contention = shield.last_overload_fast_.load(std::memory_order_relaxed);
  const bool open_or_probing =
      permit.state() == BreakerState::kOpen || permit.state() == BreakerState::kHalfOpen;
  // Half-open, the probe is out and may answer at any moment.
  const bool probing = permit.state() == BreakerState::kHalfOpen;
  if (contention && open_or_probing && (probing || retry_after <= shield.options_.probe_wait)) {
    const TimePoint until = now + std::min(retry_after, shield.options_.probe_wait);
    if (until <= window.deadline() - attempt_time()) {
      shield.metrics_.count_breaker_wait();
      waited_for_probe_ = true;
      return wait(now, until);
    }
  }

  shield.metrics_.count_breaker_rejected();
  std::string message = "circuit breaker of '" + shield.name_ + "' is ";
  message += to_string(permit.state());
  message += "; retry after " + ms_text(retry_after);
  Status s(Code::kUnavailable, std::move(message), kShedding);
  s.with_stop(StopReason::kBreakerOpen, attempts_, retry_after);
  return stop(StopReason::kBreakerOpen, std::move(s));
}

}  // namespace holdfast
