// The schedule's routes on HttpServer's async lane (ADR 0029): the same answers as
// routes_schedule.cpp, with the reads driven by holdfast::asio::async_run (async_call.hpp).
// All the reads of one request draw from one RetryWindow, open from the request's arrival
// (DESIGN §10), not from its first wait as on the workers (ADR 0011). The day's last good
// copy is answered again while the data epoch shows nothing committed since (ADR 0031).

#include <memory>
#include <optional>

#include <boost/asio/awaitable.hpp>

#include "async_call.hpp"
#include "holdfast/adapters/asio_shared_reads.hpp"
#include "html.hpp"
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
  // The session, and on SQLite the file's change epoch in the same statement.
  Result<ClubStore::StampedSession> stamped =
      co_await stamped_session_async(ask.token, ask.now, ctx);
  if (!stamped.ok()) {
    read.failure = stamped.status();
    co_return;
  }
  if (!stamped->user) {
    // Only the database's own answer "no such session" signs a client out.
    read.signed_out = true;
    read.failure = Status(Code::kPermissionDenied, "no live session");
    co_return;
  }
  read.user = *stamped->user;
  read.epoch = stamped->epoch;
  toucher_->touch(ask.token);
  // Nothing committed since the last good copy was read: it is the answer, without the
  // schedule's queries (sqlite::ChangeEpoch, holdfast/sqlite/change_epoch.hpp). A store
  // without an epoch (PostgreSQL) reads every page.
  if (std::shared_ptr<const SchedulePage> copy = current_copy(ask.date, read.epoch, ask.now)) {
    read.page = std::move(copy);
    read.current_copy = true;
    counters_.current_copy++;
    co_return;
  }
  // The copy is old: one request reads the day, those that observed no later epoch wait for
  // its answer (asio::SharedReads). Without an epoch (PostgreSQL) nothing says a read under
  // way began after this request's own writes: each reads.
  std::optional<asio::SharedReads<SchedulePage>::Ticket> ticket;
  if (read.epoch != 0) {
    ticket.emplace(schedule_reads_->join(ask.date, read.epoch));
    if (!ticket->leads()) {
      if (std::shared_ptr<const SchedulePage> page =
              co_await ticket->answer(ctx.window().remaining())) {
        read.page = std::move(page);
        read.current_copy = true;  // the leader keeps it
        counters_.current_copy++;
        co_return;
      }
      ticket.reset();  // the leader's read failed: this request reads for itself
    }
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
  read.page = SchedulePage::of(Schedule{ask.date, std::move(**games), std::move(**context)});
  if (ticket) ticket->land(read.page);
}

}  // namespace holdfast::panel
