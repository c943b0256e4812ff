// The database calls of the panel's routes (ADR 0052). Every route with database work is one
// coroutine (routes_*.cpp), whatever the strategy; what its calls are depends on where it runs:
//   - on HttpServer's async lane (holdfast on the system clock): the library's adapters, a
//     wait holding no thread. SQLite: sqlite_calls() (holdfast::asio::async_run_sqlite over
//     the store's *_once() forms); PostgreSQL: PgLane (pg_lane.hpp, asio::pg::Client);
//   - on a worker, the coroutine run to its end on that worker's thread (the baselines, whose
//     loop is what the drill compares and must hold a thread as the code it models does; and
//     holdfast on a ManualClock or without the lane): blocking_calls(), the store's blocking
//     calls, each inside the request's RequestScope when the strategy is holdfast.
// Included by the route files, the lane's PostgreSQL calls and the server.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "club_store.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast::panel {

class StoreCalls;

namespace lane {

// A request with database work: its RequestContext (the window every call draws from, and on
// PostgreSQL its read-your-writes position, which every thread that runs one of its calls
// reads and moves), the calls it makes, and where it runs.
struct Context {
  Context(Duration length, Clock& clock, StoreCalls& store_calls, bool holdfast, bool lane)
      : request(length, clock), calls(store_calls), scoped(holdfast), on_lane(lane) {}
  RequestContext request;
  StoreCalls& calls;
  // holdfast: the request's window and position are made current for each blocking call. A
  // baseline's calls run with neither, as the code it models.
  bool scoped;
  // On the async lane (else on a worker of its own): CPU-heavy work goes to
  // HttpServer::cpu_executor() there.
  bool on_lane;
  [[nodiscard]] RetryWindow& window() const noexcept { return request.window(); }
};

// The request current on this thread for a stretch of synchronous work (no co_await in it):
// its window and its position, for the store's blocking calls. Nothing for a baseline.
class OnThisThread {
 public:
  explicit OnThisThread(const Context& ctx) {
    if (ctx.scoped) scope_.emplace(ctx.request);
  }

 private:
  std::optional<RequestScope> scope_;
};

}  // namespace lane

// One route's database calls, each counted as one call (ClubStore::calls()) and answered as
// the blocking ClubStore call of the same name answers it.
class StoreCalls {
 public:
  virtual ~StoreCalls() = default;

  // The session's user (nullopt: no live session), with the file's change epoch observed by
  // the same statement where the store keeps one (SQLite on the lane; else 0). In the class
  // of the route it authorizes (`priority`).
  virtual boost::asio::awaitable<Result<ClubStore::StampedSession>> session(
      lane::Context& ctx, const std::string& token, const std::string& now, Priority priority) = 0;
  // The baselines' refresh of last_seen on every page (holdfast refreshes sessions off the
  // request path: session_toucher.hpp). Only blocking_calls() has it.
  virtual boost::asio::awaitable<Status> refresh_session(lane::Context& ctx,
                                                         const std::string& token,
                                                         const std::string& now);
  virtual boost::asio::awaitable<Result<std::vector<Game>>> games(lane::Context& ctx,
                                                                  const std::string& date) = 0;
  virtual boost::asio::awaitable<Result<ScheduleContext>> context(lane::Context& ctx,
                                                                  const std::string& date) = 0;
  // A sign-in's steps (the password is checked by the route, off the event loop): the user's
  // id and stored hash; the stored hash replaced by `fresh`, only over `stored`; a session
  // opened for the user (its token), the user's sessions beyond ClubStore::kSessionsPerUser
  // deleted on the way.
  virtual boost::asio::awaitable<Result<std::optional<ClubStore::Credentials>>> credentials(
      lane::Context& ctx, const std::string& email) = 0;
  virtual boost::asio::awaitable<Status> rehash(lane::Context& ctx, std::int64_t user_id,
                                                const std::string& fresh,
                                                const std::string& stored) = 0;
  virtual boost::asio::awaitable<Result<std::string>> open_session(lane::Context& ctx,
                                                                   std::int64_t user_id,
                                                                   const std::string& now) = 0;
  virtual boost::asio::awaitable<Status> end_session(lane::Context& ctx,
                                                     const std::string& token) = 0;
  // The writes, their input checked as ClubStore::pay() and sign_up() check it.
  virtual boost::asio::awaitable<Result<PaymentReceipt>> pay(
      lane::Context& ctx, std::int64_t user_id, std::int64_t amount_cents,
      const std::string& method, const std::string& key, const std::string& now) = 0;
  virtual boost::asio::awaitable<Result<SignupReceipt>> sign_up(lane::Context& ctx,
                                                                std::int64_t user_id,
                                                                std::int64_t game_id,
                                                                const std::string& key,
                                                                const std::string& now) = 0;
  virtual boost::asio::awaitable<Status> record_report(lane::Context& ctx, const std::string& path,
                                                       const std::string& digest,
                                                       const std::string& note,
                                                       const std::string& now) = 0;
};

// The SQLite store's calls on the async lane (REQUIRES: store.async_access(), not postgres):
// each an async_run_sqlite of the store's *_once() form through its Shields on its schedules.
[[nodiscard]] std::unique_ptr<StoreCalls> sqlite_calls(ClubStore& store);
// The store's blocking calls, for a route run on a worker's own thread.
[[nodiscard]] std::unique_ptr<StoreCalls> blocking_calls(ClubStore& store);

}  // namespace holdfast::panel
