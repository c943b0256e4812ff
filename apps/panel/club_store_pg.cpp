#include "club_store_pg.hpp"

#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "club_reads_pg.hpp"
#include "club_schema_pg.hpp"
#include "club_writes_pg.hpp"
#include "demo_data.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg/url.hpp"
#include "idempotency.hpp"

namespace holdfast::panel {
namespace {

using pgschema::int_at;
using pgschema::kIdempotencyTable;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Every session's settings: timestamps in UTC, and a lock waited for at most busy_timeout.
std::vector<std::pair<std::string, std::string>> session_settings(const ClubStore::Options& o) {
  return {{"TimeZone", "UTC"},
          {"lock_timeout",
           std::to_string(std::chrono::ceil<std::chrono::milliseconds>(o.busy_timeout).count())}};
}

// holdfast's Shields: the policy file's, or the library's defaults except that while a
// breaker is open a request is answered at once -- a stale page, or a 503 with Retry-After --
// instead of waiting up to a second for the probe after lock contention and then for the
// lock itself (lock_timeout): a PostgreSQL lock such as a migration's ACCESS EXCLUSIVE is
// held for seconds, not the milliseconds of a SQLite writer.
Shield::Options holdfast_shield(const ClubStore::Options& o) {
  if (o.policy) return *o.policy;
  Shield::Options s;
  s.probe_wait = Duration::zero();
  return s;
}

// The origin's session schedule (150/500/1500/3000 ms) for holdfast; the baselines keep
// their single attempt. Its clock does not matter: the driver's window is on the store's.
const RetryPolicy& session_schedule() {
  static const RetryPolicy schedule = RetryPolicy::session_reads();
  return schedule;
}

}  // namespace

Result<std::unique_ptr<ClubStore>> PgClubStore::open(Options options) {
  std::string where = pg::redact_password(options.pg_url);
  const auto failed = [&](const Status& why) {
    Status s(why.code(),
             fmt::format("cannot use PostgreSQL at {}: {}", where,
                         pg::without_password(why.message(), options.pg_url)),
             why.fault());
    s.with_sqlstate(why.sqlstate());
    return s;
  };
  {
    // One connection now, so that a wrong URL or a server that is down is reported at
    // start, by its URL, rather than by the first page.
    pg::ConnectOptions probe;
    probe.conninfo = options.pg_url;
    probe.application_name = options.pg_application_name;
    probe.connect_timeout = seconds(5);
    probe.clock = options.clock;
    Result<pg::Connection> conn = pg::Connection::open(probe);
    if (!conn.ok()) return failed(conn.status());
  }
  auto store = std::unique_ptr<PgClubStore>(new PgClubStore(std::move(options), std::move(where)));
  const Options& o = store->options_;
  pg::DatabaseOptions base;
  base.url = o.pg_url;
  base.application_name = o.pg_application_name;
  base.settings = session_settings(o);
  base.idempotency_table = kIdempotencyTable;
  base.clock = store->clock_;
  if (o.strategy != Strategy::kHoldfast) {
    // The strategies holdfast is compared with know nothing of silence either.
    base.shield = Shield::Options::single_attempt();
    base.silence_after = Duration::zero();
  }
  if (o.strategy == Strategy::kHoldfast) base.shield = holdfast_shield(o);
  // While a breaker is open, one SELECT 1 every 250 ms finds the server back (as the SQLite
  // panel's probes do), rather than the next request after a growing open period.
  if (o.strategy == Strategy::kHoldfast) base.health_probe_interval = milliseconds(250);
  if (o.pg_transaction_pooling) base.pooling = pg::Pooling::kTransaction;
  pg::DatabaseOptions reads = base;
  reads.name = "club.reads";
  reads.replica_urls = o.pg_replica_urls;
  reads.read_connections = o.read_connections;
  reads.write_connections = 1;     // never opened
  reads.lost_writes.remember = 0;  // it confirms no write: nothing to check (ADR 0036)
  pg::DatabaseOptions writes = base;
  writes.name = "club.writes";
  writes.read_connections = 1;  // never opened
  writes.write_connections = o.pg_write_connections;
  try {
    store->reads_ = std::make_unique<pg::Database>(std::move(reads));
    store->writes_ = std::make_unique<pg::Database>(std::move(writes));
  } catch (const std::invalid_argument& e) {
    return failed(Status(Code::kInvalidArgument, e.what()));
  }
  if (o.strategy == Strategy::kHoldfast) {
    store->read_shield_ = &store->reads_->shield();
    store->write_shield_ = &store->writes_->shield();
    AsyncAccess a;
    a.shield = store->read_shield_;
    a.write_shield = store->write_shield_;
    a.sessions = &session_schedule();
    a.reads = &store->read_shield_->reads();
    a.writes = &store->write_shield_->writes();
    a.connections = o.read_connections;
    a.busy_timeout = o.busy_timeout;
    a.postgres = true;
    store->async_ = a;
  }
  return std::unique_ptr<ClubStore>(std::move(store));
}

std::optional<Result<PgClubStore::LaneOptions>> PgClubStore::lane_options() const {
  const Options& o = options_;
  if (o.strategy != Strategy::kHoldfast) return std::nullopt;
  asio::pg::ClientOptions c;
  // Silence as the store's Databases find it (their defaults).
  const pg::DatabaseOptions database;
  c.silence_after = database.silence_after;
  c.silence_check = database.silence_check_timeout;
  // Behind PgBouncer in transaction mode: nothing prepared, the settings set in each
  // transaction (the pooler refuses them at connect).
  if (o.pg_transaction_pooling) c.pooling = pg::Pooling::kTransaction;
  c.connect.conninfo = o.pg_url;
  c.connect.application_name = o.pg_application_name;
  c.connect.settings = session_settings(o);
  c.max_connections = static_cast<std::size_t>(std::max(o.read_connections, 1));
  c.idempotency_table = kIdempotencyTable;
  c.shield_name = "club.reads";
  c.shield = holdfast_shield(o);
  if (!o.pg_replica_urls.empty()) {
    // Several standbys are one list of hosts: the Client spreads the reads over them.
    Result<std::string> standbys = pg::any_of(o.pg_replica_urls);
    if (!standbys.ok()) {
      return Result<LaneOptions>(Status(standbys.status()).annotate("the standbys' URLs"));
    }
    c.standby = c.connect;
    c.standby.conninfo = std::move(*standbys);
    c.standby_connections = c.max_connections;
  }
  // As the store's two Databases: the reads' Client confirms no write (no watch), the
  // writes' has no standby and its own Shield, so that failing writes do not stop reads.
  LaneOptions lane{c, c};
  lane.reads.lost_writes.remember = 0;
  lane.writes.standby = {};
  lane.writes.max_connections = static_cast<std::size_t>(std::max(o.pg_write_connections, 1));
  lane.writes.shield_name = "club.writes";
  return Result<LaneOptions>(std::move(lane));
}

PgClubStore::PgClubStore(Options options, std::string where)
    : ClubStore(std::move(options)), where_(std::move(where)) {}

PgClubStore::~PgClubStore() = default;

template <class F>
auto PgClubStore::run(Operation op, F&& attempt) -> std::invoke_result_t<F&> {
  count_call();
  if (options_.strategy != Strategy::kHoldfast) return baseline_.run(op, attempt);
  // The driver bounds the page by its window (it opens it at the first statement).
  return attempt();
}

Status PgClubStore::ensure_demo_data(std::string_view today) {
  // A few dozen statements, one of them with every game: a window of its own, longer than
  // a page's (a second panel may also wait here for the first to finish).
  RequestScope scope(seconds(60), *clock_);
  const DemoData data = make_demo_data(today);
  pg::TransactionOptions t;
  t.operation = Operation::transaction(/*rerunnable=*/true, "demo_data.create");
  Status made =
      writes_->transaction([&](pg::Transaction& tx) { return pgschema::create_club(tx, data); }, t);
  if (!made.ok()) return made.annotate(fmt::format("creating the demo club on {}", where_));
  if (Status keys = writes_->create_idempotency_table(); !keys.ok()) {
    return keys.annotate(fmt::format("creating the idempotency-key table on {}", where_));
  }
  return Status();
}

Result<std::optional<User>> PgClubStore::session(std::string_view token, std::string_view now_utc) {
  pg::ReadOptions lookup;
  lookup.operation = Operation::read("session.read");
  if (options_.strategy == Strategy::kHoldfast) lookup.policy = &session_schedule();
  recall_session(token);
  Result<pg::Rows> rows = run(lookup.operation, [&] {
    return reads_->read(pgreads::kSession, {token, now_utc}, lookup);
  });
  if (!rows.ok()) return rows.status();
  Result<std::optional<User>> user = pgreads::session_of(*rows);
  if (user.ok() && user->has_value()) recall_user((*user)->id);
  return user;
}

Result<std::vector<Game>> PgClubStore::games_on(std::string_view date) {
  Result<pg::Rows> rows =
      run(Operation::read("schedule.games"), [&] { return reads_->read(pgreads::kGames, {date}); });
  if (!rows.ok()) return rows.status();
  return pgreads::games_of(*rows);
}

Result<ScheduleContext> PgClubStore::context_on(std::string_view date) {
  // On the lane it is one attempt of one call, as each of the page's other reads.
  Result<pg::Rows> rows = run(Operation::read("schedule.context"),
                              [&] { return reads_->read(pgreads::kContext, {date}); });
  if (!rows.ok()) return rows.status();
  return pgreads::context_of(*rows);
}

Result<std::optional<std::int64_t>> PgClubStore::user_id_by_email(std::string_view email) {
  Result<pg::Rows> rows = run(Operation::read("users.by_email"), [&] {
    return reads_->read("SELECT id FROM users WHERE email = $1", {email});
  });
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<std::int64_t>();
  Result<std::int64_t> id = int_at(*rows, 0, 0);
  if (!id.ok()) return id.status();
  return std::optional<std::int64_t>(*id);
}

Status PgClubStore::refresh_session(std::string_view token, std::string_view now_utc) {
  // Only when last_seen is over a minute old.
  return run(Operation::write("session.refresh"),
             [&] {
               return writes_->write(
                   "UPDATE sessions SET last_seen = $1 WHERE token = $2 AND "
                   "last_seen < $1::timestamptz - interval '60 seconds'",
                   {now_utc, token}, Operation::write("session.refresh"));
             })
      .status();
}

Status PgClubStore::end_session(std::string_view token) {
  // Deleting a row by its key twice deletes it once: a retry is safe.
  const Operation op = Operation::idempotent_write("session.end");
  return run(op, [&] { return writes_->write(pgwrites::kEndSession, {token}, op); }).status();
}

Result<std::optional<ClubStore::Credentials>> PgClubStore::credentials_once(
    std::string_view email) {
  Result<pg::Rows> user = run(Operation::read("login.user").critical(),
                              [&] { return reads_->read(pgreads::kCredentials, {email}); });
  if (!user.ok()) return user.status();
  return pgreads::credentials_of(*user);
}

Status PgClubStore::rehash_once(std::int64_t user_id, std::string_view fresh,
                                std::string_view stored) {
  // Only over the hash just checked (a password changed meanwhile stays changed), so
  // applying it twice is applying it once.
  const Operation op = Operation::idempotent_write("login.rehash");
  Status s = run(op, [&] {
               return writes_->write(pgwrites::kRehash, {fresh, user_id, stored}, op);
             }).status();
  if (s.ok()) remember_write("user:" + std::to_string(user_id));
  return s;
}

Status PgClubStore::insert_session_once(std::string_view token, std::int64_t user_id,
                                        std::string_view now_utc) {
  // Inserting a fresh random token twice is impossible, so a retry of it is safe.
  const Operation op = Operation::idempotent_write("login.session").critical();
  Status s = run(op, [&] {
               return writes_->write(pgwrites::kInsertSession, {token, user_id, now_utc}, op);
             }).status();
  if (s.ok()) remember_write("session:" + std::string(token));
  return s;
}

Status PgClubStore::cap_sessions_once(std::int64_t user_id, std::string_view now_utc) {
  // The user's expired sessions and the oldest beyond the newest kSessionsPerUser: deleting
  // down to a cap twice is deleting once.
  const Operation op = Operation::idempotent_write("login.session_cap").background();
  return run(op,
             [&] {
               return writes_->write(pgwrites::kCapSessions,
                                     {user_id, now_utc, std::int64_t{kSessionsPerUser}}, op);
             })
      .status();
}

// Both are one call of the store's loop already (run()).
Result<std::optional<ClubStore::Credentials>> PgClubStore::do_credentials(std::string_view email) {
  return credentials_once(email);
}

Status PgClubStore::do_rehash(std::int64_t user_id, std::string_view fresh,
                              std::string_view stored) {
  return rehash_once(user_id, fresh, stored);
}

Result<std::string> PgClubStore::do_open_session(std::int64_t user_id, std::string_view now_utc) {
  std::string token = new_token();
  if (Status s = insert_session_once(token, user_id, now_utc); !s.ok()) return s;
  // Its failure is not the sign-in's: the next one tries again.
  (void)cap_sessions_once(user_id, now_utc);
  return token;
}

Result<int> PgClubStore::delete_batch(const char* label, std::string_view sql,
                                      std::initializer_list<pg::Param> params) {
  // Retention is housekeeping: background (ADR 0035).
  const Operation op = Operation::idempotent_write(label).background();
  Result<pg::Rows> r = run(op, [&] { return writes_->write(sql, params, op); });
  if (!r.ok()) return r.status();
  Result<std::int64_t> n = int_at(*r, 0, 0);
  if (!n.ok()) return n.status();
  return static_cast<int>(*n);
}

Result<int> PgClubStore::delete_expired_sessions(std::string_view now_utc, int limit) {
  return delete_batch("retention.sessions",
                      "WITH gone AS (DELETE FROM sessions WHERE token IN (SELECT token FROM "
                      "sessions WHERE expires_at <= $1::timestamptz LIMIT $2::bigint) "
                      "RETURNING 1) SELECT count(*) FROM gone",
                      {now_utc, std::int64_t{limit}});
}

Result<int> PgClubStore::delete_old_idempotency_keys(std::string_view now_utc, int limit) {
  const std::string sql = std::string("WITH gone AS (DELETE FROM ") + kIdempotencyTable +
                          " WHERE key IN (SELECT key FROM " + kIdempotencyTable +
                          " WHERE created_at < $1::timestamptz - $2::bigint * interval '1 hour' "
                          "LIMIT $3::bigint) RETURNING 1) SELECT count(*) FROM gone";
  return delete_batch("retention.idempotency_keys", sql,
                      {now_utc, std::int64_t{kIdempotencyKeyAge.count()}, std::int64_t{limit}});
}

Result<PaymentReceipt> PgClubStore::do_pay(std::int64_t user_id, std::int64_t amount_cents,
                                           std::string_view method, const IdempotencyKey& key,
                                           std::string_view now_utc) {
  const auto insert = [&](pg::Transaction& tx) -> Result<std::int64_t> {
    Result<pg::Rows> r =
        tx.query(pgwrites::kInsertPayment, {user_id, amount_cents, method, now_utc});
    if (!r.ok()) return r.status();
    return pgwrites::id_of(*r);
  };
  Result<std::pair<std::int64_t, bool>> made = create_row(user_id, "payments", key, insert);
  if (!made.ok()) return made.status();
  remember_write("user:" + std::to_string(user_id));
  return PaymentReceipt{made->first, amount_cents, made->second};
}

Result<std::pair<std::int64_t, bool>> PgClubStore::create_row(
    std::int64_t user_id, std::string_view route, const IdempotencyKey& key,
    const std::function<Result<std::int64_t>(pg::Transaction&)>& body) {
  const std::string label = std::string(route) + ".create";
  const Operation op =
      Operation::transaction(/*rerunnable=*/true, label).with_priority(route_priority(route));
  pg::TransactionOptions t;
  t.operation = op;
  if (key.key.empty()) {
    Result<std::int64_t> id = run(op, [&] { return writes_->transaction(body, t); });
    if (!id.ok()) return id.status();
    return std::pair<std::int64_t, bool>(*id, false);
  }
  const std::string keyed = scoped_key(user_id, route, key.key);
  Result<pg::KeyedResult> r = run(op, [&] {
    return writes_->once(
        keyed,
        [&](pg::Transaction& tx) -> Result<std::string> {
          Result<std::int64_t> id = body(tx);
          if (!id.ok()) return id.status();
          return key_record(key.fingerprint, *id);
        },
        t);
  });
  if (!r.ok()) return r.status();
  Result<std::int64_t> id = recorded_id(r->result, key.fingerprint);
  if (!id.ok()) return id.status();
  return std::pair<std::int64_t, bool>(*id, r->replayed);
}

Result<SignupReceipt> PgClubStore::do_sign_up(std::int64_t user_id, std::int64_t game_id,
                                              const IdempotencyKey& key, std::string_view now_utc) {
  const auto add = [&](pg::Transaction& tx) -> Result<std::int64_t> {
    Result<pg::Rows> game = tx.query(pgwrites::kLockGame, {game_id, now_utc});
    if (!game.ok()) return game.status();
    Result<std::int64_t> capacity = pgwrites::open_game(*game);
    if (!capacity.ok()) return capacity.status();
    Result<pg::Rows> taken = tx.query(pgwrites::kSeatsTaken, {game_id, user_id});
    if (!taken.ok()) return taken.status();
    if (Status full = pgwrites::seat_free(*taken, *capacity); !full.ok()) return full;
    Result<pg::Rows> added = tx.query(pgwrites::kInsertSignup, {game_id, user_id, now_utc});
    if (!added.ok()) return added.status();
    return pgwrites::id_of(*added);
  };
  Result<std::pair<std::int64_t, bool>> made = create_row(user_id, "signups", key, add);
  if (!made.ok()) return made.status();
  return SignupReceipt{made->first, game_id, made->second};
}

Status PgClubStore::do_record_report(std::string_view path, std::string_view digest,
                                     std::string_view note, std::string_view now_utc) {
  const Operation op = Operation::write("problem_reports.create");
  return run(op,
             [&] {
               return writes_->write(pgwrites::kInsertReport, {path, digest, note, now_utc}, op);
             })
      .status();
}

}  // namespace holdfast::panel
