// One store call driven by holdfast::asio::async_run on the async lane (ADRs 0029, 0030,
// 0032): each attempt is one try of the store's *_once() form. The Shield's backoff, its
// queue for a place under the concurrency limit and its wait for the breaker's probe are
// timer waits that hold no thread.
//   - SQLite: the try runs on the calling coroutine's event loop (at most kBusySlice in the
//     driver), and SQLite's wait for a lock is a timer wait too (busy_poll()).
//   - PostgreSQL: libpq blocks for a round trip, so each try is a job on a pool of threads
//     sized to the connections (HttpServer::blocking_executor()), inside the request's
//     window and position (Context), one pg::AttemptScope step at a time; a read is routed
//     as pg::Database routes it (routed_read()).
// Included by the lane's route files only.
#pragma once

#include <algorithm>
#include <array>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include <sqlite3.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "club_store.hpp"
#include "holdfast/adapters/asio.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "holdfast/postgres.hpp"
#include "holdfast/postgres_lsn.hpp"
#endif

namespace holdfast::panel::lane {

// A request on the lane: the library's RequestContext (its window, open from its arrival,
// DESIGN §10, and on PostgreSQL its read-your-writes position, which every thread that runs
// one of its calls reads and moves), and where its blocking calls run.
struct Context {
  Context(Duration length, Clock& clock) : request(length, clock) {}
  RequestContext request;
  // PostgreSQL: where the blocking tries of reads and of writes run. Empty on SQLite.
  std::optional<boost::asio::any_io_executor> read_jobs;
  std::optional<boost::asio::any_io_executor> write_jobs;
  [[nodiscard]] RetryWindow& window() const noexcept { return request.window(); }
};

// The request current on this thread for a stretch of synchronous work (no co_await in it):
// its window and its position, for the store's blocking calls.
class OnThisThread {
 public:
  explicit OnThisThread(const Context& ctx) : scope_(ctx.request) {}

 private:
  RequestScope scope_;
};

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

// `call`, an exception out of it (none is expected) answered as INTERNAL.
template <class R, class Call>
R caught(Call& call) {
  try {
    return call();
  } catch (const std::exception& e) {
    return R(Status(Code::kInternal, std::string("the store call threw: ") + e.what()));
  }
}

// One try of `call`: at most kBusySlice in the driver's waits.
template <class R, class Call>
R try_once(Call& call, Clock& clock) {
  const RequestScope slice(kBusySlice, clock);
  return caught<R>(call);
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
// schedule, within the request's window, each try on this coroutine's event loop (SQLite).
template <class R, class Call>
boost::asio::awaitable<R> run_call(const ClubStore::AsyncAccess& access, Shield& shield,
                                   const RetryPolicy& policy, Context& ctx, Operation op,
                                   Call& call) {
  namespace net = boost::asio;
  holdfast::asio::RunOptions options;
  options.policy = &policy;
  options.window = &ctx.window();
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
                      busy_poll<R>(call, ctx.window(), access.busy_timeout, clock,
                                   std::move(result), std::move(done)),
                      net::detached);
      },
      net::use_awaitable);
}

#ifdef HOLDFAST_PANEL_HAVE_PG
// One try of `call` on this thread (a blocking job's): in the request's window and
// position, as one attempt of `step` (pg::AttemptScope).
template <class R, class Call>
R blocking_try(Context& ctx, pg::RoutedCall& route, pg::AttemptScope::Step step, Call& call) {
  const OnThisThread request(ctx);
  const pg::AttemptScope one(route, step);
  return caught<R>(call);
}

// blocking_try() as a job on `jobs`; resumes on this coroutine's event loop.
template <class R, class Call>
boost::asio::awaitable<R> blocking_job(const boost::asio::any_io_executor& jobs, Context& ctx,
                                       pg::RoutedCall& route, pg::AttemptScope::Step step,
                                       Call& call) {
  namespace net = boost::asio;
  // (co_spawn's value must be default-constructible: a Result is not.)
  std::optional<R> r = co_await net::co_spawn(
      jobs,
      [&]() -> net::awaitable<std::optional<R>> {
        co_return blocking_try<R>(ctx, route, step, call);
      },
      net::use_awaitable);
  co_return std::move(*r);
}

// One async_run of `call` through `shield` (the primary's) on `policy`'s schedule, each
// attempt a blocking job on `jobs` (PostgreSQL).
template <class R, class Call>
boost::asio::awaitable<R> run_blocking(const boost::asio::any_io_executor& jobs, Shield& shield,
                                       const RetryPolicy& policy, Context& ctx, Operation op,
                                       pg::RoutedCall& route, Call& call) {
  namespace net = boost::asio;
  holdfast::asio::RunOptions options;
  options.policy = &policy;
  options.window = &ctx.window();
  const auto executor = co_await net::this_coro::executor;
  co_return co_await holdfast::asio::async_run<R>(
      executor, shield, op, options,
      [&](holdfast::asio::Done<R> done) {
        net::post(jobs, [&ctx, &route, &call, done = std::move(done)]() mutable {
          done(blocking_try<R>(ctx, route, pg::AttemptScope::Step::kPrimary, call));
        });
      },
      net::use_awaitable);
}

// A read on PostgreSQL, routed as pg::Database::read() routes it: the standbys once without
// waiting; else the primary's Shield loop (between its attempts a standby that was only
// behind the request's writes and has caught up ends it); and after the primary failed,
// those standbys once more.
template <class R, class Call>
boost::asio::awaitable<R> routed_read(const ClubStore::AsyncAccess& access,
                                      const RetryPolicy& policy, Context& ctx, Operation op,
                                      Call& call) {
  using Step = pg::AttemptScope::Step;
  const boost::asio::any_io_executor& jobs = *ctx.read_jobs;
  pg::RoutedCall route;
  if (access.standbys > 0) {
    R first = co_await blocking_job<R>(jobs, ctx, route, Step::kReplicas, call);
    if (!route.unanswered) co_return first;
  }
  R r = co_await run_blocking<R>(jobs, *access.shield, policy, ctx, op, route, call);
  if (!route.replicas_again_after(status_of(r))) co_return r;
  R again = co_await blocking_job<R>(jobs, ctx, route, Step::kReplicasAgain, call);
  if (!route.unanswered || route.left_to_replica) co_return again;
  co_return r;
}
#endif  // HOLDFAST_PANEL_HAVE_PG

// One call of the store's `call` (a *_once() form), counted as one database call: a read
// through the reads' Shield on `policy` (the store's reads' schedule unless given).
template <class R, class Call>
boost::asio::awaitable<R> read_call(ClubStore& store, Context& ctx, Operation op, Call call,
                                    const RetryPolicy* policy = nullptr) {
  store.count_call();
  const ClubStore::AsyncAccess& a = *store.async_access();
  const RetryPolicy& schedule = policy != nullptr ? *policy : *a.reads;
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (ctx.read_jobs) co_return co_await routed_read<R>(a, schedule, ctx, op, call);
#endif
  co_return co_await run_call<R>(a, *a.shield, schedule, ctx, op, call);
}

// A write through the writes' Shield.
template <class R, class Call>
boost::asio::awaitable<R> write_call(ClubStore& store, Context& ctx, Operation op, Call call) {
  store.count_call();
  const ClubStore::AsyncAccess& a = *store.async_access();
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (ctx.write_jobs) {
    // As pg::Database runs its writes: each call a whole transaction (a statement is its
    // own), so one the server rolled back (40001, 40P01) may be re-run; on the Shield's
    // schedule for the operation.
    op.reruns_transaction = true;
    pg::RoutedCall route;
    co_return co_await run_blocking<R>(*ctx.write_jobs, *a.write_shield,
                                       a.write_shield->policy_for(op), ctx, op, route, call);
  }
#endif
  co_return co_await run_call<R>(a, *a.write_shield, *a.writes, ctx, op, call);
}

}  // namespace holdfast::panel::lane
