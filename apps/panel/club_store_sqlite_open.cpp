// SqliteClubStore (club_store_sqlite.hpp): opening the file, its Shields and views, the
// schema, the idempotency-key table and the demo data. The queries are in
// club_store_sqlite.cpp.
#include "club_store_sqlite.hpp"
#include "demo_data.hpp"
#include "holdfast/core/health_probe.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"

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
-- The day's count and sum on the schedule read from the index alone.
CREATE INDEX IF NOT EXISTS payments_by_time ON payments(created_at, amount_cents);
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
    RetryPolicy origin = policy ? policy->reads : RetryPolicy::standard();
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
  RetryPolicy sessions = RetryPolicy::session_reads();
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
  auto epoch = std::make_unique<sqlite::ChangeEpoch>();
  db_options.on_connect = [e = epoch.get()](sqlite3* conn, sqlite::Role) {
    return e->attach(conn);
  };
  Result<sqlite::Database> db = sqlite::Database::open(db_options);
  if (!db.ok()) return db.status();
  return std::unique_ptr<ClubStore>(
      new SqliteClubStore(std::move(options), std::move(*db), std::move(epoch)));
}

SqliteClubStore::SqliteClubStore(Options options, sqlite::Database db,
                                 std::unique_ptr<sqlite::ChangeEpoch> epoch)
    : ClubStore(std::move(options)),
      epoch_(std::move(epoch)),
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

}  // namespace holdfast::panel
