/// @file
/// SQLite on an Asio event loop: a call of holdfast's SQLite driver run through
/// holdfast::asio::async_run, with SQLite's wait for a lock taken as timer waits. Header-only
/// (link holdfast::sqlite); standalone Asio 1.22, or Boost.Asio 1.81 with HOLDFAST_ASIO_BOOST,
/// as holdfast/adapters/asio.hpp; C++20 coroutines.
///
/// An SQLite call is short CPU work on a file; what makes it slow is a lock held by another
/// connection or process, and SQLite's busy handler waits for that by sleeping in the thread.
/// Here each try of the call runs on the event loop with the busy handler given at most
/// kBusySlice (1 ms); while the file stays locked, the try is made again after a timer pause
/// (1, 2, 5, 10, ... 100 ms, as sqlite3_busy_timeout()'s handler spaces its looks), until
/// `busy_timeout` -- capped by the request's window, which the first wait opens -- has passed.
/// Then the attempt ends with SQLITE_BUSY and the Shield decides, as it decides for a blocking
/// attempt that waited in the busy handler: the same retries, breaker, limit and throttle.
///
/// @code
///   holdfast::sqlite::ResilientDatabase once = db->one_attempt();  // one try per call
///   holdfast::RequestContext request;                               // one window per request
///   holdfast::asio::SqliteRunOptions options;
///   options.run.window = &request.window();
///   auto count = [&] { return once.query_one<std::int64_t>("SELECT count(*) FROM games"); };
///   using Count = holdfast::Result<std::optional<std::int64_t>>;
///   Count games = co_await holdfast::asio::async_run_sqlite<Count>(
///       io.get_executor(), shield, holdfast::Operation::read("games.count"), options, count,
///       asio::use_awaitable);
/// @endcode
///
/// The call must be one try of holdfast's SQLite driver (ResilientDatabase::one_attempt(), or
/// sqlite::Database: their busy handler reads the current RequestScope, which each try gets),
/// not a retrying call, and must not block on anything but the database file. A try
/// that answers SQLITE_BUSY is made again within its attempt only when that is safe whatever it
/// applied: a read, an idempotent write, or a whole transaction that may be re-run (a
/// transaction that failed has rolled back); anything else goes back to the Shield, which knows
/// what a busy write applied. An exception thrown by the call completes the operation with
/// Code::kInternal.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#else
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#endif

#include "holdfast/adapters/asio.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast::asio {

/// How async_run_sqlite() runs: async_run's options, and how long SQLite may wait for a lock.
struct SqliteRunOptions {
  /// async_run's options (the policy, the request's window, the stats).
  RunOptions run;
  /// The longest an attempt waits for a lock, in timer pauses (SQLite's busy_timeout; the
  /// request's window caps it).
  Duration busy_timeout = std::chrono::seconds(5);
};

namespace detail {

// How long one try may wait in SQLite's busy handler: the loop's thread is held that long at
// most.
inline constexpr Duration kBusySlice = std::chrono::milliseconds(1);
// The pauses between tries while the file stays locked, spaced as sqlite3_busy_timeout()'s
// handler spaces its looks (the last one repeats).
inline constexpr std::array<Duration, 12> kBusyPauses = {
    std::chrono::milliseconds(1),  std::chrono::milliseconds(2),  std::chrono::milliseconds(5),
    std::chrono::milliseconds(10), std::chrono::milliseconds(15), std::chrono::milliseconds(20),
    std::chrono::milliseconds(25), std::chrono::milliseconds(25), std::chrono::milliseconds(25),
    std::chrono::milliseconds(50), std::chrono::milliseconds(50), std::chrono::milliseconds(100)};

// SQLITE_BUSY and its extended codes (SQLITE_BUSY_RECOVERY, _SNAPSHOT, _TIMEOUT).
inline bool is_busy(const Status& s) noexcept {
  return (s.sqlite_code() & 0xff) == 5;
}

// Whether a busy try may simply be made again within its attempt.
constexpr bool may_try_again(Operation op) noexcept {
  return op.idempotency == Idempotency::kIdempotent || op.reruns_transaction;
}

// One try of `call`, with at most kBusySlice in the busy handler.
template <class R, class Call>
R try_once(Call& call, Clock& clock) {
  const RequestScope slice(kBusySlice, clock);
  try {
    return call();
  } catch (const std::exception& e) {
    return R(Status(Code::kInternal, std::string("the SQLite call threw: ") + e.what()));
  }
}

// The rest of an attempt whose first try answered SQLITE_BUSY (`result`): tries again after
// timer pauses until `busy_timeout`, capped by `window` (which it opens, as the busy handler
// does), has passed since the first SQLITE_BUSY; then the attempt ends with it.
template <class R, class Call>
::holdfast::asio::detail::net::awaitable<void> busy_poll(Call& call, RetryWindow& window,
                                                         Duration busy_timeout, Clock& clock,
                                                         R result, Done<R> done) {
  namespace net = ::holdfast::asio::detail::net;
  net::steady_timer timer(co_await net::this_coro::executor);
  TimePoint deadline = TimePoint::max();
  for (std::size_t tries = 0;; ++tries) {
    const TimePoint now = clock.now();
    if (deadline == TimePoint::max()) deadline = now + window.begin_wait(now, busy_timeout);
    const Duration left = deadline - now;
    if (left <= Duration::zero()) {
      done(std::move(result));
      co_return;
    }
    timer.expires_after(std::min(kBusyPauses[std::min(tries, kBusyPauses.size() - 1)], left));
    ::holdfast::asio::detail::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;  // the loop is stopping
    result = try_once<R>(call, clock);
    if (is_ok(result) || !is_busy(status_of(result))) {
      done(std::move(result));
      co_return;
    }
  }
}

}  // namespace detail

/// Runs `call` (one try of a holdfast SQLite driver call, returning Status or Result<T>)
/// through `shield` on `ex`, SQLite's lock waits as timer waits (see the top of this file).
/// Completes with void(R), as async_run() does. REQUIRES: options.run.window (or a window of
/// the operation's own) and `call` outlive the operation; `ex` runs one handler at a time.
template <class R, class Executor, class Call, class CompletionToken>
auto async_run_sqlite(const Executor& ex, Shield& shield, Operation op,
                      const SqliteRunOptions& options, Call& call, CompletionToken&& token) {
  namespace net = ::holdfast::asio::detail::net;
  Clock& clock = shield.clock();
  // A window of the call's own, when the caller gave none (as async_run makes one).
  std::shared_ptr<RetryWindow> own;
  RunOptions run = options.run;
  if (run.window == nullptr) {
    own = std::make_shared<RetryWindow>(
        (run.policy != nullptr ? *run.policy : shield.policy_for(op)).window(), clock);
    run.window = own.get();
  }
  RetryWindow* window = run.window;
  const Duration busy_timeout = options.busy_timeout;
  return async_run<R>(
      ex, shield, op, run,
      [&call, &clock, ex, op, window, busy_timeout, own](Done<R> done) {
        R result = detail::try_once<R>(call, clock);
        if (is_ok(result) || !detail::is_busy(status_of(result)) || !detail::may_try_again(op)) {
          return done(std::move(result));
        }
        net::co_spawn(ex,
                      detail::busy_poll<R>(call, *window, busy_timeout, clock, std::move(result),
                                           std::move(done)),
                      net::detached);
      },
      std::forward<CompletionToken>(token));
}

}  // namespace holdfast::asio
