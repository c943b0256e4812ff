// One SQLite store call driven by holdfast::asio::async_run_sqlite on the async lane (ADRs
// 0029, 0030): each attempt is one try of the store's *_once() form, on the calling
// coroutine's event loop (at most 1 ms in the driver); the Shield's backoff, its queue for a
// place under the concurrency limit, its wait for the breaker's probe and SQLite's wait for a
// lock are timer waits that hold no thread. PostgreSQL's calls are PgLane's (pg_lane.hpp: the
// library's asio::pg::Client). Included by the lane's route files only.
#pragma once

#include <string>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "club_store.hpp"
#include "holdfast/adapters/asio.hpp"
#include "holdfast/adapters/asio_sqlite.hpp"

namespace holdfast::panel::lane {

// A request on the lane: the library's RequestContext (its window, open from its arrival,
// DESIGN §10, and on PostgreSQL its read-your-writes position, which every thread that runs
// one of its calls reads and moves).
struct Context {
  Context(Duration length, Clock& clock) : request(length, clock) {}
  RequestContext request;
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

// One call of the store's `call` (a *_once() form), counted as one database call: a read
// through the reads' Shield on `policy` (the store's reads' schedule unless given).
template <class R, class Call>
boost::asio::awaitable<R> read_call(ClubStore& store, Context& ctx, Operation op, Call call,
                                    const RetryPolicy* policy = nullptr) {
  store.count_call();
  const ClubStore::AsyncAccess& a = *store.async_access();
  const RetryPolicy& schedule = policy != nullptr ? *policy : *a.reads;
  co_return co_await run_call<R>(a, *a.shield, schedule, ctx, op, call);
}

// A write through the writes' Shield.
template <class R, class Call>
boost::asio::awaitable<R> write_call(ClubStore& store, Context& ctx, Operation op, Call call) {
  store.count_call();
  const ClubStore::AsyncAccess& a = *store.async_access();
  co_return co_await run_call<R>(a, *a.write_shield, *a.writes, ctx, op, call);
}

}  // namespace holdfast::panel::lane
