#include "club_schema_pg.hpp"

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace holdfast::panel::pgschema {
namespace {

// Timestamps: games are club-local wall times ("2026-11-30T18:00", no zone, as the model
// has them): TIMESTAMP. Everything stamped by the server's clock (sessions, payments,
// signups, reports) is an instant: TIMESTAMPTZ, read and written as UTC ISO-8601 (every
// session runs with TimeZone=UTC). Days are DATE.
constexpr std::string_view kSchema[] = {
    "CREATE TABLE IF NOT EXISTS users ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL,"
    " email TEXT NOT NULL UNIQUE, role TEXT NOT NULL, password_hash TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sessions ("
    " token TEXT PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users(id),"
    " created_at TIMESTAMPTZ NOT NULL, last_seen TIMESTAMPTZ NOT NULL,"
    " expires_at TIMESTAMPTZ NOT NULL)",
    "CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions(user_id, created_at)",
    "CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions(expires_at)",
    "CREATE TABLE IF NOT EXISTS courts ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL, surface TEXT)",
    "CREATE TABLE IF NOT EXISTS activity_types ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL,"
    " color TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS games ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " court_id BIGINT NOT NULL REFERENCES courts(id),"
    " activity_type_id BIGINT NOT NULL REFERENCES activity_types(id),"
    " starts_at TIMESTAMP NOT NULL, ends_at TIMESTAMP NOT NULL, capacity INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS games_by_start ON games(starts_at)",
    "CREATE TABLE IF NOT EXISTS signups ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " game_id BIGINT NOT NULL REFERENCES games(id),"
    " user_id BIGINT NOT NULL REFERENCES users(id), created_at TIMESTAMPTZ NOT NULL,"
    " UNIQUE (game_id, user_id))",
    "CREATE TABLE IF NOT EXISTS holidays (date DATE PRIMARY KEY, name TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cash_days ("
    " date DATE PRIMARY KEY, opening_cents BIGINT NOT NULL, closing_cents BIGINT)",
    "CREATE TABLE IF NOT EXISTS payments ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " user_id BIGINT NOT NULL REFERENCES users(id),"
    " amount_cents BIGINT NOT NULL CHECK (amount_cents > 0), method TEXT NOT NULL,"
    " created_at TIMESTAMPTZ NOT NULL)",
    "CREATE INDEX IF NOT EXISTS payments_by_time ON payments(created_at)",
    "CREATE TABLE IF NOT EXISTS problem_reports ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, path TEXT NOT NULL,"
    " digest TEXT NOT NULL, note TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL)",
};

// The transaction-scoped advisory lock that makes creating the club one panel's job when
// several start at once ("hfpanel" in ASCII).
constexpr std::int64_t kDemoDataLock = 0x6866'7061'6e65'6cLL;

// A PostgreSQL array literal ("{1,2,3}") of `values`, each written by `element`. REQUIRES:
// the elements need no quoting (numbers, dates, ISO stamps, plain words).
template <class T, class F>
std::string array_of(const std::vector<T>& values, F&& element) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += element(values[i]);
  }
  out += '}';
  return out;
}

// The schema and once()'s key table, made under kDemoDataLock. The key table has the DDL of
// pg::Database::create_idempotency_table(); made outside the lock, two panels creating it at
// once meet 42710/23505 on its type.
Status create_schema(pg::Transaction& tx) {
  for (std::string_view ddl : kSchema) {
    if (auto r = tx.query(ddl); !r.ok()) return r.status();
  }
  if (auto r = tx.query(std::string("CREATE TABLE IF NOT EXISTS ") + kIdempotencyTable +
                        " (key text PRIMARY KEY, result text, "
                        "created_at timestamptz NOT NULL DEFAULT now())");
      !r.ok())
    return r.status();
  if (auto r = tx.query(std::string("CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON ") +
                        kIdempotencyTable + " (created_at)");
      !r.ok())
    return r.status();
  return Status();
}

// Each inserted row's id, by its position in DemoData (references there are 1-based).
struct ClubIds {
  std::vector<std::int64_t> courts, types, users, games;

  static std::int64_t at(const std::vector<std::int64_t>& ids, int position) {
    return ids.at(static_cast<std::size_t>(position - 1));
  }
};

// Runs an INSERT ... RETURNING id and appends the id to `ids`.
Status insert_one(pg::Transaction& tx, std::vector<std::int64_t>& ids, std::string_view sql,
                  std::initializer_list<pg::Param> params) {
  Result<pg::Rows> r = tx.query(sql, params);
  if (!r.ok()) return r.status();
  Result<std::int64_t> id = int_at(*r, 0, 0);
  if (!id.ok()) return id.status();
  ids.push_back(*id);
  return Status();
}

// Courts, activity types and users, one row at a time; fills ids.courts, .types, .users.
Status insert_club_members(pg::Transaction& tx, const DemoData& data, ClubIds& ids) {
  for (const auto& c : data.courts) {
    if (Status s = insert_one(tx, ids.courts,
                              "INSERT INTO courts(name, surface) VALUES ($1, $2) RETURNING id",
                              {c.name, c.surface});
        !s.ok())
      return s;
  }
  for (const auto& t : data.activity_types) {
    if (Status s = insert_one(
            tx, ids.types, "INSERT INTO activity_types(name, color) VALUES ($1, $2) RETURNING id",
            {t.name, t.color});
        !s.ok())
      return s;
  }
  for (const auto& u : data.users) {
    if (Status s = insert_one(tx, ids.users,
                              "INSERT INTO users(name, email, role, password_hash) "
                              "VALUES ($1, $2, $3, $4) RETURNING id",
                              {u.name, u.email, u.role, u.password_hash});
        !s.ok())
      return s;
  }
  return Status();
}

// The games in one statement; fills ids.games. RETURNING gives each id with its (court,
// start), which identify a demo game. REQUIRES: ids.courts and ids.types filled.
Status insert_games(pg::Transaction& tx, const DemoData& data, ClubIds& ids) {
  const std::string g_courts = array_of(data.games, [&](const DemoData::Slot& g) {
    return std::to_string(ClubIds::at(ids.courts, g.court));
  });
  const std::string g_types = array_of(data.games, [&](const DemoData::Slot& g) {
    return std::to_string(ClubIds::at(ids.types, g.activity_type));
  });
  const std::string g_starts =
      array_of(data.games, [](const DemoData::Slot& g) { return g.starts_at; });
  const std::string g_ends =
      array_of(data.games, [](const DemoData::Slot& g) { return g.ends_at; });
  const std::string g_caps =
      array_of(data.games, [](const DemoData::Slot& g) { return std::to_string(g.capacity); });
  Result<pg::Rows> games = tx.query(
      "INSERT INTO games(court_id, activity_type_id, starts_at, ends_at, capacity) "
      "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamp[], $4::timestamp[], "
      "$5::integer[]) "
      "RETURNING id, court_id, to_char(starts_at, 'YYYY-MM-DD\"T\"HH24:MI')",
      {g_courts, g_types, g_starts, g_ends, g_caps});
  if (!games.ok()) return games.status();
  std::map<std::pair<std::int64_t, std::string>, std::int64_t> game_by_slot;
  for (int row = 0; row < games->size(); ++row) {
    Result<std::int64_t> game = int_at(*games, row, 0);
    Result<std::int64_t> court = int_at(*games, row, 1);
    if (!game.ok()) return game.status();
    if (!court.ok()) return court.status();
    game_by_slot[{*court, std::string(games->text(row, 2))}] = *game;
  }
  ids.games.reserve(data.games.size());
  for (const auto& g : data.games) {
    auto it = game_by_slot.find({ClubIds::at(ids.courts, g.court), g.starts_at});
    if (it == game_by_slot.end()) {
      return Status(Code::kInternal, "a demo game was not inserted: " + g.starts_at);
    }
    ids.games.push_back(it->second);
  }
  return Status();
}

// Signups, cash days and payments, one statement per table. REQUIRES: ids.games and
// ids.users filled.
Status insert_club_history(pg::Transaction& tx, const DemoData& data, const ClubIds& ids) {
  const std::string s_games = array_of(data.signups, [&](const DemoData::Signup& s) {
    return std::to_string(ClubIds::at(ids.games, s.game));
  });
  const std::string s_users = array_of(data.signups, [&](const DemoData::Signup& s) {
    return std::to_string(ClubIds::at(ids.users, s.user));
  });
  const std::string s_at =
      array_of(data.signups, [](const DemoData::Signup& s) { return s.created_at; });
  if (auto r = tx.query("INSERT INTO signups(game_id, user_id, created_at) "
                        "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) "
                        "ON CONFLICT (game_id, user_id) DO NOTHING",
                        {s_games, s_users, s_at});
      !r.ok())
    return r.status();

  const std::string c_dates =
      array_of(data.cash_days, [](const DemoData::CashDay& c) { return c.date; });
  const std::string c_cents = array_of(
      data.cash_days, [](const DemoData::CashDay& c) { return std::to_string(c.opening_cents); });
  if (auto r = tx.query("INSERT INTO cash_days(date, opening_cents) "
                        "SELECT * FROM unnest($1::date[], $2::bigint[])",
                        {c_dates, c_cents});
      !r.ok())
    return r.status();

  const std::string p_users = array_of(data.payments, [&](const DemoData::Payment& p) {
    return std::to_string(ClubIds::at(ids.users, p.user));
  });
  const std::string p_cents = array_of(
      data.payments, [](const DemoData::Payment& p) { return std::to_string(p.amount_cents); });
  const std::string p_methods =
      array_of(data.payments, [](const DemoData::Payment& p) { return p.method; });
  const std::string p_at =
      array_of(data.payments, [](const DemoData::Payment& p) { return p.created_at; });
  if (auto r = tx.query(
          "INSERT INTO payments(user_id, amount_cents, method, created_at) "
          "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[])",
          {p_users, p_cents, p_methods, p_at});
      !r.ok())
    return r.status();
  return Status();
}

// Holidays and settings, which reference nothing.
Status insert_calendar(pg::Transaction& tx, const DemoData& data) {
  for (const auto& h : data.holidays) {
    if (auto r = tx.query("INSERT INTO holidays(date, name) VALUES ($1, $2)", {h.date, h.name});
        !r.ok())
      return r.status();
  }
  for (const auto& [k, v] : data.settings) {
    if (auto r = tx.query("INSERT INTO settings(key, value) VALUES ($1, $2)", {k, v}); !r.ok())
      return r.status();
  }
  return Status();
}

}  // namespace

Result<std::int64_t> int_at(const pg::Rows& rows, int row, int col) {
  Result<long long> v = rows.int64(row, col);
  if (!v.ok()) return v.status();
  return static_cast<std::int64_t>(*v);
}

Status create_club(pg::Transaction& tx, const DemoData& data) {
  if (auto r = tx.query("SELECT pg_advisory_xact_lock($1)", {kDemoDataLock}); !r.ok()) {
    return r.status();
  }
  if (Status s = create_schema(tx); !s.ok()) return s;
  Result<pg::Rows> courts = tx.query("SELECT count(*) FROM courts");
  if (!courts.ok()) return courts.status();
  Result<std::int64_t> n = int_at(*courts, 0, 0);
  if (!n.ok()) return n.status();
  if (*n > 0) return Status();

  ClubIds ids;
  if (Status s = insert_club_members(tx, data, ids); !s.ok()) return s;
  if (Status s = insert_games(tx, data, ids); !s.ok()) return s;
  if (Status s = insert_club_history(tx, data, ids); !s.ok()) return s;
  return insert_calendar(tx, data);
}

}  // namespace holdfast::panel::pgschema
