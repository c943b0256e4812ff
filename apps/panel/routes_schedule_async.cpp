// The schedule's routes on HttpServer's async lane (ADR 0029): the same answers as
// routes_schedule.cpp, with the reads driven by holdfast::asio::async_run. Each read is one
// attempt (for the Shield) of the store's *_once() form, run on this event loop's thread;
// the Shield's backoff, its queue for a place under the concurrency limit and its wait for
// the breaker's probe are timer waits that hold no thread. So is SQLite's wait for a lock:
// see busy_poll(). All the reads of one request draw from one RetryWindow, open from the
// request's arrival (DESIGN §10), not from its first wait as on the workers (ADR 0011).

#include <algorithm>
#include <array>
#include <tuple>

#include <sqlite3.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "holdfast/adapters/asio.hpp"
#include "server.hpp"
#include "session_toucher.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;
using std::chrono::milliseconds;

// How long one try may wait in SQLite's busy handler (or for a read connection): the
// lane's thread is held that long at most.
constexpr Duration kBusySlice = milliseconds(1);
// The pauses between tries while the file stays locked, spaced as sqlite3_busy_timeout()'s
// handler spaces its looks (the last one repeats). Longer than the driver's own handler
// (1-10 ms, connection.cpp): up to max_async_requests requests may be looking at once, and
// each look is a try on a read connection.
constexpr std::array<Duration, 12> kBusyPauses = {
    milliseconds(1),  milliseconds(2),  milliseconds(5),  milliseconds(10),
    milliseconds(15), milliseconds(20), milliseconds(25), milliseconds(25),
    milliseconds(25), milliseconds(50), milliseconds(50), milliseconds(100)};

bool is_busy(const Status& s) noexcept {
  return (s.sqlite_code() & 0xff) == SQLITE_BUSY;
}

// One try of `read`: at most kBusySlice in the driver's waits.
template <class R, class Read>
R try_once(Read& read, Clock& clock) {
  const RequestScope slice(kBusySlice, clock);
  try {
    return read();
  } catch (const std::exception& e) {
    return R(Status(Code::kInternal, std::string("the read threw: ") + e.what()));
  }
}

// The rest of an attempt of `read` whose first try answered SQLITE_BUSY (`result`), with
// SQLite's wait for a lock taken as timer waits: while the file answers SQLITE_BUSY the
// attempt tries again after a pause, until busy_timeout, capped by the request's window
// (which it opens, as the busy handler does), has passed since the first SQLITE_BUSY. Then
// the attempt ends with it, and the Shield decides, as for an attempt on the workers that
// waited in the busy handler.
template <class R, class Read>
net::awaitable<void> busy_poll(Read& read, RetryWindow& window, Duration busy_timeout, Clock& clock,
                               R result, holdfast::asio::Done<R> done) {
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
    result = try_once<R>(read, clock);
    if (is_ok(result) || !is_busy(status_of(result))) {
      done(std::move(result));
      co_return;
    }
  }
}

// One async_run of `read` (a *_once() call) for `op` on this coroutine's executor, within
// `window` and on `policy`'s schedule.
template <class R, class Read>
net::awaitable<R> run_read(const ClubStore::AsyncReads& reads, const RetryPolicy& policy,
                           RetryWindow& window, Operation op, Read read) {
  holdfast::asio::RunOptions options;
  options.policy = &policy;
  options.window = &window;
  const auto executor = co_await net::this_coro::executor;
  Clock& clock = reads.shield->clock();
  co_return co_await holdfast::asio::async_run<R>(
      executor, *reads.shield, op, options,
      [&, executor](holdfast::asio::Done<R> done) {
        R result = try_once<R>(read, clock);
        if (is_ok(result) || !is_busy(status_of(result))) return done(std::move(result));
        net::co_spawn(executor,
                      busy_poll<R>(read, window, reads.busy_timeout, clock, std::move(result),
                                   std::move(done)),
                      net::detached);
      },
      net::use_awaitable);
}

}  // namespace

bool PanelServer::is_async_route(const http::Request& req) noexcept {
  return (req.method == "GET" || req.method == "HEAD") &&
         (req.path == "/dashboard/schedule" || req.path == "/api/schedule");
}

net::awaitable<void> PanelServer::handle_async(const http::Request& req, http::Response& res) {
  const bool as_json = req.path == "/api/schedule";
  ScheduleAsk ask;
  if (!refused_by_guards(req, res) && schedule_asked(req, res, as_json, ask)) {
    std::optional<Status> failed;
    {
      // Open from the request's arrival (DESIGN §10): whatever it met before its reads, the
      // answer comes within the window of whoever sent it.
      // (Request::received is on the store's clock: PanelServer::start() gives it to
      // HttpServer.)
      RetryWindow window(options_.window, options_.store->clock());
      if (req.received != TimePoint{}) window.open(req.received);
      ScheduleRead read;
      co_await read_schedule_async(window, ask, read);
      failed = answer_schedule_read(ask, res, read);
    }
    if (failed) answers_->failure(res, *failed, req.path, as_json);
  }
  record_traffic(req, res);
}

net::awaitable<void> PanelServer::read_schedule_async(RetryWindow& window, const ScheduleAsk& ask,
                                                      ScheduleRead& read) {
  ClubStore& store = *options_.store;
  const ClubStore::AsyncReads& a = *store.async_reads();
  store.count_call();
  Result<std::optional<User>> who = co_await run_read<Result<std::optional<User>>>(
      a, *a.sessions, window, Operation::read("session.read"),
      [&] { return store.session_once(ask.token, ask.now); });
  if (!who.ok()) {
    read.failure = who.status();
    co_return;
  }
  if (!who->has_value()) {
    // Only the database's own answer "no such session" signs a client out.
    read.signed_out = true;
    read.failure = Status(Code::kPermissionDenied, "no live session");
    co_return;
  }
  read.user = **who;
  toucher_->touch(ask.token);
  store.count_call();
  Result<std::vector<Game>> games = co_await run_read<Result<std::vector<Game>>>(
      a, *a.reads, window, Operation::read("schedule.games"),
      [&] { return store.games_once(ask.date); });
  if (!games.ok()) {
    read.failure = games.status();
    co_return;
  }
  store.count_call();
  Result<ScheduleContext> context = co_await run_read<Result<ScheduleContext>>(
      a, *a.reads, window, Operation::read("schedule.context"),
      [&] { return store.context_once(ask.date); });
  if (!context.ok()) {
    read.failure = context.status();
    co_return;
  }
  read.schedule = Schedule{ask.date, std::move(*games), std::move(*context)};
}

}  // namespace holdfast::panel
