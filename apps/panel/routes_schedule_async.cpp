// The schedule's routes on HttpServer's async lane (ADR 0029): the same answers as
// routes_schedule.cpp, with the reads driven by holdfast::asio::async_run. Each read is one
// attempt of the store's *_once() form, run on this event loop's thread (where blocking
// driver calls belong: the lane has one thread per read connection); the Shield's backoff,
// its queue for a place under the concurrency limit and its wait for the breaker's probe
// are timer waits that hold no thread. All the reads of one request draw from one
// RetryWindow, which, as on the blocking path (ADR 0011), opens at the request's first wait.

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "holdfast/adapters/asio.hpp"
#include "server.hpp"
#include "session_toucher.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;

// One async_run of `read` (a *_once() call) for `op` on this coroutine's executor, within
// `window` and on `policy`'s schedule.
template <class R, class Read>
net::awaitable<R> run_read(Shield& shield, const RetryPolicy& policy, RetryWindow& window,
                           Operation op, Read read) {
  holdfast::asio::RunOptions options;
  options.policy = &policy;
  options.window = &window;
  const auto executor = co_await net::this_coro::executor;
  co_return co_await holdfast::asio::async_run<R>(
      executor, shield, op, options,
      [&window, &read](holdfast::asio::Done<R> done) {
        R result = [&]() -> R {
          // The busy handler and the wait for a read connection are capped by the window.
          const RequestScope scope(window);
          try {
            return read();
          } catch (const std::exception& e) {
            return R(Status(Code::kInternal, std::string("the read threw: ") + e.what()));
          }
        }();
        done(std::move(result));
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
      // Open from the request's arrival: a request queued behind lane threads that wait in
      // SQLite's busy handler is answered within its window all the same.
      RetryWindow window(options_.window, options_.store->clock());
      if (req.received != TimePoint{})
        window.open(std::min(req.received, options_.store->clock().now()));
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
      *a.shield, *a.sessions, window, Operation::read("session.read"),
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
      *a.shield, *a.reads, window, Operation::read("schedule.games"),
      [&] { return store.games_once(ask.date); });
  if (!games.ok()) {
    read.failure = games.status();
    co_return;
  }
  store.count_call();
  Result<ScheduleContext> context = co_await run_read<Result<ScheduleContext>>(
      *a.shield, *a.reads, window, Operation::read("schedule.context"),
      [&] { return store.context_once(ask.date); });
  if (!context.ok()) {
    read.failure = context.status();
    co_return;
  }
  read.schedule = Schedule{ask.date, std::move(*games), std::move(*context)};
}

}  // namespace holdfast::panel
