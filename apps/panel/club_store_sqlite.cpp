// SqliteClubStore's queries (club_store_sqlite.hpp): the reads and writes the panel makes,
// each written once for both ways it runs (the store's loop, or one attempt driven by
// async_run). Opening, the schema and the demo data: club_store_sqlite_open.cpp.
#include "club_store_sqlite.hpp"

#include <tuple>

#include <fmt/format.h>

#include "demo_data.hpp"  // day_after()
#include "idempotency.hpp"

namespace holdfast::panel {

template <class F>
auto SqliteClubStore::run(Operation op, F&& call) -> std::invoke_result_t<F&> {
  count_call();
  if (reads_ != nullptr) return call();
  return baseline_.run(op, call);
}

namespace {

// The schedule's reads, written once for both ways they run: `run(op, call)` is the store's
// run() (holdfast's retries inside `db`, or a baseline's loop) or, for one attempt driven by
// async_run, a plain call on the one-attempt view.

// The session's user and, observed by the same statement (one read transaction, so before
// any read the epoch stamps), the file's change epoch: one row whatever the session, the
// user's columns NULL when there is none.
template <class Run>
Result<ClubStore::StampedSession> read_session(sqlite::ResilientDatabase& db, Run&& run,
                                               std::string_view token, std::string_view now_utc) {
  using Row = std::tuple<std::int64_t, std::optional<std::int64_t>, std::optional<std::string>,
                         std::optional<std::string>, std::optional<std::string>>;
  Result<std::vector<Row>> rows = run(Operation::read("session.read"), [&] {
    return db.query<std::int64_t, std::optional<std::int64_t>, std::optional<std::string>,
                    std::optional<std::string>, std::optional<std::string>>(
        "SELECT holdfast_change_epoch(d.data_version), u.id, u.name, u.email, u.role "
        "FROM pragma_data_version d LEFT JOIN sessions s ON s.token = ? AND s.expires_at > ? "
        "LEFT JOIN users u ON u.id = s.user_id",
        token, now_utc);
  });
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return Status(Code::kInternal, "PRAGMA data_version answered no row");
  auto& [epoch, id, name, email, role] = rows->front();
  ClubStore::StampedSession out;
  out.epoch = static_cast<std::uint64_t>(epoch);
  if (id && name && email && role) {
    out.user = User{*id, std::move(*name), std::move(*email), std::move(*role)};
  }
  return out;
}

template <class Run>
Result<std::vector<Game>> read_games(sqlite::ResilientDatabase& db, Run&& run,
                                     std::string_view date) {
  using Row = std::tuple<std::int64_t, std::string, std::string, std::string, std::string,
                         std::string, std::int64_t, std::int64_t>;
  const std::string next = day_after(date);
  Result<std::vector<Row>> rows = run(Operation::read("schedule.games"), [&] {
    return db.query<std::int64_t, std::string, std::string, std::string, std::string, std::string,
                    std::int64_t, std::int64_t>(
        "SELECT g.id, c.name, a.name, a.color, g.starts_at, g.ends_at, g.capacity, "
        "(SELECT count(*) FROM signups s WHERE s.game_id = g.id) "
        "FROM games g JOIN courts c ON c.id = g.court_id "
        "JOIN activity_types a ON a.id = g.activity_type_id "
        "WHERE g.starts_at >= ? AND g.starts_at < ? ORDER BY g.starts_at, c.name",
        date, next);
  });
  if (!rows.ok()) return rows.status();
  std::vector<Game> games;
  games.reserve(rows->size());
  for (auto& [id, court, activity, color, starts, ends, capacity, taken] : *rows) {
    games.push_back(Game{id, std::move(court), std::move(activity), std::move(color),
                         std::move(starts), std::move(ends), static_cast<int>(capacity),
                         static_cast<int>(taken)});
  }
  return games;
}

template <class Run>
Result<ScheduleContext> read_context(sqlite::ResilientDatabase& db, Run&& run,
                                     std::string_view date) {
  ScheduleContext ctx;
  auto settings = run(Operation::read("schedule.settings"), [&] {
    return db.query<std::string, std::string>("SELECT key, value FROM settings");
  });
  if (!settings.ok()) return settings.status();
  for (auto& [k, v] : *settings) {
    if (k == "club_name") ctx.club_name = v;
    if (k == "currency") ctx.currency = v;
  }
  auto courts = run(Operation::read("schedule.courts"),
                    [&] { return db.query<std::string>("SELECT name FROM courts ORDER BY id"); });
  if (!courts.ok()) return courts.status();
  ctx.courts = std::move(*courts);
  auto holidays = run(Operation::read("schedule.holidays"), [&] {
    return db.query<std::string>("SELECT name FROM holidays WHERE date = ?", date);
  });
  if (!holidays.ok()) return holidays.status();
  ctx.holidays = std::move(*holidays);
  const std::string next = day_after(date);
  auto cash = run(Operation::read("schedule.cash"), [&] {
    return db.query<std::int64_t, std::int64_t>(
        "SELECT count(*), coalesce(sum(amount_cents), 0) FROM payments "
        "WHERE created_at >= ? AND created_at < ?",
        date, next);
  });
  if (!cash.ok()) return cash.status();
  if (!cash->empty()) std::tie(ctx.payments_today, ctx.cash_today_cents) = cash->front();
  return ctx;
}

// One attempt: the call, as it is.
constexpr auto kOnce = [](Operation /*op*/, auto&& call) { return call(); };

// One statement that answers nothing but whether it ran, through `run` on `db`.
template <class Run, class... Args>
Status exec_in(sqlite::ResilientDatabase& db, Run&& run, Operation op, sqlite::QueryRef sql,
               const Args&... args) {
  return run(op, [&] { return db.execute(sql, args...); }).status();
}

}  // namespace

Result<std::optional<User>> SqliteClubStore::session(std::string_view token,
                                                     std::string_view now_utc) {
  Result<StampedSession> read = read_session(sessions_, store_run(), token, now_utc);
  if (!read.ok()) return read.status();
  return std::move(read->user);
}

Result<std::vector<Game>> SqliteClubStore::games_on(std::string_view date) {
  return read_games(db_, store_run(), date);
}

Result<ScheduleContext> SqliteClubStore::context_on(std::string_view date) {
  return read_context(db_, store_run(), date);
}

Result<std::vector<Game>> SqliteClubStore::games_once(std::string_view date) {
  return read_games(once_, kOnce, date);
}

Result<ScheduleContext> SqliteClubStore::context_once(std::string_view date) {
  return read_context(once_, kOnce, date);
}

Result<ClubStore::StampedSession> SqliteClubStore::stamped_session_once(std::string_view token,
                                                                        std::string_view now_utc) {
  return read_session(once_, kOnce, token, now_utc);
}

Result<std::optional<std::int64_t>> SqliteClubStore::user_id_by_email(std::string_view email) {
  return run(Operation::read("users.by_email"), [&] {
    return db_.query_one<std::int64_t>("SELECT id FROM users WHERE email = ?", email);
  });
}

Status SqliteClubStore::refresh_session(std::string_view token, std::string_view now_utc) {
  // Only when last_seen is over a minute old: "2026-11-30T12:00:00.000Z" minus a minute,
  // compared as text (the stamps are fixed-width UTC).
  Result<sqlite::Exec> r = run(Operation::write("session.refresh"), [&] {
    return db_.execute(
        "UPDATE sessions SET last_seen = ?1 WHERE token = ?2 AND "
        "last_seen < strftime('%Y-%m-%dT%H:%M:%fZ', ?1, '-60 seconds')",
        now_utc, token);
  });
  return r.status();
}

namespace {

template <class Run>
Status end_session_in(sqlite::ResilientDatabase& db, Run&& run, std::string_view token) {
  // Deleting a row by its key twice deletes it once: a retry is safe.
  return exec_in(db, run, Operation::idempotent_write("session.end"),
                 "DELETE FROM sessions WHERE token = ?", token);
}

}  // namespace

Status SqliteClubStore::end_session(std::string_view token) {
  return end_session_in(db_, store_run(), token);
}

Status SqliteClubStore::end_session_once(std::string_view token) {
  return end_session_in(once_, kOnce, token);
}

namespace {

template <class Run>
Result<std::optional<ClubStore::Credentials>> credentials_in(sqlite::ResilientDatabase& db,
                                                             Run&& run, std::string_view email) {
  auto user = run(Operation::read("login.user").critical(), [&] {
    return db.query<std::int64_t, std::string>(
        "SELECT id, password_hash FROM users WHERE email = ?", email);
  });
  if (!user.ok()) return user.status();
  if (user->empty()) return std::optional<ClubStore::Credentials>();
  auto& [id, hash] = user->front();
  return std::optional<ClubStore::Credentials>(ClubStore::Credentials{id, std::move(hash)});
}

template <class Run>
Status rehash_in(sqlite::ResilientDatabase& db, Run&& run, std::int64_t user_id,
                 std::string_view fresh, std::string_view stored) {
  // Only over the hash just checked, so applying it twice is applying it once.
  return exec_in(db, run, Operation::idempotent_write("login.rehash"),
                 "UPDATE users SET password_hash = ?1 WHERE id = ?2 AND password_hash = ?3", fresh,
                 user_id, stored);
}

template <class Run>
Status insert_session_in(sqlite::ResilientDatabase& db, Run&& run, std::string_view token,
                         std::int64_t user_id, std::string_view now_utc) {
  // Inserting a fresh random token twice is impossible, so a retry of it is safe.
  return exec_in(db, run, Operation::idempotent_write("login.session").critical(),
                 "INSERT OR IGNORE INTO sessions(token, user_id, created_at, last_seen, "
                 "expires_at) VALUES (?1, ?2, ?3, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', ?3, "
                 "'+30 days'))",
                 token, user_id, now_utc);
}

template <class Run>
Status cap_sessions_in(sqlite::ResilientDatabase& db, Run&& run, std::int64_t user_id,
                       std::string_view now_utc) {
  // Deleting down to a cap twice is deleting once.
  return exec_in(db, run, Operation::idempotent_write("login.session_cap").background(),
                 "DELETE FROM sessions WHERE user_id = ?1 AND (expires_at <= ?2 OR token NOT IN "
                 "(SELECT token FROM sessions WHERE user_id = ?1 AND expires_at > ?2 "
                 "ORDER BY created_at DESC, rowid DESC LIMIT ?3))",
                 user_id, now_utc, ClubStore::kSessionsPerUser);
}

}  // namespace

Result<std::optional<ClubStore::Credentials>> SqliteClubStore::do_credentials(
    std::string_view email) {
  return credentials_in(db_, store_run(), email);
}

Status SqliteClubStore::do_rehash(std::int64_t user_id, std::string_view fresh,
                                  std::string_view stored) {
  return rehash_in(db_, store_run(), user_id, fresh, stored);
}

Result<std::string> SqliteClubStore::do_open_session(std::int64_t user_id,
                                                     std::string_view now_utc) {
  std::string token = new_token();
  if (Status s = insert_session_in(db_, store_run(), token, user_id, now_utc); !s.ok()) return s;
  // Its failure is not the sign-in's: the next one tries again.
  (void)cap_sessions_in(db_, store_run(), user_id, now_utc);
  return token;
}

Result<std::optional<ClubStore::Credentials>> SqliteClubStore::credentials_once(
    std::string_view email) {
  return credentials_in(once_, kOnce, email);
}

Status SqliteClubStore::rehash_once(std::int64_t user_id, std::string_view fresh,
                                    std::string_view stored) {
  return rehash_in(once_, kOnce, user_id, fresh, stored);
}

Status SqliteClubStore::insert_session_once(std::string_view token, std::int64_t user_id,
                                            std::string_view now_utc) {
  return insert_session_in(once_, kOnce, token, user_id, now_utc);
}

Status SqliteClubStore::cap_sessions_once(std::int64_t user_id, std::string_view now_utc) {
  return cap_sessions_in(once_, kOnce, user_id, now_utc);
}

Result<int> SqliteClubStore::delete_expired_sessions(std::string_view now_utc, int limit) {
  Result<sqlite::Exec> r = run(Operation::idempotent_write("retention.sessions").background(), [&] {
    return db_.execute(
        "DELETE FROM sessions WHERE rowid IN "
        "(SELECT rowid FROM sessions WHERE expires_at <= ?1 LIMIT ?2)",
        now_utc, limit);
  });
  if (!r.ok()) return r.status();
  return static_cast<int>(r->changes);
}

Result<int> SqliteClubStore::delete_old_idempotency_keys(std::string_view now_utc, int limit) {
  const std::string age = fmt::format("-{} hours", kIdempotencyKeyAge.count());
  Result<sqlite::Exec> r =
      run(Operation::idempotent_write("retention.idempotency_keys").background(), [&] {
        return db_.execute(
            "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys "
            "WHERE created_at < strftime('%Y-%m-%dT%H:%M:%fZ', ?1, ?2) LIMIT ?3)",
            now_utc, age, limit);
      });
  if (!r.ok()) return r.status();
  return static_cast<int>(r->changes);
}

namespace {

// A row made by `body` in a transaction, under the request's idempotency key if it has one
// (idempotency.hpp), through `run` on `db` (the store's run() on db_, or one attempt on the
// one-attempt view).
template <class Run, class Body>
Result<CreatedRow> create_row(sqlite::ResilientDatabase& db, Run&& run, std::int64_t user_id,
                              std::string_view route, const IdempotencyKey& key, Body&& body) {
  const std::string label = std::string(route) + ".create";
  // Without a key the transaction may still be re-run: after a rollback nothing of it stays.
  const Operation op =
      Operation::transaction(/*rerunnable=*/true, label).with_priority(route_priority(route));
  if (key.key.empty()) {
    Result<std::int64_t> id = run(op, [&] { return db.transaction(body, op); });
    if (!id.ok()) return id.status();
    return CreatedRow{*id, false};
  }
  const std::string keyed = scoped_key(user_id, route, key.key);
  Result<KeyedResult> r = run(op, [&] {
    return db.once(keyed, [&](sqlite::Transaction& tx) -> Result<std::string> {
      Result<std::int64_t> id = body(tx);
      if (!id.ok()) return id.status();
      return key_record(key.fingerprint, *id);
    });
  });
  if (!r.ok()) return r.status();
  Result<std::int64_t> id = recorded_id(r->result, key.fingerprint);
  if (!id.ok()) return id.status();
  return CreatedRow{*id, r->replayed};
}

template <class Run>
Result<PaymentReceipt> pay_in(sqlite::ResilientDatabase& db, Run&& run, std::int64_t user_id,
                              std::int64_t amount_cents, std::string_view method,
                              const IdempotencyKey& key, std::string_view now_utc) {
  Result<CreatedRow> made = create_row(
      db, run, user_id, "payments", key, [&](sqlite::Transaction& tx) -> Result<std::int64_t> {
        auto paid = tx.execute(
            "INSERT INTO payments(user_id, amount_cents, method, created_at) "
            "VALUES (?,?,?,?)",
            user_id, amount_cents, method, now_utc);
        if (!paid.ok()) return paid.status();
        return paid->last_insert_rowid;
      });
  if (!made.ok()) return made.status();
  // A replay's amount is this request's: the fingerprint proved the parameters the same.
  return PaymentReceipt{made->id, amount_cents, made->replayed};
}

template <class Run>
Result<SignupReceipt> sign_up_in(sqlite::ResilientDatabase& db, Run&& run, std::int64_t user_id,
                                 std::int64_t game_id, const IdempotencyKey& key,
                                 std::string_view now_utc) {
  const auto add = [&](sqlite::Transaction& tx) -> Result<std::int64_t> {
    // starts_at ("2026-11-30T18:00") and now ("2026-11-30T18:00:00.000Z") are both UTC and
    // compare as text.
    auto game = tx.query<std::int64_t, std::int64_t, std::int64_t>(
        "SELECT capacity - (SELECT count(*) FROM signups WHERE game_id = ?1), "
        "(SELECT count(*) FROM signups WHERE game_id = ?1 AND user_id = ?2), starts_at <= ?3 "
        "FROM games WHERE id = ?1",
        game_id, user_id, now_utc);
    if (!game.ok()) return game.status();
    if (game->empty()) return Status(Code::kNotFound, "no such game");
    if (std::get<2>(game->front()) != 0) {
      return Status(Code::kOutOfRange, std::string(kGameStartedMessage));
    }
    if (std::get<1>(game->front()) > 0) {
      return Status(Code::kAlreadyExists, "already signed up for this game");
    }
    if (std::get<0>(game->front()) <= 0) {
      return Status(Code::kFailedPrecondition, "the game is full");
    }
    auto added = tx.execute("INSERT INTO signups(game_id, user_id, created_at) VALUES (?, ?, ?)",
                            game_id, user_id, now_utc);
    if (!added.ok()) return added.status();
    return added->last_insert_rowid;
  };
  Result<CreatedRow> made = create_row(db, run, user_id, "signups", key, add);
  if (!made.ok()) return made.status();
  return SignupReceipt{made->id, game_id, made->replayed};
}

}  // namespace

Result<PaymentReceipt> SqliteClubStore::do_pay(std::int64_t user_id, std::int64_t amount_cents,
                                               std::string_view method, const IdempotencyKey& key,
                                               std::string_view now_utc) {
  return pay_in(db_, store_run(), user_id, amount_cents, method, key, now_utc);
}

Result<PaymentReceipt> SqliteClubStore::do_pay_once(std::int64_t user_id, std::int64_t amount_cents,
                                                    std::string_view method,
                                                    const IdempotencyKey& key,
                                                    std::string_view now_utc) {
  return pay_in(once_, kOnce, user_id, amount_cents, method, key, now_utc);
}

Result<SignupReceipt> SqliteClubStore::do_sign_up(std::int64_t user_id, std::int64_t game_id,
                                                  const IdempotencyKey& key,
                                                  std::string_view now_utc) {
  return sign_up_in(db_, store_run(), user_id, game_id, key, now_utc);
}

Result<SignupReceipt> SqliteClubStore::do_sign_up_once(std::int64_t user_id, std::int64_t game_id,
                                                       const IdempotencyKey& key,
                                                       std::string_view now_utc) {
  return sign_up_in(once_, kOnce, user_id, game_id, key, now_utc);
}

namespace {

template <class Run>
Status record_report_in(sqlite::ResilientDatabase& db, Run&& run, std::string_view path,
                        std::string_view digest, std::string_view note, std::string_view now_utc) {
  return exec_in(db, run, Operation::write("problem_reports.create"),
                 "INSERT INTO problem_reports(path, digest, note, created_at) VALUES (?,?,?,?)",
                 path, digest, note, now_utc);
}

}  // namespace

Status SqliteClubStore::do_record_report(std::string_view path, std::string_view digest,
                                         std::string_view note, std::string_view now_utc) {
  return record_report_in(db_, store_run(), path, digest, note, now_utc);
}

Status SqliteClubStore::do_record_report_once(std::string_view path, std::string_view digest,
                                              std::string_view note, std::string_view now_utc) {
  return record_report_in(once_, kOnce, path, digest, note, now_utc);
}

}  // namespace holdfast::panel
