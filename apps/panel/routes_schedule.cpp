// The schedule: GET /dashboard/schedule?date= (the page) and GET /api/schedule?date= (JSON).
// One render reads the session and two query groups, inside one request window (holdfast),
// open from the request's arrival (DESIGN §10). When that fails busy, holdfast answers the
// last good copy of the day, marked with X-Holdfast-Stale and an "as of" banner; otherwise
// the failure is answered (answers.hpp). The same copy, while the file's data epoch shows
// nothing committed since it was read, is the answer on the async lane without the query
// groups (ADR 0031).

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <boost/asio/awaitable.hpp>

#include <nlohmann/json.hpp>

#include "holdfast/adapters/asio_shared_reads.hpp"
#include "html.hpp"
#include "route_helpers.hpp"
#include "server.hpp"
#include "session_toucher.hpp"
#include "store_calls.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;

using nlohmann::json;

constexpr const char* kHtml = "text/html; charset=utf-8";

std::string today_utc() {
  return now_utc().substr(0, 10);
}

bool valid_date(std::string_view s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  using namespace std::chrono;
  const int y = std::stoi(std::string(s.substr(0, 4)));
  const unsigned m = static_cast<unsigned>(std::stoi(std::string(s.substr(5, 2))));
  const unsigned d = static_cast<unsigned>(std::stoi(std::string(s.substr(8, 2))));
  return year_month_day(year(y), month(m), day(d)).ok();
}

// The schedule as /api/schedule answers it; `stale_as_of` marks the last good copy.
json schedule_json(const Schedule& s, const std::optional<std::string>& stale_as_of) {
  json j = {{"date", s.date},
            {"club", s.context.club_name},
            {"holidays", s.context.holidays},
            {"games", json::array()}};
  if (stale_as_of) j["stale_as_of"] = *stale_as_of;
  for (const Game& g : s.games) {
    j["games"].push_back({{"id", g.id},
                          {"court", g.court},
                          {"activity", g.activity},
                          {"starts_at", g.starts_at},
                          {"ends_at", g.ends_at},
                          {"capacity", g.capacity},
                          {"signed_up", g.signed_up}});
  }
  return j;
}

// No live session: the page redirects to the sign-in form, JSON answers 401.
void send_to_sign_in(http::Response& res, bool as_json) {
  res.status = as_json ? 401 : 303;
  if (!as_json) res.set_header("Location", "/login");
}

}  // namespace

struct PanelServer::StaleCopy {
  StaleCopy(std::shared_ptr<const SchedulePage> p, std::string_view now, std::uint64_t k,
            std::uint64_t e)
      : page(std::move(p)), kept(k), epoch(e) {
    confirm(now);
  }
  // The last time the database showed this copy to be the file's content.
  [[nodiscard]] std::string as_of() const {
    const std::uint32_t s = as_of_s.load(std::memory_order_relaxed);
    return fmt::format("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  }
  // It was shown to be so at `now` (ISO-8601 UTC).
  void confirm(std::string_view now) const noexcept {
    const auto two = [&](std::size_t at) {
      return static_cast<std::uint32_t>((now[at] - '0') * 10 + (now[at + 1] - '0'));
    };
    if (now.size() >= 19) as_of_s.store(two(11) * 3600 + two(14) * 60 + two(17));
  }

  std::shared_ptr<const SchedulePage> page;       // the schedule, its page's own part rendered
  mutable std::atomic<std::uint32_t> as_of_s{0};  // seconds into the UTC day
  std::uint64_t kept = 0;   // when it was kept, in the order of keep_stale_copy() calls
  std::uint64_t epoch = 0;  // the data epoch observed before it was read (0: none)
};

void PanelServer::keep_stale_copy(const std::string& date, std::shared_ptr<const SchedulePage> page,
                                  std::string_view now, std::uint64_t epoch) {
  std::lock_guard<std::mutex> lock(stale_mutex_);
  // The client picks the date: past kStaleCopies, the copy kept longest ago gives way.
  put_bounded(last_good_, date,
              std::make_shared<const StaleCopy>(std::move(page), now, ++stale_copies_kept_, epoch),
              kStaleCopies, [](const auto& a, const auto& b) { return a->kept < b->kept; });
}

std::shared_ptr<const SchedulePage> PanelServer::current_copy(const std::string& date,
                                                              std::uint64_t epoch,
                                                              std::string_view now) const {
  if (epoch == 0) return nullptr;
  std::lock_guard<std::mutex> lock(stale_mutex_);
  const auto it = last_good_.find(date);
  if (it == last_good_.end() || it->second->epoch != epoch) return nullptr;
  it->second->confirm(now);
  return it->second->page;
}

std::size_t PanelServer::stale_copies() const {
  std::lock_guard<std::mutex> lock(stale_mutex_);
  return last_good_.size();
}

net::awaitable<void> PanelServer::get_schedule(const http::Request& req, http::Response& res,
                                               lane::Context& ctx) {
  const bool as_json = req.path == "/api/schedule";
  ScheduleAsk ask;
  if (!schedule_asked(req, res, as_json, ask)) co_return;
  ScheduleRead read;
  co_await read_schedule(ctx, ask, read);
  if (std::optional<Status> failed = answer_schedule_read(ask, res, read)) {
    answers_->failure(res, *failed, req.path, as_json);
  }
}

bool PanelServer::schedule_asked(const http::Request& req, http::Response& res, bool as_json,
                                 ScheduleAsk& ask) {
  counters_.requests++;
  ask.as_json = as_json;
  ask.date = req.has_param("date") ? req.get_param_value("date") : today_utc();
  if (!valid_date(ask.date)) {
    answers_->client_error(res, 400, "date must be a calendar date written YYYY-MM-DD", as_json);
    return false;
  }
  ask.token = session_token(req);
  if (ask.token.empty()) {
    send_to_sign_in(res, as_json);
    counters_.bad_request++;
    return false;
  }
  ask.now = now_utc();
  return true;
}

std::optional<Status> PanelServer::answer_schedule_read(const ScheduleAsk& ask, http::Response& res,
                                                        ScheduleRead& read) {
  const bool as_json = ask.as_json;
  if (read.signed_out) {
    forget_session(ask.token);
    send_to_sign_in(res, as_json);
    counters_.bad_request++;
    return std::nullopt;
  }
  const User& user = read.user;
  if (user.id != 0) confirm_session(ask.token, user);
  if (!read.failure.ok()) {
    // Only a session the database confirmed, now or lately, sees the last good copy: while
    // the database cannot check a cookie, any cookie would do otherwise.
    const std::optional<User> known =
        user.id != 0 ? std::optional<User>(user) : confirmed_session(ask.token);
    if (known && answer_stale_schedule(res, ask.date, *known, read.failure, as_json)) {
      return std::nullopt;
    }
    return read.failure;
  }
  if (holdfast() && !read.current_copy) {
    keep_stale_copy(ask.date, read.page, ask.now, read.epoch);
  }
  counters_.ok++;
  const std::string csrf = csrf_token(ask.token);
  res.set_header("X-CSRF-Token", csrf);
  if (as_json) {
    res.set_content(schedule_json(read.page->schedule, std::nullopt).dump(), "application/json");
  } else {
    res.set_content(render_schedule(*read.page, user, std::nullopt, csrf), kHtml);
  }
  return std::nullopt;
}

net::awaitable<void> PanelServer::read_schedule(lane::Context& ctx, const ScheduleAsk& ask,
                                                ScheduleRead& read) {
  // The session (schedule_asked() found its cookie), and on SQLite's lane the file's change
  // epoch in the same statement.
  Result<ClubStore::StampedSession> stamped =
      co_await ctx.calls.session(ctx, ask.token, ask.now, Priority::kNormal);
  if (!stamped.ok()) {
    read.failure = stamped.status();
    co_return;
  }
  if (!stamped->user) {
    // Only the database's own answer "no such session" signs a client out: an error (a
    // permission the database refused, a read-only server) is answered for what it is.
    read.signed_out = true;
    read.failure = Status(Code::kPermissionDenied, "no live session");
    co_return;
  }
  read.user = *stamped->user;
  read.epoch = stamped->epoch;
  if (holdfast()) {
    toucher_->touch(ask.token);
  } else if (Status touched = co_await ctx.calls.refresh_session(ctx, ask.token, ask.now);
             !touched.ok()) {
    read.failure = touched;  // the origin's "Failed to get session"
    co_return;
  }
  // Nothing committed since the last good copy was read: it is the answer, without the
  // schedule's queries (sqlite::ChangeEpoch, holdfast/sqlite/change_epoch.hpp). A store
  // without an epoch (PostgreSQL, the blocking calls) reads every page.
  if (std::shared_ptr<const SchedulePage> copy = current_copy(ask.date, read.epoch, ask.now)) {
    read.page = std::move(copy);
    read.current_copy = true;
    counters_.current_copy++;
    co_return;
  }
  // The copy is old: one request reads the day, those that observed no later epoch wait for
  // its answer (asio::SharedReads). Without an epoch nothing says a read under way began
  // after this request's own writes: each reads.
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
  Result<std::vector<Game>> games = co_await ctx.calls.games(ctx, ask.date);
  if (!games.ok()) {
    read.failure = games.status();
    co_return;
  }
  Result<ScheduleContext> context = co_await ctx.calls.context(ctx, ask.date);
  if (!context.ok()) {
    read.failure = context.status();
    co_return;
  }
  read.page = SchedulePage::of(Schedule{ask.date, std::move(*games), std::move(*context)});
  if (ticket) ticket->land(read.page);
}

bool PanelServer::answer_stale_schedule(http::Response& res, const std::string& date,
                                        const User& user, const Status& failure, bool as_json) {
  std::shared_ptr<const StaleCopy> copy;
  // A read the database refused by permission (42501) is our configuration, not load, and
  // it will not pass by itself: the day's last good copy still beats an error page, and the
  // ERROR line below says why it was shown (issue 45, item 4).
  const bool not_permitted = database_refusal(failure) == Refusal::kNotPermitted;
  if (holdfast() && options_.serve_stale && (is_busy(failure) || not_permitted)) {
    std::lock_guard<std::mutex> lock(stale_mutex_);
    if (auto it = last_good_.find(date); it != last_good_.end()) copy = it->second;
  }
  if (!copy) return false;
  const std::string why = failure.to_string();
  const std::string as_of = copy->as_of();
  if (not_permitted) {
    options_.logger->error(
        "panel",
        "schedule answered from its last good copy: the database refused the read (not "
        "permitted; a missing GRANT?)",
        {{"as_of", std::string_view(as_of)},
         {"sqlstate", failure.sqlstate()},
         {"status", std::string_view(why)}});
  } else {
    options_.logger->warn("panel", "schedule answered from its last good copy",
                          {{"as_of", std::string_view(as_of)}, {"status", std::string_view(why)}});
  }
  counters_.stale++;
  counters_.ok++;
  res.set_header("X-Holdfast-Stale", as_of);
  if (as_json) {
    res.set_content(schedule_json(copy->page->schedule, as_of).dump(), "application/json");
  } else {
    User someone = user.id != 0 ? user : User{0, "signed-in user", "", "member"};
    res.set_content(render_schedule(*copy->page, someone, as_of, {}), kHtml);
  }
  return true;
}

}  // namespace holdfast::panel
