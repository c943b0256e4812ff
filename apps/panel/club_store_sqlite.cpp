#include "club_store_sqlite.hpp"

#include <tuple>

#include <fmt/format.h>

#include "demo_data.hpp"
#include "idempotency.hpp"

namespace holdfast::panel {
namespace {

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS users (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL, password_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  token TEXT PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id),
  created_at TEXT NOT NULL, last_seen TEXT NOT NULL, expires_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions(user_id, created_at);
CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions(expires_at);
CREATE TABLE IF NOT EXISTS courts (id INTEGER PRIMARY KEY, name TEXT NOT NULL, surface TEXT);
CREATE TABLE IF NOT EXISTS activity_types (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, color TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS games (
  id INTEGER PRIMARY KEY, court_id INTEGER NOT NULL REFERENCES courts(id),
  activity_type_id INTEGER NOT NULL REFERENCES activity_types(id),
  starts_at TEXT NOT NULL, ends_at TEXT NOT NULL, capacity INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS games_by_start ON games(starts_at);
CREATE TABLE IF NOT EXISTS signups (
  id INTEGER PRIMARY KEY, game_id INTEGER NOT NULL REFERENCES games(id),
  user_id INTEGER NOT NULL REFERENCES users(id), created_at TEXT NOT NULL,
  UNIQUE (game_id, user_id));
CREATE TABLE IF NOT EXISTS holidays (date TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cash_days (
  date TEXT PRIMARY KEY, opening_cents INTEGER NOT NULL, closing_cents INTEGER);
CREATE TABLE IF NOT EXISTS payments (
  id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id),
  amount_cents INTEGER NOT NULL CHECK (amount_cents > 0), method TEXT NOT NULL,
  created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS payments_by_time ON payments(created_at);
CREATE TABLE IF NOT EXISTS problem_reports (
  id INTEGER PRIMARY KEY, path TEXT NOT NULL, digest TEXT NOT NULL, note TEXT NOT NULL,
  created_at TEXT NOT NULL);
)sql";

// holdfast: a Shield named `name`, with the policy's options when there is one. A
// baseline: none.
std::unique_ptr<Shield> shield_for(const ClubStore::Options& o, std::string name, Clock& clock) {
  if (o.strategy != Strategy::kHoldfast) return nullptr;
  if (o.policy) return std::make_unique<Shield>(std::move(name), *o.policy, clock);
  return std::make_unique<Shield>(std::move(name), clock);
}

// holdfast: the origin's schedule (or the policy's reads) through the two Shields. A
// baseline: one attempt per call (its own loop retries), in a window of an hour: only
// busy_timeout bounds an attempt.
sqlite::ResilientDatabase resilient(sqlite::Database db, Shield* reads, Shield* writes,
                                    const std::optional<Shield::Options>& policy, Clock& clock) {
  if (reads != nullptr) {
    RetryPolicy origin = policy ? policy->reads : RetryPolicy::origin_reads();
    origin.clock(clock);
    return sqlite::ResilientDatabase(std::move(db), *reads, *writes, std::move(origin));
  }
  RetryPolicy single = RetryPolicy::no_retry();
  single.window(std::chrono::hours(1)).clock(clock);
  return sqlite::ResilientDatabase(std::move(db), std::move(single));
}

// The schedule session reads follow: the origin's session schedule for holdfast.
RetryPolicy session_policy(const sqlite::ResilientDatabase& db, bool holdfast, Clock& clock) {
  if (!holdfast) return db.policy();
  RetryPolicy sessions = RetryPolicy::origin_session();
  sessions.clock(clock);
  return sessions;
}

}  // namespace

Result<std::unique_ptr<ClubStore>> SqliteClubStore::open(Options options) {
  sqlite::Options db_options;
  db_options.path = options.path;
  db_options.busy_timeout = options.busy_timeout;
  db_options.read_connections = options.read_connections;
  db_options.idempotency_table = "idempotency_keys";
  if (options.clock != nullptr) db_options.clock = options.clock;
  Result<sqlite::Database> db = sqlite::Database::open(db_options);
  if (!db.ok()) return db.status();
  return std::unique_ptr<ClubStore>(new SqliteClubStore(std::move(options), std::move(*db)));
}

SqliteClubStore::SqliteClubStore(Options options, sqlite::Database db)
    : ClubStore(std::move(options)),
      reads_(shield_for(options_, "club.reads", *clock_)),
      writes_(shield_for(options_, "club.writes", *clock_)),
      db_(resilient(std::move(db), reads_.get(), writes_.get(), options_.policy, *clock_)),
      sessions_(db_.with_policy(session_policy(db_, reads_ != nullptr, *clock_))),
      once_(db_.one_attempt()) {
  if (reads_ == nullptr) return;
  async_ = AsyncAccess{reads_.get(),         writes_.get(), &sessions_.policy(),
                       &db_.policy(),        &db_.policy(), options_.read_connections,
                       options_.busy_timeout};
  read_shield_ = reads_.get();
  write_shield_ = writes_.get();
  HealthProbe::Options every;
  every.interval = std::chrono::milliseconds(250);
  // Each probe waits at most 100 ms for its lock (the busy handler reads the window).
  read_probe_ = std::make_unique<HealthProbe>(
      reads_->breaker(),
      [this]() -> Status {
        RequestScope probe(std::chrono::milliseconds(100), *clock_);
        return db_.database()
            .query_one<std::int64_t>("SELECT count(*) FROM sqlite_master")
            .status();
      },
      every);
  write_probe_ = std::make_unique<HealthProbe>(
      writes_->breaker(),
      [this]() -> Status {
        RequestScope probe(std::chrono::milliseconds(100), *clock_);
        Result<sqlite::Transaction> tx = db_.database().begin(sqlite::TxnMode::kImmediate);
        if (!tx.ok()) return tx.status();
        return tx->rollback();
      },
      every);
}

std::uint64_t SqliteClubStore::attempts() const noexcept {
  std::uint64_t n = ClubStore::attempts();
  if (reads_ != nullptr) {
    n += reads_->metrics().snapshot().attempts + writes_->metrics().snapshot().attempts;
  }
  return n;
}

template <class F>
auto SqliteClubStore::run(Operation op, F&& call) -> std::invoke_result_t<F&> {
  count_call();
  if (reads_ != nullptr) return call();
  return run_baseline(op, call);
}

namespace {

// Moves the key table of a file from before the library's once() out of its way: a table
// of scoped keys (with fingerprints) to idempotency_keys_scoped, whose keys
// prepare_key_table() then carries over; an unscoped one (no fingerprint to check a request
// against) is dropped.
Status set_aside_old_keys(sqlite::ResilientDatabase& db) {
  Result<std::optional<std::string>> old = db.query_one<std::string>(
      "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idempotency_keys' "
      "AND sql NOT LIKE '%result TEXT%'");
  if (!old.ok()) return Status(old.status()).annotate("reading the schema");
  if (!old->has_value()) return Status();
  const bool scoped = (*old)->find("fingerprint") != std::string::npos;
  return db.execute_script(scoped
                               ? "ALTER TABLE idempotency_keys RENAME TO idempotency_keys_scoped;"
                               : "DROP TABLE idempotency_keys;");
}

// The idempotency-key table of once(), with the keys of an older file carried over as
// "<user>:<route>:<key>" -> "<fingerprint>:<id>" (idempotency.hpp).
Status prepare_key_table(sqlite::ResilientDatabase& db) {
  if (Status s = set_aside_old_keys(db); !s.ok()) return s.annotate("replacing the old key table");
  if (Status s = db.create_idempotency_table(); !s.ok()) {
    return s.annotate("creating the idempotency-key table");
  }
  Result<std::optional<std::int64_t>> aside = db.query_one<std::int64_t>(
      "SELECT count(*) FROM sqlite_master WHERE name = 'idempotency_keys_scoped'");
  if (!aside.ok()) return aside.status();
  if (Status s = db.execute_script("CREATE INDEX IF NOT EXISTS idempotency_keys_by_age "
                                   "ON idempotency_keys(created_at)");
      !s.ok()) {
    return s.annotate("indexing the idempotency-key table");
  }
  if (aside->value_or(0) == 0) return Status();
  return db
      .execute_script(
          "INSERT OR IGNORE INTO idempotency_keys(key, result, created_at) "
          "SELECT user_id || ':' || route || ':' || key, fingerprint || ':' || result_id, "
          "created_at FROM idempotency_keys_scoped; DROP TABLE idempotency_keys_scoped;")
      .annotate("carrying the old keys over");
}

}  // namespace

Status SqliteClubStore::ensure_demo_data(std::string_view today) {
  if (Status s = db_.execute_script(kSchema); !s.ok()) return s.annotate("creating the schema");
  if (Status s = prepare_key_table(db_); !s.ok()) return s;
  Result<std::optional<std::int64_t>> courts =
      db_.query_one<std::int64_t>("SELECT count(*) FROM courts");
  if (!courts.ok()) return courts.status();
  if (courts->value_or(0) > 0) return Status();

  const DemoData data = make_demo_data(today);
  return db_.transaction([&](sqlite::Transaction& tx) -> Status {
    // Each inserted row's id, by its position in `data` (references there are 1-based).
    std::vector<std::int64_t> court_ids, type_ids, user_ids, game_ids;
    const auto insert = [&](std::vector<std::int64_t>* ids, auto&&... args) -> Status {
      Result<sqlite::Exec> r = tx.execute(std::forward<decltype(args)>(args)...);
      if (!r.ok()) return r.status();
      if (ids != nullptr) ids->push_back(r->last_insert_rowid);
      return Status();
    };
    const auto id = [](const std::vector<std::int64_t>& ids, int position) {
      return ids.at(static_cast<std::size_t>(position - 1));
    };
    for (const auto& c : data.courts) {
      if (Status s = insert(&court_ids, "INSERT INTO courts(name, surface) VALUES (?, ?)", c.name,
                            c.surface);
          !s.ok())
        return s;
    }
    for (const auto& t : data.activity_types) {
      if (Status s = insert(&type_ids, "INSERT INTO activity_types(name, color) VALUES (?, ?)",
                            t.name, t.color);
          !s.ok())
        return s;
    }
    for (const auto& u : data.users) {
      if (Status s = insert(&user_ids,
                            "INSERT INTO users(name, email, role, password_hash) VALUES (?,?,?,?)",
                            u.name, u.email, u.role, u.password_hash);
          !s.ok())
        return s;
    }
    for (const auto& g : data.games) {
      if (Status s = insert(&game_ids,
                            "INSERT INTO games(court_id, activity_type_id, starts_at, ends_at, "
                            "capacity) VALUES (?, ?, ?, ?, ?)",
                            id(court_ids, g.court), id(type_ids, g.activity_type), g.starts_at,
                            g.ends_at, g.capacity);
          !s.ok())
        return s;
    }
    for (const auto& s : data.signups) {
      if (Status st = insert(
              nullptr, "INSERT OR IGNORE INTO signups(game_id, user_id, created_at) VALUES (?,?,?)",
              id(game_ids, s.game), id(user_ids, s.user), s.created_at);
          !st.ok())
        return st;
    }
    for (const auto& c : data.cash_days) {
      if (Status s = insert(nullptr, "INSERT INTO cash_days(date, opening_cents) VALUES (?, ?)",
                            c.date, c.opening_cents);
          !s.ok())
        return s;
    }
    for (const auto& p : data.payments) {
      if (Status s = insert(
              nullptr,
              "INSERT INTO payments(user_id, amount_cents, method, created_at) VALUES (?,?,?,?)",
              id(user_ids, p.user), p.amount_cents, p.method, p.created_at);
          !s.ok())
        return s;
    }
    for (const auto& h : data.holidays) {
      if (Status s =
              insert(nullptr, "INSERT INTO holidays(date, name) VALUES (?, ?)", h.date, h.name);
          !s.ok())
        return s;
    }
    for (const auto& [k, v] : data.settings) {
      if (Status s = insert(nullptr, "INSERT INTO settings(key, value) VALUES (?, ?)", k, v);
          !s.ok())
        return s;
    }
    return Status();
  });
}

namespace {

// The schedule's reads, written once for both ways they run: `run(op, call)` is the store's
// run() (holdfast's retries inside `db`, or a baseline's loop) or, for one attempt driven by
// async_run, a plain call on the one-attempt view.
template <class Run>
Result<std::optional<User>> read_session(sqlite::ResilientDatabase& db, Run&& run,
                                         std::string_view token, std::string_view now_utc) {
  using Row = std::tuple<std::int64_t, std::string, std::string, std::string>;
  Result<std::vector<Row>> rows = run(Operation::read("session.read"), [&] {
    return db.query<std::int64_t, std::string, std::string, std::string>(
        "SELECT u.id, u.name, u.email, u.role FROM sessions s JOIN users u ON u.id = "
        "s.user_id WHERE s.token = ? AND s.expires_at > ?",
        token, now_utc);
  });
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<User>();
  auto& [id, name, email, role] = rows->front();
  return std::optional<User>(User{id, std::move(name), std::move(email), std::move(role)});
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
  return read_session(sessions_, store_run(), token, now_utc);
}

Result<std::vector<Game>> SqliteClubStore::games_on(std::string_view date) {
  return read_games(db_, store_run(), date);
}

Result<ScheduleContext> SqliteClubStore::context_on(std::string_view date) {
  return read_context(db_, store_run(), date);
}

Result<std::optional<User>> SqliteClubStore::session_once(std::string_view token,
                                                          std::string_view now_utc) {
  return read_session(once_, kOnce, token, now_utc);
}

Result<std::vector<Game>> SqliteClubStore::games_once(std::string_view date) {
  return read_games(once_, kOnce, date);
}

Result<ScheduleContext> SqliteClubStore::context_once(std::string_view date) {
  return read_context(once_, kOnce, date);
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
  auto user = run(Operation::read("login.user"), [&] {
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
  return exec_in(db, run, Operation::idempotent_write("login.session"),
                 "INSERT OR IGNORE INTO sessions(token, user_id, created_at, last_seen, "
                 "expires_at) VALUES (?1, ?2, ?3, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', ?3, "
                 "'+30 days'))",
                 token, user_id, now_utc);
}

template <class Run>
Status cap_sessions_in(sqlite::ResilientDatabase& db, Run&& run, std::int64_t user_id,
                       std::string_view now_utc) {
  // Deleting down to a cap twice is deleting once.
  return exec_in(db, run, Operation::idempotent_write("login.session_cap"),
                 "DELETE FROM sessions WHERE user_id = ?1 AND (expires_at <= ?2 OR token NOT IN "
                 "(SELECT token FROM sessions WHERE user_id = ?1 AND expires_at > ?2 "
                 "ORDER BY created_at DESC, rowid DESC LIMIT ?3))",
                 user_id, now_utc, ClubStore::kSessionsPerUser);
}

}  // namespace

Result<std::string> SqliteClubStore::do_login(std::string_view email, std::string_view password,
                                              std::string_view now_utc) {
  Result<std::optional<Credentials>> user = credentials_in(db_, store_run(), email);
  if (!user.ok()) return user.status();
  const SignInCheck check = user->has_value() ? check_sign_in((*user)->password_hash, email,
                                                              password, options_.password_cost)
                                              : SignInCheck{};
  if (!check.right) return Status(Code::kPermissionDenied, "unknown email or wrong password");
  if (!check.fresh_hash.empty()) {
    // Its failure is not the sign-in's: the next one tries again.
    (void)rehash_in(db_, store_run(), (*user)->user_id, check.fresh_hash, (*user)->password_hash);
  }
  return do_open_session((*user)->user_id, now_utc);
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
  Result<sqlite::Exec> r = run(Operation::idempotent_write("retention.sessions"), [&] {
    return db_.execute(
        "DELETE FROM sessions WHERE rowid IN "
        "(SELECT rowid FROM sessions WHERE expires_at <= ?1 LIMIT ?2)",
        now_utc, limit);
  });
  if (!r.ok()) return r.status();
  return static_cast<int>(r->changes);
}

Result<int> SqliteClubStore::delete_old_idempotency_keys(std::string_view now_utc, int limit) {
  const std::string age = "-" + std::to_string(kIdempotencyKeyAge.count()) + " hours";
  Result<sqlite::Exec> r = run(Operation::idempotent_write("retention.idempotency_keys"), [&] {
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
  const Operation op = Operation::transaction(/*rerunnable=*/true, label);
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
