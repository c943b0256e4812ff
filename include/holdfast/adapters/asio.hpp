/// @file
/// holdfast over Asio: the Shield's retry loop for asynchronous code. Header-only; needs
/// standalone Asio 1.19 or later (tested with Debian's libasio-dev, 1.22), or Boost.Asio when
/// HOLDFAST_ASIO_BOOST is defined before this header is included. That switch only renames the
/// namespace and the headers, and needs Boost 1.77 or later (per-operation cancellation;
/// Debian 12 ships 1.81 as libboost1.81-dev besides its default 1.74). Both are tested: the
/// same tests run on standalone Asio and on Boost 1.81's Asio.
///
/// The caller gives an asynchronous attempt: a callable that starts one try of the work and
/// calls the Done<R> it is handed, once, with the outcome (R is Status or Result<T>).
/// async_run() drives a Shield::Call with it on an executor: the same admission, backoff,
/// window, throttle and breaker decisions as the synchronous Shield::run() (it is the same
/// Call), with every wait -- a backoff, a place under the concurrency limit, the breaker's
/// next probe -- an asio timer wait that holds no thread.
///
/// @code
///   asio::io_context io;
///   holdfast::Shield shield("main");
///   auto query = [&](holdfast::asio::Done<holdfast::Result<int>> done) {
///     my_driver.async_query("SELECT count(*) FROM games",
///                           [done = std::move(done)](holdfast::Result<int> r) mutable {
///                             done(std::move(r));
///                           });
///   };
///   // The completion-token form, in a coroutine:
///   holdfast::Result<int> n = co_await holdfast::asio::async_run<holdfast::Result<int>>(
///       io.get_executor(), shield, holdfast::Operation::read("games.count"), query,
///       asio::use_awaitable);
///   // The callback form: any callable void(R) is a completion token too.
///   holdfast::asio::async_run<holdfast::Result<int>>(
///       io.get_executor(), shield, holdfast::Operation::read("games.count"), query,
///       [](holdfast::Result<int> n) { /* ... */ });
/// @endcode
///
/// It completes with what Shield::run() would return: the attempt's success, or a failure
/// whose stop_reason() says why the loop gave up (and retry_after() for kBreakerOpen,
/// kThrottled, kAtCapacity). A failure of the attempt is retried by its Status's Fault, as
/// everywhere in holdfast; the attempt classifies its driver's errors (classify.hpp).
///
/// Cancellation: through the completion handler's cancellation slot (asio::bind_cancellation_slot
/// with an asio::cancellation_signal, or a parallel group / awaitable_operators). Any type of
/// cancellation (terminal, partial, total) ends the loop. During a wait it ends at once; during
/// an attempt it takes effect when the attempt calls Done (the attempt is not interrupted; a
/// success that arrives then is delivered as a success, so a write that was applied is never
/// reported as cancelled). Either way the operation completes with Code::kCancelled and
/// StopReason kCancelled, and its place in the Shield (queued, or under the concurrency limit)
/// is released before the handler runs.
///
/// Waking: a request that waits for a place or a probe goes the moment the Shield hands it
/// one (a probe succeeded, a place came free), when the attempt that caused it ran through
/// async_run in this process: no timer has to fire first. A wake caused elsewhere (a
/// synchronous Shield::run on another thread, a HealthProbe) is seen within
/// RunOptions::wake_poll.
///
/// Requirements: the Shield (and RunOptions' policy and window) outlive the operation; destroy
/// the io_context before the Shield, since an operation it destroys unfinished gives back its
/// place in the Shield then. The Shield should run on the system clock: its waits are real
/// timer waits. The executor runs one handler at a time for this operation: an io_context run
/// by one thread, or a strand. The attempt is called on the executor and must call Done
/// exactly once, from any thread (the result is dispatched back to the executor); a Done
/// dropped uncalled leaves the operation without completion. An exception thrown by the
/// attempt propagates out of the handler that called it (the io_context's run()), and the
/// operation ends without completion, its place in the Shield given back.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/version.hpp>
#if BOOST_VERSION < 107700
#error "holdfast/adapters/asio.hpp: HOLDFAST_ASIO_BOOST needs Boost 1.77 or later"
#endif
#include <boost/asio/async_result.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#else
#include <asio/version.hpp>
#if ASIO_VERSION < 101900
#error "holdfast/adapters/asio.hpp needs Asio 1.19 or later (per-operation cancellation)"
#endif
#include <asio/async_result.hpp>
#include <asio/basic_waitable_timer.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/compose.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#endif

#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/status.hpp"

/// holdfast's Shield retry loop for asynchronous code on Asio (see the top of asio.hpp).
namespace holdfast::asio {

namespace detail {
#if defined(HOLDFAST_ASIO_BOOST)
namespace net = ::boost::asio;
using error_code = ::boost::system::error_code;
#else
namespace net = ::asio;
using error_code = ::asio::error_code;
#endif
}  // namespace detail

/// The completion an attempt calls, once, with its outcome. Move-only; calling it a second
/// time, or on a moved-from Done, does nothing.
template <class R>
class Done {
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::asio::Done<R>: R must be holdfast::Status or holdfast::Result<T>");

 public:
  /// An empty Done: calling it does nothing.
  Done() = default;
  /// Wraps `f`, a callable void(R).
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Done>>>
  explicit Done(F&& f) : fn_(std::make_unique<Fn<std::decay_t<F>>>(std::forward<F>(f))) {}

  /// Delivers the outcome (the first call only; later calls do nothing).
  void operator()(R result) {
    std::unique_ptr<Base> fn = std::move(fn_);
    if (fn) fn->call(std::move(result));
  }
  /// True until it was called or moved from.
  [[nodiscard]] explicit operator bool() const noexcept { return fn_ != nullptr; }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual void call(R result) = 0;
  };
  template <class F>
  struct Fn final : Base {
    explicit Fn(F f) : f(std::move(f)) {}
    void call(R result) override { f(std::move(result)); }
    F f;
  };
  std::unique_ptr<Base> fn_;
};

/// Optional settings of one async_run.
struct RunOptions {
  /// The policy; null: shield.policy_for(op).
  const RetryPolicy* policy = nullptr;
  /// The retry window to draw from, e.g. one shared by every call of one request (a
  /// RequestContext's: `&context.window()`, which a deadline the request came with caps);
  /// null: a window of the operation's own (policy->window() long). Not the RequestScope's:
  /// a scope is per thread, and an asynchronous request is not.
  RetryWindow* window = nullptr;
  /// How often a waiter looks for a wake that did not come through async_run (see above).
  Duration wake_poll = std::chrono::milliseconds(20);
  /// When set, receives the call's RetryStats before the handler runs.
  RetryStats* stats = nullptr;
};

namespace detail {

// The requests of this process that wait (for a place or a probe), so that a Call ending in
// one async_run wakes those the Shield handed something to, on their own executors. Only a
// waiter whose own signal moved is poked.
class Waiters {
 public:
  struct Entry {
    const Shield* shield;
    const Signal* wake;          // what the waiter sleeps on (Shield::Admission::wake)
    std::uint64_t seen;          // its generation when the wait began
    std::function<void()> poke;  // posts a look at the waiter to its executor
  };
  using Handle = std::list<Entry>::iterator;

  static Waiters& instance() {
    static Waiters w;
    return w;
  }
  Handle add(Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.insert(entries_.end(), std::move(entry));
  }
  // The waiter waits again, on `wake` from `seen`.
  void rewait(Handle h, const Signal* wake, std::uint64_t seen) {
    std::lock_guard<std::mutex> lock(mutex_);
    h->wake = wake;
    h->seen = seen;
  }
  void remove(Handle h) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(h);
  }
  void poke(const Shield* shield) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry& e : entries_) {
      if (e.shield == shield && e.wake != nullptr && e.wake->generation() != e.seen) {
        e.seen = e.wake->generation();  // one poke per wake
        e.poke();
      }
    }
  }

 private:
  std::mutex mutex_;
  std::list<Entry> entries_;
};

// Runs `f` (a step of a Call that may wake waiters) and pokes the waiters when it did.
template <class F>
decltype(auto) waking(Shield& shield, F&& f) {
  const std::uint64_t before = shield.wakes().generation();
  struct After {
    Shield& shield;
    std::uint64_t before;
    ~After() {
      if (shield.wakes().generation() != before) Waiters::instance().poke(&shield);
    }
  } after{shield, before};
  return std::forward<F>(f)();
}

struct Begin {};  // the first step, posted to the executor
template <class R>
struct Attempted {  // the attempt called Done
  R result;
};

// Everything one async_run keeps between its steps. Heap-allocated and shared with the
// pokes posted to it: a Shield::Call must not move.
template <class R, class Executor, class Attempt>
struct State : std::enable_shared_from_this<State<R, Executor, Attempt>> {
  enum class Phase : std::uint8_t { kIdle, kAttempt, kBackoff, kWaiting };
  using Timer = net::basic_waitable_timer<std::chrono::steady_clock,
                                          net::wait_traits<std::chrono::steady_clock>, Executor>;

  State(const Executor& ex, Shield& s, Operation o, Attempt a, const RunOptions& opts)
      : timer(ex),
        shield(&s),
        op(o),
        attempt(std::move(a)),
        options(opts),
        call(std::in_place, s, opts.policy != nullptr ? *opts.policy : s.policy_for(o), o,
             opts.window) {}
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() { stop_waiting(); }

  // Looks at a poke, on the executor: a waiter the Shield woke stops its timer early.
  void poked() {
    if (phase == Phase::kWaiting && wake != nullptr && wake->generation() != seen) timer.cancel();
  }
  void start_waiting() {
    if (hook) return Waiters::instance().rewait(*hook, wake, seen);
    std::weak_ptr<State> weak = this->weak_from_this();
    Executor ex = timer.get_executor();
    hook = Waiters::instance().add({shield, wake, seen, [weak, ex] {
                                      net::post(ex, [weak] {
                                        if (std::shared_ptr<State> s = weak.lock()) s->poked();
                                      });
                                    }});
  }
  void stop_waiting() {
    if (hook) Waiters::instance().remove(*hook);
    hook.reset();
  }
  // Ends the Call (releasing its place in the Shield) and hands back what to complete with.
  R finish(R result) {
    stop_waiting();
    phase = Phase::kIdle;
    if (options.stats != nullptr) *options.stats = call->stats();
    waking(*shield, [&] { call.reset(); });
    return result;
  }
  R cancelled() {
    Status s(Code::kCancelled, "the retry of '" + std::string(op.label) + "' was cancelled");
    s.with_stop(StopReason::kCancelled, call->attempts());
    return finish(R(std::move(s)));
  }

  Timer timer;
  Shield* shield;
  Operation op;
  Attempt attempt;
  RunOptions options;
  std::optional<Shield::Call> call;
  CircuitBreaker::Permit permit;  // of the attempt in flight
  Phase phase = Phase::kIdle;
  TimePoint started{};  // of the attempt in flight, or of the wait
  TimePoint until{};    // kWaiting: the Shield's deadline for the wait
  const Signal* wake = nullptr;
  std::uint64_t seen = 0;
  std::optional<Waiters::Handle> hook;
};

// The composed operation: admit -> attempt -> succeeded / failed -> wait -> admit ...
template <class R, class Executor, class Attempt>
class RunOp {
  using S = State<R, Executor, Attempt>;
  using Phase = typename S::Phase;

 public:
  explicit RunOp(std::shared_ptr<S> state) : s_(std::move(state)) {}

  template <class Self>
  void operator()(Self& self) {
    self.reset_cancellation_state(net::enable_total_cancellation());
    Executor ex = s_->timer.get_executor();
    // Never complete inside the initiating function; every step runs on the executor.
    net::post(ex, [self = std::move(self)]() mutable { self(Begin{}); });
  }
  template <class Self>
  void operator()(Self& self, Begin) {
    step(self);
  }
  template <class Self>
  void operator()(Self& self, Attempted<R>&& done) {
    on_attempt(self, std::move(done.result));
  }
  template <class Self>
  void operator()(Self& self, error_code /*ec*/) {
    on_timer(self);
  }

 private:
  template <class Self>
  bool cancel_requested(Self& self) const {
    return self.get_cancellation_state().cancelled() != net::cancellation_type::none;
  }

  template <class Self>
  void step(Self& self) {
    // The attempt may call Done at once, and the operation complete inside it: the state
    // outlives this frame.
    const std::shared_ptr<S> keep = s_;
    S& s = *keep;
    if (cancel_requested(self)) return self.complete(s.cancelled());
    Clock& clock = s.shield->clock();
    Shield::Admission a = waking(*s.shield, [&] { return s.call->admit(clock.now()); });
    switch (a.kind) {
      case Shield::Admission::Kind::kAttempt: {
        s.stop_waiting();
        s.permit = std::move(a.permit);
        s.phase = Phase::kAttempt;
        s.started = clock.now();
        Executor ex = s.timer.get_executor();
        s.attempt(Done<R>([self = std::move(self), ex](R r) mutable {
          net::dispatch(ex, [self = std::move(self), r = std::move(r)]() mutable {
            self(Attempted<R>{std::move(r)});
          });
        }));
        return;
      }
      case Shield::Admission::Kind::kWait:
        s.phase = Phase::kWaiting;
        s.started = clock.now();
        s.until = a.until;
        s.wake = a.wake;
        s.seen = a.seen;
        s.start_waiting();
        if (s.wake != nullptr && s.wake->generation() != s.seen) return step(self);
        return arm(self);
      case Shield::Admission::Kind::kStop:
        return self.complete(s.finish(R(std::move(a.status))));
    }
  }

  // A wait for a place or a probe: until the Shield's deadline, looking for a wake that did
  // not come through a poke every wake_poll.
  template <class Self>
  void arm(Self& self) {
    S& s = *s_;
    const Duration left = s.until - s.shield->clock().now();
    const Duration poll = s.options.wake_poll > Duration::zero() ? s.options.wake_poll : left;
    s.timer.expires_after(std::max(Duration::zero(), std::min(left, poll)));
    s.timer.async_wait(std::move(self));
  }

  template <class Self>
  void on_attempt(Self& self, R r) {
    S& s = *s_;
    Clock& clock = s.shield->clock();
    const TimePoint end = clock.now();
    const Duration latency = end - s.started;
    if (is_ok(r)) {
      waking(*s.shield, [&] { s.call->succeeded(std::move(s.permit), latency); });
      return self.complete(s.finish(std::move(r)));
    }
    RetryDecision d = waking(
        *s.shield, [&] { return s.call->failed(std::move(s.permit), status_of(r), end, latency); });
    if (!d.retry) return self.complete(s.finish(R(std::move(d.status))));
    if (cancel_requested(self)) return self.complete(s.cancelled());
    s.phase = Phase::kBackoff;
    s.started = end;
    s.timer.expires_after(d.delay);
    s.timer.async_wait(std::move(self));
  }

  template <class Self>
  void on_timer(Self& self) {
    S& s = *s_;
    const TimePoint now = s.shield->clock().now();
    s.call->add_slept(now - s.started);
    s.started = now;
    if (cancel_requested(self)) return self.complete(s.cancelled());
    if (s.phase == Phase::kWaiting) {
      const bool woken = s.wake != nullptr && s.wake->generation() != s.seen;
      if (!woken && now < s.until) return arm(self);
      s.stop_waiting();
    }
    step(self);
  }

  std::shared_ptr<S> s_;
};

}  // namespace detail

/// Runs `attempt` under `shield` for `op` until it succeeds or the Shield stops it, waiting on
/// `ex` (see the top of this file). Completion signature: void(R). R defaults to Status;
/// Result<T> for an attempt that yields a value.
template <class R = Status, class Executor, class Attempt, class CompletionToken>
auto async_run(const Executor& ex, Shield& shield, Operation op, const RunOptions& options,
               Attempt&& attempt, CompletionToken&& token) {
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::asio::async_run<R>: R must be holdfast::Status or Result<T>");
  static_assert(std::is_invocable_v<std::decay_t<Attempt>&, Done<R>>,
                "holdfast::asio::async_run<R>: the attempt must be callable with Done<R>");
  using A = std::decay_t<Attempt>;
  auto state = std::make_shared<detail::State<R, Executor, A>>(
      ex, shield, op, std::forward<Attempt>(attempt), options);
  return detail::net::async_compose<CompletionToken, void(R)>(
      detail::RunOp<R, Executor, A>(std::move(state)), token, ex);
}

/// The same with the default RunOptions.
template <class R = Status, class Executor, class Attempt, class CompletionToken>
auto async_run(const Executor& ex, Shield& shield, Operation op, Attempt&& attempt,
               CompletionToken&& token) {
  return async_run<R>(ex, shield, op, RunOptions{}, std::forward<Attempt>(attempt),
                      std::forward<CompletionToken>(token));
}

}  // namespace holdfast::asio
