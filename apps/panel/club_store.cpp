#include "club_store.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <random>
#include <tuple>

#include <fmt/format.h>

namespace holdfast::panel {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS users (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL, password_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  token TEXT PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id),
  created_at TEXT NOT NULL, last_seen TEXT NOT NULL, expires_at TEXT NOT NULL);
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
CREATE TABLE IF NOT EXISTS idempotency_keys (
  key TEXT PRIMARY KEY, route TEXT NOT NULL, result_id INTEGER NOT NULL,
  created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS problem_reports (
  id INTEGER PRIMARY KEY, path TEXT NOT NULL, digest TEXT NOT NULL, note TEXT NOT NULL,
  created_at TEXT NOT NULL);
)sql";

// Demo passwords: a salted 64-bit FNV-1a. The demo panel is not a reference for storing
// passwords; it only needs a login that touches the database like a real one.
std::string password_hash(std::string_view email, std::string_view password) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::string_view part : {email, std::string_view("\x1f"), password}) {
    for (unsigned char c : part) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  }
  return fmt::format("fnv1a:{:016x}", h);
}

std::string new_token() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

std::string day_after(std::string_view date) {
  using namespace std::chrono;
  int y = 0;
  unsigned m = 0, d = 0;
  std::sscanf(std::string(date).c_str(), "%d-%u-%u", &y, &m, &d);
  const sys_days next = sys_days(year_month_day(year(y), month(m), day(d))) + days(1);
  const year_month_day ymd(next);
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
}

std::string add_days(std::string_view date, int n) {
  using namespace std::chrono;
  int y = 0;
  unsigned m = 0, d = 0;
  std::sscanf(std::string(date).c_str(), "%d-%u-%u", &y, &m, &d);
  const year_month_day ymd(sys_days(year_month_day(year(y), month(m), day(d))) + days(n));
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
}

Status bad(std::string_view what) {
  return Status(Code::kInvalidArgument, std::string(what));
}

}  // namespace

Result<std::unique_ptr<ClubStore>> ClubStore::open(Options options) {
  sqlite::Options db_options;
  db_options.path = options.path;
  db_options.busy_timeout = options.busy_timeout;
  db_options.read_connections = options.read_connections;
  if (options.clock != nullptr) db_options.clock = options.clock;
  Result<sqlite::Database> db = sqlite::Database::open(db_options);
  if (!db.ok()) return db.status();
  return std::unique_ptr<ClubStore>(new ClubStore(std::move(options), std::move(*db)));
}

ClubStore::ClubStore(Options options, sqlite::Database db)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &Clock::system()),
      db_(std::move(db)) {
  // naive: immediate retry, 3 more tries, no window to speak of.
  naive_.max_attempts(4)
      .backoff(Backoff::steps({Duration::zero()}, Jitter::none()))
      .window(std::chrono::hours(1))
      .clock(*clock_)
      .on_retry([](const RetryEvent&) {});
  // Tenacity: stop_after_attempt(3), wait_exponential(multiplier=1, min=1, max=10).
  tenacity_.max_attempts(3)
      .backoff(Backoff::exponential(seconds(1), 2.0, seconds(10), Jitter::none()))
      .window(std::chrono::hours(1))
      .clock(*clock_)
      .on_retry([](const RetryEvent&) {});
  session_reads_ = RetryPolicy::origin_session();
  session_reads_.clock(*clock_);
  if (options_.strategy == Strategy::kHoldfast) {
    // One Shield for reads and one for writes: in WAL mode a batch job holding the write
    // lock stops writers only, so failing writes must not open the breaker that reads pass.
    read_shield_ = std::make_unique<Shield>("club.reads", *clock_);
    write_shield_ = std::make_unique<Shield>("club.writes", *clock_);
  }
  if (options_.strategy == Strategy::kOriginBreaker) {
    origin_breaker_ = std::make_unique<OriginBreaker>(*clock_);
  }
}

ClubStore::~ClubStore() = default;

template <class F>
auto ClubStore::run(Access access, Operation op, F&& attempt, bool session_read)
    -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  const auto counted = [&]() -> R {
    attempts_.fetch_add(1, std::memory_order_relaxed);
    return attempt();
  };
  // The baselines retry whatever looks transient, as a plain retry decorator does.
  const Operation anything{Idempotency::kIdempotent, true, op.label};
  switch (options_.strategy) {
    case Strategy::kNone:
      return counted();
    case Strategy::kNaive:
      return retry(naive_, anything, counted);
    case Strategy::kBackoff:
      return retry(tenacity_, anything, counted);
    case Strategy::kOriginBreaker: {
      if (!origin_breaker_->can_attempt()) {
        return R(
            Status(Code::kUnavailable, "Circuit OPEN - database unavailable, request skipped"));
      }
      R r = retry(tenacity_, anything, counted);
      if (is_ok(r)) {
        origin_breaker_->record_success();
      } else {
        origin_breaker_->record_failure();
      }
      return r;
    }
    case Strategy::kHoldfast: {
      Shield& shield = access == Access::kRead ? *read_shield_ : *write_shield_;
      return session_read ? shield.run(session_reads_, op, counted) : shield.run(op, counted);
    }
  }
  return counted();
}

Status ClubStore::ensure_demo_data(std::string_view today) {
  if (Status s = db_.execute_script(kSchema); !s.ok()) return s.annotate("creating the schema");
  Result<std::optional<std::int64_t>> courts =
      db_.query_one<std::int64_t>("SELECT count(*) FROM courts");
  if (!courts.ok()) return courts.status();
  if (courts->value_or(0) > 0) return Status();

  return db_.transaction([&](sqlite::Transaction& tx) -> Status {
    std::mt19937 rng(20260828);  // the origin incident's date: the same demo club every time
    const auto exec = [&](auto&&... args) -> Status {
      return tx.execute(std::forward<decltype(args)>(args)...).status();
    };
    const std::array<std::pair<const char*, const char*>, 4> courts_list = {
        {{"Court 1", "hard"}, {"Court 2", "hard"}, {"Court 3", "clay"}, {"Court 4", "grass"}}};
    for (const auto& [name, surface] : courts_list) {
      if (Status s = exec("INSERT INTO courts(name, surface) VALUES (?, ?)", name, surface);
          !s.ok())
        return s;
    }
    const std::array<std::pair<const char*, const char*>, 5> types = {{{"Open play", "#4e79a7"},
                                                                       {"Coaching", "#f28e2b"},
                                                                       {"League", "#e15759"},
                                                                       {"Juniors", "#76b7b2"},
                                                                       {"Seniors", "#59a14f"}}};
    for (const auto& [name, color] : types) {
      if (Status s = exec("INSERT INTO activity_types(name, color) VALUES (?, ?)", name, color);
          !s.ok())
        return s;
    }
    const std::array<const char*, 12> first = {"Ada",  "Bartek", "Chi",   "Dorota",
                                               "Emil", "Fang",   "Gosia", "Huong",
                                               "Igor", "Jana",   "Khanh", "Lena"};
    const std::array<const char*, 5> last = {"Nowak", "Tran", "Kowalska", "Nguyen", "Smith"};
    int user_count = 0;
    for (const char* f : first) {
      for (const char* l : last) {
        ++user_count;
        const std::string email = fmt::format("{}.{}@club.example", f, l);
        const char* role = user_count == 1 ? "admin" : (user_count % 9 == 0 ? "staff" : "member");
        if (Status s = exec("INSERT INTO users(name, email, role, password_hash) VALUES (?,?,?,?)",
                            fmt::format("{} {}", f, l), email, role, password_hash(email, "demo"));
            !s.ok())
          return s;
      }
    }
    const std::array<int, 6> hours = {8, 10, 12, 16, 18, 20};
    for (int d = -14; d <= 28; ++d) {
      const std::string date = add_days(today, d);
      for (int court = 1; court <= 4; ++court) {
        for (int h : hours) {
          const int type = 1 + static_cast<int>(rng() % 5);
          const int capacity = type == 2 ? 4 : 8;
          Result<sqlite::Exec> game = tx.execute(
              "INSERT INTO games(court_id, activity_type_id, starts_at, ends_at, capacity) "
              "VALUES (?, ?, ?, ?, ?)",
              court, type, fmt::format("{}T{:02}:00", date, h),
              fmt::format("{}T{:02}:30", date, h + 1), capacity);
          if (!game.ok()) return game.status();
          const int taken = static_cast<int>(rng() % static_cast<unsigned>(capacity + 1));
          for (int i = 0; i < taken; ++i) {
            const int user = 1 + static_cast<int>((rng() % static_cast<unsigned>(user_count)));
            if (Status s = exec(
                    "INSERT OR IGNORE INTO signups(game_id, user_id, created_at) VALUES (?,?,?)",
                    game->last_insert_rowid, user, fmt::format("{}T07:00:00.000Z", date));
                !s.ok())
              return s;
          }
        }
      }
      if (Status s = exec("INSERT INTO cash_days(date, opening_cents) VALUES (?, ?)", date,
                          20000 + static_cast<int>(rng() % 5000));
          !s.ok())
        return s;
      for (int p = 0; p < 8 && d <= 0; ++p) {
        if (Status s = exec(
                "INSERT INTO payments(user_id, amount_cents, method, created_at) VALUES (?,?,?,?)",
                1 + static_cast<int>(rng() % static_cast<unsigned>(user_count)),
                500 + static_cast<int>(rng() % 4000), p % 3 == 0 ? "cash" : "card",
                fmt::format("{}T{:02}:15:00.000Z", date, 9 + p));
            !s.ok())
          return s;
      }
    }
    const std::array<std::pair<int, const char*>, 3> holidays = {
        {{3, "Club anniversary"}, {10, "Regional holiday"}, {17, "Court maintenance day"}}};
    for (const auto& [offset, name] : holidays) {
      if (Status s =
              exec("INSERT INTO holidays(date, name) VALUES (?, ?)", add_days(today, offset), name);
          !s.ok())
        return s;
    }
    for (const auto& [k, v] : std::array<std::pair<const char*, const char*>, 3>{
             {{"club_name", "Riverside Court Club"}, {"currency", "PLN"}, {"timezone", "UTC"}}}) {
      if (Status s = exec("INSERT INTO settings(key, value) VALUES (?, ?)", k, v); !s.ok())
        return s;
    }
    return Status();
  });
}

Result<std::optional<User>> ClubStore::session(std::string_view token, std::string_view now_utc) {
  using Row = std::tuple<std::int64_t, std::string, std::string, std::string>;
  Result<std::vector<Row>> rows = run(
      Access::kRead, Operation::read("session.read"),
      [&] {
        return db_.query<std::int64_t, std::string, std::string, std::string>(
            "SELECT u.id, u.name, u.email, u.role FROM sessions s JOIN users u ON u.id = "
            "s.user_id WHERE s.token = ? AND s.expires_at > ?",
            token, now_utc);
      },
      /*session_read=*/true);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<User>();
  auto& [id, name, email, role] = rows->front();
  return std::optional<User>(User{id, std::move(name), std::move(email), std::move(role)});
}

Result<std::vector<Game>> ClubStore::games_on(std::string_view date) {
  using Row = std::tuple<std::int64_t, std::string, std::string, std::string, std::string,
                         std::string, std::int64_t, std::int64_t>;
  const std::string next = day_after(date);
  Result<std::vector<Row>> rows = run(Access::kRead, Operation::read("schedule.games"), [&] {
    return db_.query<std::int64_t, std::string, std::string, std::string, std::string, std::string,
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

Result<ScheduleContext> ClubStore::context_on(std::string_view date) {
  ScheduleContext ctx;
  auto settings = run(Access::kRead, Operation::read("schedule.settings"), [&] {
    return db_.query<std::string, std::string>("SELECT key, value FROM settings");
  });
  if (!settings.ok()) return settings.status();
  for (auto& [k, v] : *settings) {
    if (k == "club_name") ctx.club_name = v;
    if (k == "currency") ctx.currency = v;
  }
  auto courts = run(Access::kRead, Operation::read("schedule.courts"),
                    [&] { return db_.query<std::string>("SELECT name FROM courts ORDER BY id"); });
  if (!courts.ok()) return courts.status();
  ctx.courts = std::move(*courts);
  auto holidays = run(Access::kRead, Operation::read("schedule.holidays"), [&] {
    return db_.query<std::string>("SELECT name FROM holidays WHERE date = ?", date);
  });
  if (!holidays.ok()) return holidays.status();
  ctx.holidays = std::move(*holidays);
  const std::string next = day_after(date);
  auto cash = run(Access::kRead, Operation::read("schedule.cash"), [&] {
    return db_.query<std::int64_t, std::int64_t>(
        "SELECT count(*), coalesce(sum(amount_cents), 0) FROM payments "
        "WHERE created_at >= ? AND created_at < ?",
        date, next);
  });
  if (!cash.ok()) return cash.status();
  if (!cash->empty()) std::tie(ctx.payments_today, ctx.cash_today_cents) = cash->front();
  return ctx;
}

Result<std::optional<std::int64_t>> ClubStore::user_id_by_email(std::string_view email) {
  return run(Access::kRead, Operation::read("users.by_email"), [&] {
    return db_.query_one<std::int64_t>("SELECT id FROM users WHERE email = ?", email);
  });
}

Status ClubStore::refresh_session(std::string_view token, std::string_view now_utc) {
  // Only when last_seen is over a minute old: "2026-11-30T12:00:00.000Z" minus a minute,
  // compared as text (the stamps are fixed-width UTC).
  Result<sqlite::Exec> r = run(Access::kWrite, Operation::write("session.refresh"), [&] {
    return db_.execute(
        "UPDATE sessions SET last_seen = ?1 WHERE token = ?2 AND "
        "last_seen < strftime('%Y-%m-%dT%H:%M:%fZ', ?1, '-60 seconds')",
        now_utc, token);
  });
  return r.status();
}

Result<std::string> ClubStore::login(std::string_view email, std::string_view password,
                                     std::string_view now_utc) {
  if (email.empty() || email.size() > 200) return bad("email must be 1 to 200 characters");
  if (password.empty() || password.size() > 200) return bad("password must be 1 to 200 characters");
  auto user = run(Access::kRead, Operation::read("login.user"), [&] {
    return db_.query<std::int64_t, std::string>(
        "SELECT id, password_hash FROM users WHERE email = ?", email);
  });
  if (!user.ok()) return user.status();
  if (user->empty() || std::get<1>(user->front()) != password_hash(email, password)) {
    return Status(Code::kPermissionDenied, "unknown email or wrong password");
  }
  const std::int64_t id = std::get<0>(user->front());
  std::string token = new_token();
  // Inserting a fresh random token twice is impossible, so a retry of it is safe.
  Result<sqlite::Exec> inserted =
      run(Access::kWrite, Operation::idempotent_write("login.session"), [&] {
        return db_.execute(
            "INSERT OR IGNORE INTO sessions(token, user_id, created_at, last_seen, expires_at) "
            "VALUES (?1, ?2, ?3, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', ?3, '+30 days'))",
            token, id, now_utc);
      });
  if (!inserted.ok()) return inserted.status();
  return token;
}

Result<PaymentReceipt> ClubStore::pay(std::int64_t user_id, std::int64_t amount_cents,
                                      std::string_view method, std::string_view key,
                                      std::string_view now_utc) {
  if (amount_cents <= 0 || amount_cents > 10'000'000) {
    return bad("amount_cents must be between 1 and 10000000");
  }
  if (method != "cash" && method != "card") return bad("method must be \"cash\" or \"card\"");
  if (key.size() > 200) return bad("Idempotency-Key must be at most 200 characters");
  // The whole transaction may be re-run: it checks the key first, inside the transaction.
  return run(Access::kWrite, Operation::transaction(/*rerunnable=*/true, "payments.create"), [&] {
    return db_.transaction(
        [&](sqlite::Transaction& tx) -> Result<PaymentReceipt> {
          if (!key.empty()) {
            auto seen = tx.query_one<std::int64_t>(
                "SELECT result_id FROM idempotency_keys WHERE key = ? AND route = 'payments'", key);
            if (!seen.ok()) return seen.status();
            if (seen->has_value()) {
              return PaymentReceipt{**seen, amount_cents, /*replayed=*/true};
            }
          }
          auto paid = tx.execute(
              "INSERT INTO payments(user_id, amount_cents, method, created_at) VALUES (?,?,?,?)",
              user_id, amount_cents, method, now_utc);
          if (!paid.ok()) return paid.status();
          if (!key.empty()) {
            auto recorded = tx.execute(
                "INSERT INTO idempotency_keys(key, route, result_id, created_at) "
                "VALUES (?, 'payments', ?, ?)",
                key, paid->last_insert_rowid, now_utc);
            if (!recorded.ok()) return recorded.status();
          }
          return PaymentReceipt{paid->last_insert_rowid, amount_cents, false};
        },
        Operation::transaction(true, "payments.create"));
  });
}

Result<SignupReceipt> ClubStore::sign_up(std::int64_t user_id, std::int64_t game_id,
                                         std::string_view key, std::string_view now_utc) {
  if (game_id <= 0) return bad("game_id must be a positive number");
  if (key.size() > 200) return bad("Idempotency-Key must be at most 200 characters");
  return run(Access::kWrite, Operation::transaction(/*rerunnable=*/true, "signups.create"), [&] {
    return db_.transaction(
        [&](sqlite::Transaction& tx) -> Result<SignupReceipt> {
          if (!key.empty()) {
            auto seen = tx.query_one<std::int64_t>(
                "SELECT result_id FROM idempotency_keys WHERE key = ? AND route = 'signups'", key);
            if (!seen.ok()) return seen.status();
            if (seen->has_value()) return SignupReceipt{**seen, game_id, true};
          }
          auto game = tx.query_one<std::int64_t>(
              "SELECT capacity - (SELECT count(*) FROM signups WHERE game_id = ?1) FROM games "
              "WHERE id = ?1",
              game_id);
          if (!game.ok()) return game.status();
          if (!game->has_value()) return Status(Code::kNotFound, "no such game");
          if (**game <= 0) return Status(Code::kFailedPrecondition, "the game is full");
          auto added =
              tx.execute("INSERT INTO signups(game_id, user_id, created_at) VALUES (?, ?, ?)",
                         game_id, user_id, now_utc);
          if (!added.ok()) return added.status();
          if (!key.empty()) {
            auto recorded = tx.execute(
                "INSERT INTO idempotency_keys(key, route, result_id, created_at) "
                "VALUES (?, 'signups', ?, ?)",
                key, added->last_insert_rowid, now_utc);
            if (!recorded.ok()) return recorded.status();
          }
          return SignupReceipt{added->last_insert_rowid, game_id, false};
        },
        Operation::transaction(true, "signups.create"));
  });
}

Status ClubStore::record_report(std::string_view path, std::string_view digest,
                                std::string_view note, std::string_view now_utc) {
  if (path.size() > 500 || digest.size() > 64 || note.size() > 2000) {
    return bad("path (500), digest (64) or note (2000 characters) too long");
  }
  return run(Access::kWrite, Operation::write("problem_reports.create"),
             [&] {
               return db_.execute(
                   "INSERT INTO problem_reports(path, digest, note, created_at) VALUES (?,?,?,?)",
                   path, digest, note, now_utc);
             })
      .status();
}

}  // namespace holdfast::panel
