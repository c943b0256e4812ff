// The schedule's routes on HttpServer's async lane (ADR 0029): the same answers as
// routes_schedule.cpp, with the reads driven by holdfast::asio::async_run (async_call.hpp).
// All the reads of one request draw from one RetryWindow, open from the request's arrival
// (DESIGN §10), not from its first wait as on the workers (ADR 0011). The day's last good
// copy is answered again while the data epoch shows nothing committed since (ADR 0031).

#include <memory>
#include <optional>

#include <boost/asio/awaitable.hpp>

#include "async_call.hpp"
#include "server.hpp"
#include "session_toucher.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "pg_lane.hpp"
#endif

namespace holdfast::panel {

namespace net = boost::asio;
using lane::read_call;

net::awaitable<void> PanelServer::get_schedule_async(const http::Request& req, http::Response& res,
                                                     lane::Context& ctx) {
  const bool as_json = req.path == "/api/schedule";
  ScheduleAsk ask;
  if (!schedule_asked(req, res, as_json, ask)) co_return;
  ScheduleRead read;
  co_await read_schedule_async(ctx, ask, read);
  if (std::optional<Status> failed = answer_schedule_read(ask, res, read)) {
    answers_->failure(res, *failed, req.path, as_json);
  }
}

net::awaitable<void> PanelServer::read_schedule_async(lane::Context& ctx, const ScheduleAsk& ask,
                                                      ScheduleRead& read) {
  ClubStore& store = *options_.store;
  const Result<std::optional<User>> who = co_await session_async(ask.token, ask.now, ctx);
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
  // Nothing committed since the last good copy was read: it is the answer, without the
  // five queries (sqlite::ChangeEpoch, holdfast/sqlite/change_epoch.hpp). A store without an epoch
  // (PostgreSQL) reads every page.
  if (store.async_access()->data_epoch) {
    const Result<std::uint64_t> epoch = co_await read_call<Result<std::uint64_t>>(
        store, ctx, Operation::read("schedule.epoch"), [&] { return store.data_epoch_once(); });
    if (!epoch.ok()) {
      read.failure = epoch.status();
      co_return;
    }
    read.epoch = *epoch;
  }
  if (std::shared_ptr<const Schedule> copy = current_copy(ask.date, read.epoch, ask.now)) {
    read.schedule = std::move(copy);
    read.current_copy = true;
    counters_.current_copy++;
    co_return;
  }
  // (Optional: a Result is not default-constructible.)
  std::optional<Result<std::vector<Game>>> games;
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (pg_lane_ != nullptr) games.emplace(co_await pg_lane_->games(ctx, ask.date));
#endif
  if (!games) {
    games.emplace(co_await read_call<Result<std::vector<Game>>>(
        store, ctx, Operation::read("schedule.games"), [&] { return store.games_once(ask.date); }));
  }
  if (!games->ok()) {
    read.failure = games->status();
    co_return;
  }
  std::optional<Result<ScheduleContext>> context;
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (pg_lane_ != nullptr) context.emplace(co_await pg_lane_->context(ctx, ask.date));
#endif
  if (!context) {
    context.emplace(
        co_await read_call<Result<ScheduleContext>>(store, ctx, Operation::read("schedule.context"),
                                                    [&] { return store.context_once(ask.date); }));
  }
  if (!context->ok()) {
    read.failure = context->status();
    co_return;
  }
  read.schedule = std::make_shared<const Schedule>(
      Schedule{ask.date, std::move(**games), std::move(**context)});
}

}  // namespace holdfast::panel
