#include "pg_lane.hpp"

#include <utility>
#include <vector>

#include <boost/asio/use_awaitable.hpp>

#include "club_reads_pg.hpp"
#include "club_writes_pg.hpp"
#include "holdfast/adapters/asio_pg_log_store.hpp"
#include "idempotency.hpp"

namespace holdfast::panel {

namespace net = boost::asio;

std::optional<Result<PgClubStore::LaneOptions>> PgLane::wanted(const ClubStore& store) {
  const auto* pg_store = dynamic_cast<const PgClubStore*>(&store);
  if (pg_store == nullptr) return std::nullopt;
  std::optional<Result<PgClubStore::LaneOptions>> options = pg_store->lane_options();
  if (!options || !options->ok()) return options;
  for (const asio::pg::ClientOptions* o : {&(*options)->reads, &(*options)->writes}) {
    if (Status bad = o->check(); !bad.ok()) return Result<PgClubStore::LaneOptions>(bad);
  }
  return options;
}

Result<std::unique_ptr<PgLane>> PgLane::open(ClubStore& store, const net::any_io_executor& loop,
                                             PgClubStore::LaneOptions options) {
  auto* pg_store = dynamic_cast<PgClubStore*>(&store);
  if (pg_store == nullptr) {
    return Status(Code::kInvalidArgument, "PgLane: the store is not on PostgreSQL");
  }
  Result<std::shared_ptr<asio::pg::Client<>>> reads =
      asio::pg::Client<>::open(loop, std::move(options.reads));
  if (!reads.ok()) return reads.status();
  // The writes' sibling of the reads' Client: a frozen primary the pages found answers the
  // next payment at once, instead of after a silence of its own.
  Result<std::shared_ptr<asio::pg::Client<>>> writes =
      asio::pg::Client<>::open(loop, options.writes, *reads);
  if (!writes.ok()) return writes.status();
  std::unique_ptr<PgLane> lane(
      new PgLane(*pg_store, std::move(*reads), std::move(*writes), std::move(options.writes)));
  pg_store->attach_lane(lane.get());
  return lane;
}

PgLane::PgLane(PgClubStore& store, std::shared_ptr<asio::pg::Client<>> reads,
               std::shared_ptr<asio::pg::Client<>> writes, asio::pg::ClientOptions writes_options)
    : store_(store),
      reads_(std::move(reads)),
      writes_(std::move(writes)),
      writes_options_(std::move(writes_options)) {}

Result<std::shared_ptr<LogStore>> PgLane::open_logs(const std::string& url) {
  const bool store_server = url == writes_options_.connect.conninfo;
  asio::pg::ClientOptions o;
  if (store_server) {
    o = writes_options_;  // its pooling and session settings
  } else {
    o.connect.conninfo = url;
    o.pooling = pg::Pooling::kTransaction;  // nothing prepared: right behind any pooler
  }
  o.connect.application_name = "holdfast-panel-logs";
  // pg::PgLogStore's lock_timeout, in place of the store's own (its settings are copied).
  std::erase_if(o.connect.settings, [](const auto& kv) { return kv.first == "lock_timeout"; });
  o.connect.settings.emplace_back("lock_timeout", "500");
  o.max_connections = 2;  // a batch and a pruning
  o.standby = {};
  o.lost_writes.remember = 0;
  o.shield = {};
  o.shield_name = "panel.logs";
  Result<std::shared_ptr<asio::pg::Client<>>> client =
      store_server ? asio::pg::Client<>::open(writes_->get_executor(), std::move(o), writes_)
                   : asio::pg::Client<>::open(writes_->get_executor(), std::move(o));
  if (!client.ok()) return client.status();
  Result<std::unique_ptr<asio::pg::LogStore<>>> store = asio::pg::LogStore<>::open(*client);
  if (!store.ok()) return store.status();
  logs_ = std::move(*client);
  return std::shared_ptr<LogStore>(std::move(*store));
}

PgLane::~PgLane() {
  store_.attach_lane(nullptr);
}

net::awaitable<Result<pg::Rows>> PgLane::read(lane::Context& ctx, std::string_view sql,
                                              std::span<const pg::Param> params,
                                              const pg::ReadOptions& options) {
  store_.count_call();
  co_return co_await reads_->async_read(ctx.request, sql, params, options, net::use_awaitable);
}

net::awaitable<Result<ClubStore::StampedSession>> PgLane::session(lane::Context& ctx,
                                                                  const std::string& token,
                                                                  const std::string& now,
                                                                  Priority priority) {
  // On the sessions' own schedule (ClubStore::session()); it must outlive the call.
  static const RetryPolicy sessions = RetryPolicy::session_reads();
  pg::ReadOptions lookup;
  lookup.operation = Operation::read("session.read").with_priority(priority);
  lookup.policy = &sessions;
  {
    const lane::OnThisThread request(ctx);
    store_.recall_session(token);  // a sign-in just now, on this process
  }
  const pg::Param params[] = {token, now};
  Result<pg::Rows> rows = co_await read(ctx, pgreads::kSession, params, lookup);
  if (!rows.ok()) co_return rows.status();
  Result<std::optional<User>> user = pgreads::session_of(*rows);
  if (!user.ok()) co_return user.status();
  if (user->has_value()) {
    const lane::OnThisThread request(ctx);
    store_.recall_user((*user)->id);  // the user's payments just now, on this process
  }
  co_return ClubStore::StampedSession{std::move(*user), 0};  // no change epoch on PostgreSQL
}

template <class T, class Decode>
net::awaitable<Result<T>> PgLane::decoded(lane::Context& ctx, std::string_view sql,
                                          std::span<const pg::Param> params, Operation op,
                                          Decode decode) {
  pg::ReadOptions read_options;
  read_options.operation = op;
  Result<pg::Rows> rows = co_await read(ctx, sql, params, read_options);
  if (!rows.ok()) co_return rows.status();
  co_return decode(*rows);
}

net::awaitable<Result<std::vector<Game>>> PgLane::games(lane::Context& ctx,
                                                        const std::string& date) {
  const pg::Param params[] = {date};
  co_return co_await decoded<std::vector<Game>>(
      ctx, pgreads::kGames, params, Operation::read("schedule.games"), pgreads::games_of);
}

net::awaitable<Result<ScheduleContext>> PgLane::context(lane::Context& ctx,
                                                        const std::string& date) {
  const pg::Param params[] = {date};
  co_return co_await decoded<ScheduleContext>(
      ctx, pgreads::kContext, params, Operation::read("schedule.context"), pgreads::context_of);
}

net::awaitable<Result<std::optional<ClubStore::Credentials>>> PgLane::credentials(
    lane::Context& ctx, const std::string& email) {
  const pg::Param params[] = {email};
  co_return co_await decoded<std::optional<ClubStore::Credentials>>(
      ctx, pgreads::kCredentials, params, Operation::read("login.user").critical(),
      pgreads::credentials_of);
}

net::awaitable<Result<std::pair<std::int64_t, bool>>> PgLane::create_row(lane::Context& ctx,
                                                                         std::int64_t user_id,
                                                                         std::string_view route,
                                                                         const IdempotencyKey& key,
                                                                         RowBody body) {
  store_.count_call();
  pg::TransactionOptions t;
  t.operation = Operation::transaction(/*rerunnable=*/true, std::string(route) + ".create")
                    .with_priority(route_priority(route));
  if (key.key.empty()) {
    Result<std::int64_t> id =
        co_await writes_->async_transaction(ctx.request, body, t, net::use_awaitable);
    if (!id.ok()) co_return id.status();
    co_return std::pair<std::int64_t, bool>(*id, false);
  }
  const std::string keyed = scoped_key(user_id, route, key.key);
  Result<KeyedResult> r = co_await writes_->async_once(
      ctx.request, keyed,
      [&](Tx& tx) -> net::awaitable<Result<std::string>> {
        Result<std::int64_t> id = co_await body(tx);
        if (!id.ok()) co_return id.status();
        co_return key_record(key.fingerprint, *id);
      },
      t, net::use_awaitable);
  if (!r.ok()) co_return r.status();
  Result<std::int64_t> id = recorded_id(r->result, key.fingerprint);
  if (!id.ok()) co_return id.status();
  co_return std::pair<std::int64_t, bool>(*id, r->replayed);
}

net::awaitable<Result<PaymentReceipt>> PgLane::pay(lane::Context& ctx, std::int64_t user_id,
                                                   std::int64_t amount_cents,
                                                   const std::string& method,
                                                   const std::string& key, const std::string& now) {
  if (Status bad = ClubStore::check_payment(amount_cents, method, key); !bad.ok()) co_return bad;
  const IdempotencyKey keyed = payment_key(amount_cents, method, key);
  const pg::Param params[] = {user_id, amount_cents, method, now};
  Result<std::pair<std::int64_t, bool>> made = co_await create_row(
      ctx, user_id, "payments", keyed, [&](Tx& tx) -> net::awaitable<Result<std::int64_t>> {
        Result<pg::Rows> r = co_await tx.query(pgwrites::kInsertPayment, params);
        if (!r.ok()) co_return r.status();
        co_return pgwrites::id_of(*r);
      });
  if (!made.ok()) co_return made.status();
  {
    const lane::OnThisThread request(ctx);
    store_.remember_user_write(user_id);  // the user's next pages on this process see it
  }
  co_return PaymentReceipt{made->first, amount_cents, made->second};
}

net::awaitable<Result<SignupReceipt>> PgLane::sign_up(lane::Context& ctx, std::int64_t user_id,
                                                      std::int64_t game_id, const std::string& key,
                                                      const std::string& now) {
  if (Status bad = ClubStore::check_sign_up(game_id, key); !bad.ok()) co_return bad;
  const IdempotencyKey keyed = sign_up_key(game_id, key);
  const pg::Param lock[] = {game_id, now};
  const pg::Param seats[] = {game_id, user_id};
  const pg::Param add[] = {game_id, user_id, now};
  Result<std::pair<std::int64_t, bool>> made = co_await create_row(
      ctx, user_id, "signups", keyed, [&](Tx& tx) -> net::awaitable<Result<std::int64_t>> {
        Result<pg::Rows> game = co_await tx.query(pgwrites::kLockGame, lock);
        if (!game.ok()) co_return game.status();
        Result<std::int64_t> capacity = pgwrites::open_game(*game);
        if (!capacity.ok()) co_return capacity.status();
        Result<pg::Rows> taken = co_await tx.query(pgwrites::kSeatsTaken, seats);
        if (!taken.ok()) co_return taken.status();
        if (Status full = pgwrites::seat_free(*taken, *capacity); !full.ok()) co_return full;
        Result<pg::Rows> added = co_await tx.query(pgwrites::kInsertSignup, add);
        if (!added.ok()) co_return added.status();
        co_return pgwrites::id_of(*added);
      });
  if (!made.ok()) co_return made.status();
  co_return SignupReceipt{made->first, game_id, made->second};
}

net::awaitable<Status> PgLane::record_report(lane::Context& ctx, const std::string& path,
                                             const std::string& digest, const std::string& note,
                                             const std::string& now) {
  if (Status bad = ClubStore::check_report(path, digest, note); !bad.ok()) co_return bad;
  const pg::Param params[] = {path, digest, note, now};
  co_return co_await write(ctx, pgwrites::kInsertReport, params,
                           Operation::write("problem_reports.create"));
}

net::awaitable<Status> PgLane::write(lane::Context& ctx, std::string_view sql,
                                     std::span<const pg::Param> params, const Operation& op) {
  store_.count_call();
  Result<pg::Rows> r =
      co_await writes_->async_write(ctx.request, sql, params, op, net::use_awaitable);
  co_return r.status();
}

net::awaitable<Status> PgLane::rehash(lane::Context& ctx, std::int64_t user_id,
                                      const std::string& fresh, const std::string& stored) {
  const pg::Param params[] = {fresh, user_id, stored};
  const Status s =
      co_await write(ctx, pgwrites::kRehash, params, Operation::idempotent_write("login.rehash"));
  if (s.ok()) {
    const lane::OnThisThread request(ctx);
    store_.remember_user_write(user_id);
  }
  co_return s;
}

net::awaitable<Status> PgLane::insert_session(lane::Context& ctx, const std::string& token,
                                              std::int64_t user_id, const std::string& now) {
  const pg::Param params[] = {token, user_id, now};
  const Status s = co_await write(ctx, pgwrites::kInsertSession, params,
                                  Operation::idempotent_write("login.session").critical());
  if (s.ok()) {
    const lane::OnThisThread request(ctx);
    store_.remember_session_write(token);  // the session's next page sees it
  }
  co_return s;
}

net::awaitable<Status> PgLane::cap_sessions(lane::Context& ctx, std::int64_t user_id,
                                            const std::string& now) {
  const pg::Param params[] = {user_id, now, std::int64_t{ClubStore::kSessionsPerUser}};
  co_return co_await write(ctx, pgwrites::kCapSessions, params,
                           Operation::idempotent_write("login.session_cap").background());
}

net::awaitable<Result<std::string>> PgLane::open_session(lane::Context& ctx, std::int64_t user_id,
                                                         const std::string& now) {
  const std::string token = ClubStore::new_token();
  const Status opened = co_await insert_session(ctx, token, user_id, now);
  if (!opened.ok()) co_return opened;
  // Its failure is not the sign-in's: the next one tries again.
  (void)co_await cap_sessions(ctx, user_id, now);
  co_return token;
}

net::awaitable<Status> PgLane::end_session(lane::Context& ctx, const std::string& token) {
  const pg::Param params[] = {token};
  co_return co_await write(ctx, pgwrites::kEndSession, params,
                           Operation::idempotent_write("session.end"));
}

}  // namespace holdfast::panel
