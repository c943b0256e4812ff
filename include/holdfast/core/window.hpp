/// @file
/// RetryWindow, RequestContext and RequestScope: one retry budget per request.
///
/// One shared retry window per request (6 s by default): every retry inside one page
/// render draws from one window, opened by the first transient fault, so a page that runs
/// three groups of queries waits at most ~6 s instead of 3 x 6 s.
///
/// @code
///   {
///     holdfast::RequestScope scope;              // 6 s, opened at the first transient fault
///     auto games = db.query(...);                // every retry loop below shares the window
///     auto user  = sessions.read(...);
///   }
/// @endcode
///
/// Scopes nest: an inner RequestScope shares the outer window (it never extends or resets
/// it). The current scope is thread-local; to hand the window to work on another thread,
/// adopt it there with RequestScope(RetryWindow&) while the owner is alive. Outside any
/// scope (a cron job) each retry loop gets a window of its own.
///
/// A request whose work moves between threads (an event loop's coroutine, jobs on a pool, a
/// hedged read) carries a RequestContext instead: one copyable object with the request's
/// window, its read-your-writes position and the deadline it came with. Copies share the one
/// request; a RequestScope(context) makes it current on a thread for the blocking calls there.
///
/// @code
///   holdfast::RequestContext request(holdfast::RetryWindow::kDefaultLength,
///                                    holdfast::Clock::system(), arrived);
///   request.cap_deadline(arrived + upstream_timeout);  // the proxy gives up then: so do we
///   pool.post([request] {                              // a copy: the same request
///     holdfast::RequestScope scope(request);           // its window and position, here
///     auto rows = db.read(...);
///   });
/// @endcode
///
/// The one rule for opening a window (docs/adr/0011-one-rule-for-the-request-window.md): a
/// server that knows when a request arrived opens it then (RequestScope(length, clock,
/// arrived): queue time counts, ADR 0023); otherwise it opens when the request first waits
/// on the database -- for a lock, the writer, a pooled
/// connection, a place under the concurrency limit, a probe, or the backoff after a transient
/// fault -- and every such wait is bounded by what the window has left. Where a driver cannot
/// see a wait begin (a PostgreSQL statement waits for locks inside the server), the wait is
/// taken to begin when the statement is sent. Components open a window only with open() (a
/// wait bounded by the window alone: a backoff, a queue, a probe) or begin_wait() (a wait with
/// a bound of its own, such as busy_timeout); none re-derives the rule.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "holdfast/core/clock.hpp"

namespace holdfast {

/// One retry budget: a length of time that starts running when the window opens (see the
/// top of this file). Shared by reference, never copied; its methods may be called from any
/// thread.
class RetryWindow {
 public:
  /// The default window: 6 s.
  static constexpr Duration kDefaultLength = std::chrono::seconds(6);

  /// REQUIRES: length > 0, else std::invalid_argument.
  explicit RetryWindow(Duration length = kDefaultLength, Clock& clock = Clock::system());
  RetryWindow(const RetryWindow&) = delete;
  RetryWindow& operator=(const RetryWindow&) = delete;

  /// Opens the window at `now` unless it is already open. Thread-safe: the first call wins.
  void open(TimePoint now) noexcept;
  /// Caps the window at `deadline`: the time by which the request's sender stops waiting,
  /// when the request came with one (an upstream proxy's or client's timeout). The window
  /// then ends there at the latest, open or not: remaining() never reaches past it, and a
  /// deadline already past leaves nothing. The earliest cap wins. Thread-safe.
  void cap(TimePoint deadline) noexcept;
  /// The cap, TimePoint::max() when there is none.
  [[nodiscard]] TimePoint cap() const noexcept;
  /// True once open() was called.
  [[nodiscard]] bool is_open() const noexcept {
    return deadline_ns_.load(std::memory_order_acquire) != kClosed;
  }
  /// The rule above, where a wait of at most `limit` begins at `now`: opens the window (the
  /// first call wins) and returns `limit` capped by the time left.
  [[nodiscard]] Duration begin_wait(TimePoint now, Duration limit) noexcept {
    open(now);
    const Duration left = remaining(now);
    return limit < left ? limit : left;
  }
  /// When the window ends: its opening plus its length, or the cap if that is earlier;
  /// before it opens, the cap (TimePoint::max() without one).
  [[nodiscard]] TimePoint deadline() const noexcept;
  /// The whole length before the window opens; afterwards the time to the deadline. Either
  /// way no further than the cap, and never negative.
  [[nodiscard]] Duration remaining(TimePoint now) const noexcept;
  /// remaining() at the window clock's now.
  [[nodiscard]] Duration remaining() const noexcept { return remaining(clock_->now()); }
  /// True when no time is left.
  [[nodiscard]] bool spent(TimePoint now) const noexcept {
    return remaining(now) <= Duration::zero();
  }

  /// The window's length.
  [[nodiscard]] Duration length() const noexcept { return length_; }
  /// The clock the window is measured on.
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }

 private:
  static constexpr std::int64_t kClosed = INT64_MAX;
  Duration length_;
  Clock* clock_;
  std::atomic<std::int64_t> deadline_ns_{kClosed};
  std::atomic<std::int64_t> cap_ns_{kClosed};  // kClosed: no cap
};

/// Where a request's reads must have caught up to read its own writes: a position in the
/// primary's write-ahead log and the timeline it was written on (PostgreSQL: an LSN;
/// pg::Lsn is its typed view). Engine-neutral, so that a request carries it without knowing
/// its database.
struct WritePosition {
  std::uint64_t value = 0;     ///< 0: none
  std::uint32_t timeline = 0;  ///< 0: not known
  /// A write of this request committed at a position nobody knows (its COMMIT's answer was
  /// lost): only the primary may answer its reads.
  bool primary_only = false;

  /// Raises the position to (value, timeline). Positions of two timelines cannot be
  /// compared: a newer timeline's replaces an older one's (what survived the promotion is
  /// before the fork), an older timeline's is ignored.
  void raise(std::uint64_t to_value, std::uint32_t to_timeline) noexcept;
  /// Equal when every field is.
  friend bool operator==(const WritePosition&, const WritePosition&) = default;
};

/// One request, as one explicit object: its retry window, its read-your-writes position and
/// the deadline it came with. A copy is the same request (the copies share one state), so it
/// can be handed to a call, copied to another thread or kept in a coroutine frame; a
/// RequestScope(context) makes it the current request of a thread for the blocking API.
/// Every method may be called from any thread; reading the position never waits.
class RequestContext {
 public:
  /// A request whose window of `length` on `clock` opens at its first wait on the database
  /// (window.hpp's rule). REQUIRES: length > 0, else std::invalid_argument.
  explicit RequestContext(Duration length = RetryWindow::kDefaultLength,
                          Clock& clock = Clock::system());
  /// A request that arrived at `arrived`: its window is open from then (queue time counts).
  RequestContext(Duration length, Clock& clock, TimePoint arrived);

  /// The request's window, shared by every copy.
  [[nodiscard]] RetryWindow& window() const noexcept;
  /// Caps the window at `deadline`, the time the request's sender stops waiting (see
  /// RetryWindow::cap()): no call of the request outlives it.
  void cap_deadline(TimePoint deadline) const noexcept { window().cap(deadline); }
  /// When the request must be answered: RetryWindow::deadline().
  [[nodiscard]] TimePoint deadline() const noexcept { return window().deadline(); }

  /// The request's read-your-writes position.
  [[nodiscard]] WritePosition position() const noexcept;
  /// WritePosition::raise() on the request's position.
  void raise_position(std::uint64_t value, std::uint32_t timeline) const noexcept;
  /// A write of the request committed at an unknown position: its reads go to the primary.
  void position_unknown() const noexcept;
  /// Replaces the request's position (a driver handing it over whole).
  void set_position(const WritePosition& position) const noexcept;

 private:
  struct State;
  template <class Change>
  void change_position(Change&& change) const noexcept;
  std::shared_ptr<State> state_;
};

/// Makes a RetryWindow the current one on this thread while the scope lives (see the top of
/// this file). Scopes nest; destroy them in reverse order, on the thread that made them.
class RequestScope {
 public:
  /// Starts a scope with a window of `length` on `clock`; inside an active scope on this
  /// thread, joins that scope's window instead.
  explicit RequestScope(Duration length = RetryWindow::kDefaultLength,
                        Clock& clock = Clock::system());
  /// The same for a request that arrived at `arrived` (a server's accept, before it queued):
  /// its window is open from then, so the time it queued counts (DESIGN.md §10: the window is
  /// a promise to whoever sent the request). Inside an active scope it joins that window.
  RequestScope(Duration length, Clock& clock, TimePoint arrived);
  /// Adopts `shared` (typically another thread's scope window). REQUIRES: `shared` outlives
  /// this scope.
  explicit RequestScope(RetryWindow& shared) noexcept;
  /// Makes `context` the current request on this thread: its window, and its read-your-writes
  /// position for the drivers (pg::request_lsn() and the rest read and move it). Inside
  /// another scope it still makes `context` current: a request given explicitly wins.
  explicit RequestScope(const RequestContext& context) noexcept;
  ~RequestScope();
  RequestScope(const RequestScope&) = delete;
  RequestScope& operator=(const RequestScope&) = delete;

  /// The window this scope uses: its own, or the one it joined or adopted.
  [[nodiscard]] RetryWindow& window() noexcept { return *window_; }

  /// The innermost active scope on this thread, or nullptr.
  [[nodiscard]] static RequestScope* current() noexcept;
  /// Its window, or nullptr outside any scope.
  [[nodiscard]] static RetryWindow* current_window() noexcept;
  /// The request context of the innermost active scope (made with one, or nested inside one
  /// that was), or nullptr.
  [[nodiscard]] static const RequestContext* current_context() noexcept;
  /// RetryWindow::begin_wait() on the current window; `limit` outside any scope.
  [[nodiscard]] static Duration begin_wait(TimePoint now, Duration limit) noexcept {
    RetryWindow* w = current_window();
    return w != nullptr ? w->begin_wait(now, limit) : limit;
  }

 private:
  RetryWindow own_;
  RetryWindow* window_;
  RequestScope* previous_;
  std::optional<RequestContext> context_;  // set when made with one (or nested in one)
};

namespace detail {
// The innermost active RequestScope of this thread (read on every Shield call).
inline thread_local RequestScope* current_request_scope = nullptr;
}  // namespace detail

inline RequestScope* RequestScope::current() noexcept {
  return detail::current_request_scope;
}

inline RetryWindow* RequestScope::current_window() noexcept {
  RequestScope* scope = detail::current_request_scope;
  return scope != nullptr ? scope->window_ : nullptr;
}

inline const RequestContext* RequestScope::current_context() noexcept {
  RequestScope* scope = detail::current_request_scope;
  return scope != nullptr && scope->context_ ? &*scope->context_ : nullptr;
}

namespace detail {
[[noreturn]] void window_length_not_positive();
}  // namespace detail

inline RetryWindow::RetryWindow(Duration length, Clock& clock) : length_(length), clock_(&clock) {
  if (length <= Duration::zero()) [[unlikely]]
    detail::window_length_not_positive();
}

inline RequestScope::RequestScope(Duration length, Clock& clock)
    : own_(length, clock),
      window_(detail::current_request_scope != nullptr ? detail::current_request_scope->window_
                                                       : &own_),
      previous_(detail::current_request_scope) {
  if (previous_ != nullptr && previous_->context_) [[unlikely]]
    context_ = previous_->context_;
  detail::current_request_scope = this;
}

inline RequestScope::RequestScope(Duration length, Clock& clock, TimePoint arrived)
    : RequestScope(length, clock) {
  if (window_ == &own_) own_.open(arrived);
}

inline RequestScope::RequestScope(RetryWindow& shared) noexcept
    : own_(shared.length(), shared.clock()),
      window_(&shared),
      previous_(detail::current_request_scope) {
  detail::current_request_scope = this;
}

inline RequestScope::RequestScope(const RequestContext& context) noexcept
    : own_(context.window().length(), context.window().clock()),
      window_(&context.window()),
      previous_(detail::current_request_scope),
      context_(context) {
  detail::current_request_scope = this;
}

inline RequestScope::~RequestScope() {
  detail::current_request_scope = previous_;
}

}  // namespace holdfast
