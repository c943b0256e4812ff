// The async lane's routes (ADRs 0029, 0030): which requests HttpServer gives it, one
// RetryWindow per request open from its arrival (DESIGN §10), and the writes: payments,
// sign-ups, sign-ins and sign-outs with the same answers as routes_writes.cpp and
// routes_session.cpp, each database call driven by holdfast::asio::async_run
// (async_call.hpp). A sign-in's password check (tens of milliseconds of Argon2id) waits for
// its place at the SignInGate on a timer and runs on HttpServer::cpu_executor(), so that
// neither stalls the lane's event loop.

#include <algorithm>
#include <atomic>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "async_call.hpp"
#include "route_helpers.hpp"
#include "server.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "pg_lane.hpp"
#endif

namespace holdfast::panel {

namespace net = boost::asio;
using lane::read_call;
using lane::write_call;

bool PanelServer::is_async_route(const http::Request& req) noexcept {
  // Every route with database work. (GET /login, /healthz and /metrics are light: the
  // server keeps them on workers of their own.)
  if (req.method == "GET" || req.method == "HEAD") {
    return req.path == "/dashboard/schedule" || req.path == "/api/schedule" ||
           req.path == "/login/link" || req.path == "/status" || req.path == "/status.svg";
  }
  return req.method == "POST" &&
         (req.path == "/payments" || req.path == "/signups" || req.path == "/login" ||
          req.path == "/logout" || req.path == "/report");
}

net::awaitable<void> PanelServer::handle_async(const http::Request& req, http::Response& res) {
  if (!refused_by_guards(req, res)) {
    // Open from the request's arrival (DESIGN §10): whatever it met before its calls, the
    // answer comes within the window of whoever sent it. (Request::received is on the
    // store's clock: PanelServer::start() gives it to HttpServer.)
    lane::Context ctx(options_.window, options_.store->clock());
    if (req.received != TimePoint{}) ctx.window().open(req.received);
    cap_by_upstream(req, ctx.window());
    if (options_.store->async_access()->postgres) {
      // PostgreSQL: the calls wait on this loop (pg_lane_); the reads must see the writes the
      // client's hf_wal cookie names, as on the workers.
      if (pg_lane_ == nullptr) {
        res.status = 503;  // the lane's Clients did not open (only memory could fail them)
        res.set_header("Retry-After", "1");
        res.set_content("the panel is starting; try again in a second\n",
                        "text/plain; charset=utf-8");
        co_return;
      }
      const lane::OnThisThread request(ctx);
      options_.store->require_position(cookie_value(req, kWritePositionCookie));
    }
    if (req.path == "/status" || req.path == "/status.svg") {
      co_await get_status_async(req, res, ctx);
    } else if (req.path == "/login/link") {
      co_await get_login_link_async(req, res, ctx);
    } else if (req.method != "POST") {
      co_await get_schedule_async(req, res, ctx);
    } else if (req.path == "/report") {
      co_await post_report_async(req, res, ctx);
    } else if (req.path == "/login") {
      co_await post_login_async(req, res, ctx);
    } else if (req.path == "/logout") {
      co_await post_logout_async(req, res, ctx);
    } else {
      co_await post_write_async(req, res, ctx);
    }
  }
  record_traffic(req, res);
}

net::awaitable<void> PanelServer::post_write_async(const http::Request& req, http::Response& res,
                                                   lane::Context& ctx) {
  counters_.requests++;
  ClubStore& store = *options_.store;
  const bool payment = req.path == "/payments";
  const std::string token = session_token(req);
  const std::string now = now_utc();
  // A payment is critical (ADR 0035): under overload it keeps its places, the session read
  // that authorizes it included. Sign-ups are as normal as pages.
  const Priority priority = payment ? Priority::kCritical : Priority::kNormal;
  const Result<std::optional<User>> who = co_await session_async(token, now, ctx, priority);
  const std::optional<WriteInput> in = write_input_of(req, res, req.path, token, who);
  if (!in) co_return;
  // As the store's own loop runs them: a whole transaction, re-run after a rollback; with a
  // key, idempotent too (the key makes a repeat apply nothing).
  const Idempotency idempotency =
      in->key.empty() ? Idempotency::kNonIdempotent : Idempotency::kIdempotent;
  if (payment) {
    std::optional<Result<PaymentReceipt>> paid;
#ifdef HOLDFAST_PANEL_HAVE_PG
    if (pg_lane_ != nullptr) {
      paid.emplace(co_await pg_lane_->pay(ctx, in->user_id, in->value, in->method, in->key, now));
    }
#endif
    if (!paid) {
      const Operation op{idempotency, true, priority, "payments.create"};
      paid.emplace(co_await write_call<Result<PaymentReceipt>>(store, ctx, op, [&] {
        return store.pay_once(in->user_id, in->value, in->method, in->key, now);
      }));
    }
    const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
    answer_payment(res, *paid);
  } else {
    std::optional<Result<SignupReceipt>> added;
#ifdef HOLDFAST_PANEL_HAVE_PG
    if (pg_lane_ != nullptr) {
      added.emplace(co_await pg_lane_->sign_up(ctx, in->user_id, in->value, in->key, now));
    }
#endif
    if (!added) {
      const Operation op{idempotency, true, priority, "signups.create"};
      added.emplace(co_await write_call<Result<SignupReceipt>>(store, ctx, op, [&] {
        return store.sign_up_once(in->user_id, in->value, in->key, now);
      }));
    }
    const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
    answer_signup(res, *added);
  }
}

net::awaitable<void> PanelServer::post_logout_async(const http::Request& req, http::Response& res,
                                                    lane::Context& ctx) {
  counters_.requests++;
  ClubStore& store = *options_.store;
  const std::string token = session_token(req);
  if (!token.empty()) {
    if (!logout_allowed(req, res, token)) co_return;
    std::optional<Status> ended;
#ifdef HOLDFAST_PANEL_HAVE_PG
    if (pg_lane_ != nullptr) ended.emplace(co_await pg_lane_->end_session(ctx, token));
#endif
    if (!ended) {
      ended.emplace(co_await write_call<Status>(store, ctx,
                                                Operation::idempotent_write("session.end"),
                                                [&] { return store.end_session_once(token); }));
    }
    if (!ended->ok()) {
      // The session lives on: say so rather than pretend (the cookie is kept).
      answers_->failure(res, *ended, "/logout", false);
      co_return;
    }
  }
  answer_logout(res, token);
}

net::awaitable<void> PanelServer::post_login_async(const http::Request& req, http::Response& res,
                                                   lane::Context& ctx) {
  counters_.requests++;
  const std::optional<SignInAsk> ask = sign_in_asked(req, res);
  if (!ask) co_return;
  const Result<std::string> token = co_await sign_in_async(*ask, ctx);
  const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
  answer_sign_in(res, *ask, token);
}

namespace {

// A sign-in's place at the SignInGate while it lives: given back however the coroutine
// ends (leave() once started, give_up() while waiting).
class GatePlace {
 public:
  explicit GatePlace(SignInGate& gate) : gate_(gate) {}
  GatePlace(const GatePlace&) = delete;
  GatePlace& operator=(const GatePlace&) = delete;
  ~GatePlace() { leave(); }

  // Waits for a place on this coroutine's event loop, holding no thread: kRun, or why not.
  net::awaitable<SignInGate::Turn> take(SignInGate::Asker asker) {
    // The gate's Wake may come from any thread: it notes the turn and cancels the timer on
    // the timer's own (single-threaded) loop, where it runs only once the wait below has
    // begun.
    struct Signal {
      explicit Signal(const net::any_io_executor& loop) : timer(loop) {}
      net::steady_timer timer;
      std::atomic<int> turn{-1};
    };
    const auto signal = std::make_shared<Signal>(co_await net::this_coro::executor);
    const SignInGate::Entry entry = gate_.enter(std::move(asker), [signal](SignInGate::Turn t) {
      signal->turn = static_cast<int>(t);
      net::post(signal->timer.get_executor(), [signal] { signal->timer.cancel(); });
    });
    id_ = entry.id;
    if (entry.turn != SignInGate::Turn::kWait) {
      running_ = entry.turn == SignInGate::Turn::kRun;
      co_return entry.turn;
    }
    waiting_ = true;
    signal->timer.expires_after(gate_.options().max_wait);
    (void)co_await signal->timer.async_wait(net::as_tuple(net::use_awaitable));
    waiting_ = false;
    const int told = signal->turn.load();
    // Not told: the wait is over, and so is the place unless it was given just now.
    const SignInGate::Turn turn =
        told >= 0 ? static_cast<SignInGate::Turn>(told) : gate_.give_up(entry.id);
    running_ = turn == SignInGate::Turn::kRun;
    co_return turn;
  }
  // The check is done: the place goes to the next waiter.
  void leave() {
    if (waiting_ && gate_.give_up(id_) == SignInGate::Turn::kRun) running_ = true;
    waiting_ = false;
    if (running_) gate_.leave(id_);
    running_ = false;
  }

 private:
  SignInGate& gate_;
  std::uint64_t id_ = 0;
  bool waiting_ = false;
  bool running_ = false;
};

}  // namespace

net::awaitable<Result<std::string>> PanelServer::sign_in_async(const SignInAsk& ask,
                                                               lane::Context& ctx) {
  ClubStore& store = *options_.store;
  using Found = Result<std::optional<ClubStore::Credentials>>;
  // Signing in is critical (ADR 0035): its reads and its session keep their places.
  std::optional<Found> user;
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (pg_lane_ != nullptr) user.emplace(co_await pg_lane_->credentials(ctx, ask.email));
#endif
  if (!user) {
    user.emplace(co_await read_call<Found>(store, ctx, Operation::read("login.user").critical(),
                                           [&] { return store.credentials_once(ask.email); }));
  }
  if (!user->ok()) co_return user->status();
  // An unknown email goes through the same gate and costs the same check (the store's
  // dummy hash), so that neither the answer nor its time tells whether it has an account.
  const std::optional<ClubStore::Credentials>& stored = **user;
  const ClubStore::Credentials* found = stored.has_value() ? &*stored : nullptr;
  ClubStore::SignInCheck check;
  {
    GatePlace place(*sign_in_gate_);
    const SignInGate::Turn turn = co_await place.take(gate_asker(ask));
    if (turn != SignInGate::Turn::kRun) co_return gate_refusal(turn);
    check = co_await net::co_spawn(
        http_->cpu_executor(),
        [&]() -> net::awaitable<ClubStore::SignInCheck> {
          co_return store.check_sign_in(found, ask.email, ask.password);
        },
        net::use_awaitable);
  }
  if (found == nullptr || !check.right) {
    co_return Status(Code::kPermissionDenied, "unknown email or wrong password");
  }
  if (!check.fresh_hash.empty()) {
    // Its failure is not the sign-in's: the next one tries again.
#ifdef HOLDFAST_PANEL_HAVE_PG
    if (pg_lane_ != nullptr) {
      (void)co_await pg_lane_->rehash(ctx, found->user_id, check.fresh_hash, found->password_hash);
    }
#endif
    if (pg_lane_ == nullptr) {
      (void)co_await write_call<Status>(
          store, ctx, Operation::idempotent_write("login.rehash"), [&] {
            return store.rehash_once(found->user_id, check.fresh_hash, found->password_hash);
          });
    }
  }
  co_return co_await open_session_async(found->user_id, ctx);
}

net::awaitable<Result<std::string>> PanelServer::open_session_async(std::int64_t user_id,
                                                                    lane::Context& ctx) {
  ClubStore& store = *options_.store;
  const std::string token = ClubStore::new_token();
  const std::string now = now_utc();
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (pg_lane_ != nullptr) {
    const Status opened = co_await pg_lane_->insert_session(ctx, token, user_id, now);
    if (!opened.ok()) co_return opened;
    // Its failure is not the sign-in's: the next one tries again.
    (void)co_await pg_lane_->cap_sessions(ctx, user_id, now);
    co_return token;
  }
#endif
  const Status opened = co_await write_call<Status>(
      store, ctx, Operation::idempotent_write("login.session").critical(),
      [&] { return store.insert_session_once(token, user_id, now); });
  if (!opened.ok()) co_return opened;
  // Its failure is not the sign-in's: the next one tries again. Housekeeping: background.
  (void)co_await write_call<Status>(store, ctx,
                                    Operation::idempotent_write("login.session_cap").background(),
                                    [&] { return store.cap_sessions_once(user_id, now); });
  co_return token;
}

net::awaitable<Result<std::optional<User>>> PanelServer::session_async(const std::string& token,
                                                                       const std::string& now,
                                                                       lane::Context& ctx,
                                                                       Priority priority) {
  Result<ClubStore::StampedSession> read =
      co_await stamped_session_async(token, now, ctx, priority);
  if (!read.ok()) co_return read.status();
  co_return std::move(read->user);
}

net::awaitable<Result<ClubStore::StampedSession>> PanelServer::stamped_session_async(
    const std::string& token, const std::string& now, lane::Context& ctx, Priority priority) {
  if (token.empty()) co_return ClubStore::StampedSession{};
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (pg_lane_ != nullptr) {
    Result<std::optional<User>> who = co_await pg_lane_->session(ctx, token, now, priority);
    if (!who.ok()) co_return who.status();
    co_return ClubStore::StampedSession{std::move(*who), 0};
  }
#endif
  ClubStore& store = *options_.store;
  // On the sessions' own schedule (ClubStore::session()).
  co_return co_await read_call<Result<ClubStore::StampedSession>>(
      store, ctx, Operation::read("session.read").with_priority(priority),
      [&] { return store.stamped_session_once(token, now); }, store.async_access()->sessions);
}

net::awaitable<void> PanelServer::get_login_link_async(const http::Request& req,
                                                       http::Response& res, lane::Context& ctx) {
  counters_.requests++;
  const std::optional<SignInLink> link = sign_in_link_taken(req, res);
  if (!link) co_return;
  const Result<std::string> session = co_await open_session_async(link->user_id, ctx);
  const lane::OnThisThread request(ctx);  // the hf_wal cookie reads its position
  answer_sign_in_link(res, *link, session);
}

net::awaitable<void> PanelServer::post_report_async(const http::Request& req, http::Response& res,
                                                    lane::Context& ctx) {
  counters_.requests++;
  const std::optional<ReportAsk> ask = report_asked(req, res);
  if (!ask) co_return;
  ClubStore& store = *options_.store;
  std::optional<Status> recorded;
#ifdef HOLDFAST_PANEL_HAVE_PG
  if (pg_lane_ != nullptr) {
    recorded.emplace(
        co_await pg_lane_->record_report(ctx, ask->path, ask->digest, ask->note, ask->now));
  }
#endif
  if (!recorded) {
    recorded.emplace(co_await write_call<Status>(
        store, ctx, Operation::write("problem_reports.create"),
        [&] { return store.record_report_once(ask->path, ask->digest, ask->note, ask->now); }));
  }
  answer_report(res, *ask, *recorded);
}

net::awaitable<void> PanelServer::get_status_async(const http::Request& req, http::Response& res,
                                                   lane::Context& ctx) {
  counters_.requests++;
  const bool image = req.path == "/status.svg";
  const std::string token = session_token(req);
  const Result<std::optional<User>> who = co_await session_async(token, now_utc(), ctx);
  if (status_allowed_of(res, req.path, image, token, who)) answer_status(res, image);
}

std::optional<HttpServer::LaneHooks> PanelServer::event_loop_calls() {
#ifdef HOLDFAST_PANEL_HAVE_PG
  std::optional<Result<PgClubStore::LaneOptions>> wanted = PgLane::wanted(*options_.store);
  if (!wanted) return std::nullopt;
  if (!wanted->ok()) {
    // Served on the workers (their blocking calls work with these options); say why once.
    options_.logger->warn("panel", "the PostgreSQL routes are served on the workers: " +
                                       std::string(wanted->status().message()));
    return std::nullopt;
  }
  HttpServer::LaneHooks hooks;
  hooks.started = [this, clients = std::move(**wanted)](const net::any_io_executor& loop) {
    // Checked by wanted(): only memory could fail it.
    Result<std::unique_ptr<PgLane>> lane = PgLane::open(*options_.store, loop, clients);
    if (lane.ok()) pg_lane_ = std::move(*lane);
  };
  hooks.stopped = [this] { pg_lane_.reset(); };
  return hooks;
#else
  return std::nullopt;
#endif
}

}  // namespace holdfast::panel
