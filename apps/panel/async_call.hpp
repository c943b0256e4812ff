// One store call driven by holdfast::asio::async_run on the async lane (ADRs 0029, 0030):
// each attempt is one try of the store's *_once() form, run on the calling coroutine's
// event loop. The Shield's backoff, its queue for a place under the concurrency limit and
// its wait for the breaker's probe are timer waits that hold no thread; so is SQLite's wait
// for a lock (busy_poll()). Included by the lane's route files only.
#pragma once

#include <algorithm>
#include <array>
#include <exception>
#include <string>
#include <utility>

#include <sqlite3.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "club_store.hpp"
#include "holdfast/adapters/asio.hpp"

namespace holdfast::panel::lane {

// How long one try may wait in SQLite's busy handler (or for a connection): the lane's
// thread is held that long at most.
inline constexpr Duration kBusySlice = std::chrono::milliseconds(1);
// The pauses between tries while the file stays locked, spaced as sqlite3_busy_timeout()'s
// handler spaces its looks (the last one repeats). Longer than the driver's own handler
// (1-10 ms, connection.cpp): up to max_async_requests requests may be looking at once, and
// each look is a try on a connection.
inline constexpr std::array<Duration, 12> kBusyPauses = {
    std::chrono::milliseconds(1),  std::chrono::milliseconds(2),  std::chrono::milliseconds(5),
    std::chrono::milliseconds(10), std::chrono::milliseconds(15), std::chrono::milliseconds(20),
    std::chrono::milliseconds(25), std::chrono::milliseconds(25), std::chrono::milliseconds(25),
    std::chrono::milliseconds(50), std::chrono::milliseconds(50), std::chrono::milliseconds(100)};

inline bool is_busy(const Status& s) noexcept {
  return (s.sqlite_code() & 0xff) == SQLITE_BUSY;
}

// Whether a try that answered SQLITE_BUSY may simply be made again within the attempt: a
// read, an idempotent write, or a whole transaction that may be re-run (a one-attempt
// transaction that failed has rolled back). Anything else goes back to the Shield, which
// knows what a busy write applied.
constexpr bool may_try_again(Operation op) noexcept {
  return op.idempotency == Idempotency::kIdempotent || op.reruns_transaction;
}

// One try of `call`: at most kBusySlice in the driver's waits.
template <class R, class Call>
R try_once(Call& call, Clock& clock) {
  const RequestScope slice(kBusySlice, clock);
  try {
    return call();
  } catch (const std::exception& e) {
    return R(Status(Code::kInternal, std::string("the store call threw: ") + e.what()));
  }
}

// The rest of an attempt of `call` whose first try answered SQLITE_BUSY (`result`), with
// SQLite's wait for a lock taken as timer waits: while the file answers SQLITE_BUSY the
// attempt tries again after a pause, until busy_timeout, capped by the request's window
// (which it opens, as the busy handler does), has passed since the first SQLITE_BUSY. Then
// the attempt ends with it, and the Shield decides, as for an attempt on the workers that
// waited in the busy handler.
template <class R, class Call>
boost::asio::awaitable<void> busy_poll(Call& call, RetryWindow& window, Duration busy_timeout,
                                       Clock& clock, R result, holdfast::asio::Done<R> done) {
  namespace net = boost::asio;
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
    const auto [ec] = co_await timer.async_wait(net::as_tuple(net::use_awaitable));
    if (ec) co_return;  // the lane is stopping
    result = try_once<R>(call, clock);
    if (is_ok(result) || !is_busy(status_of(result))) {
      done(std::move(result));
      co_return;
    }
  }
}

// One async_run of `call` (a *_once() call) for `op` through `shield` on `policy`'s
// schedule, within `window`, on this coroutine's executor.
template <class R, class Call>
boost::asio::awaitable<R> run_call(const ClubStore::AsyncAccess& access, Shield& shield,
                                   const RetryPolicy& policy, RetryWindow& window, Operation op,
                                   Call call) {
  namespace net = boost::asio;
  holdfast::asio::RunOptions options;
  options.policy = &policy;
  options.window = &window;
  const auto executor = co_await net::this_coro::executor;
  Clock& clock = shield.clock();
  co_return co_await holdfast::asio::async_run<R>(
      executor, shield, op, options,
      [&, executor](holdfast::asio::Done<R> done) {
        R result = try_once<R>(call, clock);
        if (is_ok(result) || !is_busy(status_of(result)) || !may_try_again(op)) {
          return done(std::move(result));
        }
        net::co_spawn(executor,
                      busy_poll<R>(call, window, access.busy_timeout, clock, std::move(result),
                                   std::move(done)),
                      net::detached);
      },
      net::use_awaitable);
}

// One call of the store's `call` (a *_once() form), counted as one database call: a read
// through the reads' Shield on their schedule, or a write through the writes' Shield.
template <class R, class Call>
boost::asio::awaitable<R> read_call(ClubStore& store, RetryWindow& window, Operation op,
                                    Call call) {
  store.count_call();
  const ClubStore::AsyncAccess& a = *store.async_access();
  co_return co_await run_call<R>(a, *a.shield, *a.reads, window, op, std::move(call));
}

template <class R, class Call>
boost::asio::awaitable<R> write_call(ClubStore& store, RetryWindow& window, Operation op,
                                     Call call) {
  store.count_call();
  const ClubStore::AsyncAccess& a = *store.async_access();
  co_return co_await run_call<R>(a, *a.write_shield, *a.writes, window, op, std::move(call));
}

}  // namespace holdfast::panel::lane
