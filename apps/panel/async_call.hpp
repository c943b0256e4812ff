// One store call driven by holdfast::asio::async_run on the async lane (ADRs 0029, 0030,
// 0032): each attempt is one try of the store's *_once() form. The Shield's backoff, its
// queue for a place under the concurrency limit and its wait for the breaker's probe are
// timer waits that hold no thread.
//   - SQLite: the try runs on the calling coroutine's event loop (at most 1 ms in the
//     driver), and SQLite's wait for a lock is a timer wait too (the library's
//     holdfast::asio::async_run_sqlite, holdfast/adapters/asio_sqlite.hpp).
//   - PostgreSQL: libpq blocks for a round trip, so each try is a job on a pool of threads
//     sized to the connections (HttpServer::blocking_executor()), inside the request's
//     window and position (Context), one pg::AttemptScope step at a time; a read is routed
//     as pg::Database routes it (routed_read()).
// Included by the lane's route files only.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "club_store.hpp"
#include "holdfast/adapters/asio.hpp"
#include "holdfast/adapters/asio_sqlite.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "holdfast/pg.hpp"
#include "holdfast/pg/attempt.hpp"
#include "holdfast/pg/lsn.hpp"
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

// `call`, an exception out of it (none is expected) answered as INTERNAL.
template <class R, class Call>
R caught(Call& call) {
  try {
    return call();
  } catch (const std::exception& e) {
    return R(Status(Code::kInternal, std::string("the store call threw: ") + e.what()));
  }
}

// One async_run of `call` (a *_once() call) for `op` through `shield` on `policy`'s
// schedule, within the request's window, each try on this coroutine's event loop and
// SQLite's wait for a lock a timer wait (the library's holdfast::asio::async_run_sqlite).
template <class R, class Call>
boost::asio::awaitable<R> run_call(const ClubStore::AsyncAccess& access, Shield& shield,
                                   const RetryPolicy& policy, Context& ctx, Operation op,
                                   Call& call) {
  namespace net = boost::asio;
  holdfast::asio::SqliteRunOptions options;
  options.run.policy = &policy;
  options.run.window = &ctx.window();
  options.busy_timeout = access.busy_timeout;
  co_return co_await holdfast::asio::async_run_sqlite<R>(co_await net::this_coro::executor, shield,
                                                         op, options, call, net::use_awaitable);
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
