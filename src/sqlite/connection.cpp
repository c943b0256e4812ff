#include "connection.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast::sqlite::detail {
namespace {

using std::chrono::milliseconds;

// Naps of the busy handler: short at first (most locks are brief), then a steady 10 ms so
// a waiter still sees the short gaps between another writer's back-to-back transactions.
constexpr Duration kBusyNaps[] = {milliseconds(1), milliseconds(2), milliseconds(5),
                                  milliseconds(10)};

constexpr const char* kControlSql[] = {"BEGIN IMMEDIATE", "BEGIN EXCLUSIVE", "BEGIN DEFERRED",
                                       "COMMIT", "ROLLBACK"};

bool only_blank(std::string_view text) noexcept {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0 || c == ';';
  });
}

// The extended code when SQLite returned a primary one.
int extended(sqlite3* db, int rc) noexcept {
  if (db != nullptr && rc == (rc & 0xff)) {
    const int ext = sqlite3_extended_errcode(db);
    if ((ext & 0xff) == rc) return ext;
  }
  return rc;
}

}  // namespace

std::string_view sql_excerpt(std::string_view sql) noexcept {
  while (!sql.empty() && std::isspace(static_cast<unsigned char>(sql.front())) != 0) {
    sql.remove_prefix(1);
  }
  constexpr std::size_t kMax = 80;
  return sql.size() <= kMax ? sql : sql.substr(0, kMax);
}

std::string cat(std::initializer_list<std::string_view> parts) {
  std::size_t n = 0;
  for (std::string_view p : parts)
    n += p.size();
  std::string out;
  out.reserve(n);
  for (std::string_view p : parts)
    out.append(p);
  return out;
}

Connection::Connection(sqlite3* db, Role role, const Options& options, std::string display)
    : db_(db),
      role_(role),
      options_(&options),
      clock_(options.clock != nullptr ? options.clock : &Clock::system()),
      display_(std::move(display)) {}

Connection::~Connection() {
  clear_cache();
  for (sqlite3_stmt*& s : control_) {
    sqlite3_finalize(s);
    s = nullptr;
  }
  sqlite3_close_v2(db_);
}

void Connection::clear_cache() noexcept {
  for (sqlite3_stmt*& s : cache_) {
    sqlite3_finalize(s);
    s = nullptr;
  }
}

Result<std::unique_ptr<Connection>> Connection::open(const ConnectionSpec& spec, Role role) {
  const Options& o = *spec.options;
  int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI | SQLITE_OPEN_PRIVATECACHE;
  if (o.read_only) {
    flags |= SQLITE_OPEN_READONLY;
  } else {
    flags |= SQLITE_OPEN_READWRITE;
    if (spec.create) flags |= SQLITE_OPEN_CREATE;
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(spec.target.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    const int code = extended(db, rc);
    const std::string message =
        cat({"cannot open database '", spec.display,
             "': ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)});
    sqlite3_close_v2(db);
    return sqlite_status(code, message);
  }
  std::unique_ptr<Connection> c(new Connection(db, role, o, spec.display));
  if (Status s = c->configure(spec); !s.ok()) return s;
  return c;
}

Status Connection::configure(const ConnectionSpec& spec) {
  const Options& o = *spec.options;
  sqlite3_extended_result_codes(db_, 1);
  // Before any statement: the set-up pragmas below may already meet a lock.
  sqlite3_busy_handler(db_, &Connection::on_busy, this);
  // Every connection gets the same settings, so a PRAGMA read on the read path tells the
  // truth about the database.
  static constexpr const char* kSynchronous[] = {
      "PRAGMA synchronous=OFF", "PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL",
      "PRAGMA synchronous=EXTRA"};
  if (Status s = exec(kSynchronous[static_cast<int>(o.synchronous)]); !s.ok()) return s;
  if (Status s = exec(o.foreign_keys ? "PRAGMA foreign_keys=ON" : "PRAGMA foreign_keys=OFF");
      !s.ok()) {
    return s;
  }
  if (role_ == Role::kReader) {
    if (Status s = exec("PRAGMA query_only=1"); !s.ok()) return s;
  }
  if (o.on_connect) {
    Status s = o.on_connect(db_, role_);
    if (!s.ok()) {
      s.annotate(cat({"Options::on_connect failed for '", display_, "'"}));
      return s;
    }
  }
  // Last: installing an authorizer expires every statement prepared so far.
  sqlite3_set_authorizer(db_, &Connection::on_authorize, this);
  deny_pragma_settings_ = role_ == Role::kReader;
  return Status();
}

int Connection::on_busy(void* self_ptr, int count) noexcept {
  auto* self = static_cast<Connection*>(self_ptr);
  try {
    Clock& clock = *self->clock_;
    const TimePoint now = clock.now();
    if (count == 0) {
      // A new lock episode: a wait of at most busy_timeout (window.hpp's rule).
      self->busy_deadline_ = now + RequestScope::begin_wait(now, self->options_->busy_timeout);
    }
    const Duration left = self->busy_deadline_ - now;
    if (left <= Duration::zero()) return 0;
    Duration nap =
        kBusyNaps[std::min<std::size_t>(static_cast<std::size_t>(count), std::size(kBusyNaps) - 1)];
    clock.sleep_for(std::min(nap, left));
    return 1;
  } catch (...) {
    return 0;
  }
}

int Connection::on_authorize(void* self_ptr, int action, const char* a, const char* b,
                             const char* /*c*/, const char* /*d*/) noexcept {
  auto* self = static_cast<Connection*>(self_ptr);
  const bool pragma_setting = action == SQLITE_PRAGMA && b != nullptr;
  // sqlite3_stmt_readonly() is true for PRAGMA optimize, yet it may run ANALYZE, which
  // creates and fills sqlite_stat1.
  const bool pragma_that_writes = action == SQLITE_PRAGMA && b == nullptr && a != nullptr &&
                                  sqlite3_stricmp(a, "optimize") == 0;
  const bool transaction = action == SQLITE_TRANSACTION;
  const bool savepoint = action == SQLITE_SAVEPOINT;
  const bool attach = action == SQLITE_ATTACH || action == SQLITE_DETACH;
  if (AuthLog* log = self->auth_log_) {
    log->transaction |= transaction;
    log->savepoint |= savepoint;
    log->attach |= attach;
    log->pragma_setting |= pragma_setting;
    log->pragma_that_writes |= pragma_that_writes;
  }
  // A read connection never needs any of these, and some PRAGMAs act while being prepared.
  if (self->deny_pragma_settings_ && (pragma_setting || transaction || savepoint || attach)) {
    return SQLITE_DENY;
  }
  return SQLITE_OK;
}

Status Connection::error(int rc, std::string_view context) const {
  std::string message(context);
  message += ": ";
  message += sqlite3_errmsg(db_);
  return sqlite_status(extended(db_, rc), message);
}

Status Connection::exec(const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status();
  const std::string message = cat({"'", display_, "': ", sql, ": ", err != nullptr ? err : ""});
  sqlite3_free(err);
  return sqlite_status(extended(db_, rc), message);
}

Result<sqlite3_stmt*> Connection::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), 0, &stmt, &tail);
  if (rc != SQLITE_OK) {
    return error(rc, cat({"cannot prepare '", sql_excerpt(sql), "'"}));
  }
  if (stmt == nullptr) {
    return sqlite_status(SQLITE_ERROR, cat({"no SQL statement in '", sql_excerpt(sql), "'"}));
  }
  const std::string_view rest(tail, static_cast<std::size_t>(sql.data() + sql.size() - tail));
  if (!only_blank(rest)) {
    // Comments alone are no statement: let the engine say whether anything follows.
    sqlite3_stmt* next = nullptr;
    const int rc2 =
        sqlite3_prepare_v3(db_, rest.data(), static_cast<int>(rest.size()), 0, &next, nullptr);
    const bool more = rc2 != SQLITE_OK || next != nullptr;
    sqlite3_finalize(next);
    if (more) {
      sqlite3_finalize(stmt);
      return sqlite_status(SQLITE_ERROR, cat({"'", sql_excerpt(sql),
                                              "' holds more than one statement: run them one "
                                              "at a time, or use execute_script()"}));
    }
  }
  return stmt;
}

Result<sqlite3_stmt*> Connection::prepare_cached(const QueryInfo& query) {
  Result<sqlite3_stmt*> st = prepare(query.sql);
  if (!st.ok()) return st;
  if (query.slot >= cache_.size()) {
    cache_.resize(std::max<std::size_t>({std::size_t{query.slot} + 1, cache_.size() * 2, 16}));
  }
  cache_[query.slot] = *st;
  return st;
}

Result<AccessVerdict> Connection::judge_access(std::string_view sql, int* parameters) {
  AuthLog log;
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  auth_log_ = &log;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), 0, &stmt, &tail);
  auth_log_ = nullptr;
  const bool flagged = log.transaction || log.savepoint || log.attach || log.pragma_setting;
  if (rc != SQLITE_OK && !((rc & 0xff) == SQLITE_AUTH && flagged && deny_pragma_settings_)) {
    return error(rc, cat({"cannot prepare '", sql_excerpt(sql), "'"}));
  }
  if (rc == SQLITE_OK && stmt == nullptr) {
    return sqlite_status(SQLITE_ERROR, cat({"no SQL statement in '", sql_excerpt(sql), "'"}));
  }
  AccessVerdict v{Access::kWrite, Effect::kWrite};
  bool more = false;
  if (stmt != nullptr) {
    const std::string_view rest(tail, static_cast<std::size_t>(sql.data() + sql.size() - tail));
    if (!only_blank(rest)) {
      // Prepared under the same authorizer: a PRAGMA in the tail is refused here too.
      sqlite3_stmt* next = nullptr;
      const int rc2 =
          sqlite3_prepare_v3(db_, rest.data(), static_cast<int>(rest.size()), 0, &next, nullptr);
      more = rc2 != SQLITE_OK || next != nullptr;
      sqlite3_finalize(next);
    }
  }
  if (more) {
    v.effect = Effect::kMultipleStatements;
  } else if (stmt != nullptr && sqlite3_stmt_isexplain(stmt) != 0) {
    v = {Access::kRead, Effect::kExplain};
  } else if (log.transaction) {
    v.effect = Effect::kTransactionControl;
  } else if (log.savepoint) {
    v.effect = Effect::kSavepoint;
  } else if (log.attach) {
    v.effect = Effect::kConnectionState;
  } else if (log.pragma_setting) {
    v.effect = Effect::kPragmaSetting;
  } else if (log.pragma_that_writes) {
    v.effect = Effect::kPragmaThatWrites;
  } else if (sqlite3_stmt_readonly(stmt) == 0) {
    v.effect = Effect::kWrite;
  } else {
    v = {Access::kRead, Effect::kRead};
  }
  if (parameters != nullptr)
    *parameters = stmt != nullptr ? sqlite3_bind_parameter_count(stmt) : -1;
  sqlite3_finalize(stmt);
  return v;
}

Status Connection::control(Control which) {
  sqlite3_stmt*& stmt = control_[static_cast<std::size_t>(which)];
  if (stmt == nullptr) {
    const int rc = sqlite3_prepare_v3(db_, kControlSql[static_cast<int>(which)], -1,
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return error(rc, kControlSql[static_cast<int>(which)]);
  }
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  if (rc == SQLITE_DONE) return Status();
  return error(rc, cat({kControlSql[static_cast<int>(which)], " on '", display_, "'"}));
}

Status Connection::run_script(std::string_view sql) {
  std::string_view rest = sql;
  while (!only_blank(rest)) {
    AuthLog log;
    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    auth_log_ = &log;
    const int rc =
        sqlite3_prepare_v3(db_, rest.data(), static_cast<int>(rest.size()), 0, &stmt, &tail);
    auth_log_ = nullptr;
    if (rc != SQLITE_OK) {
      return error(rc, cat({"cannot prepare '", sql_excerpt(rest), "'"}));
    }
    if (stmt == nullptr) break;  // only comments left
    if (log.transaction) {
      sqlite3_finalize(stmt);
      return sqlite_status(SQLITE_ERROR, cat({"'", sql_excerpt(rest),
                                              "': a script runs in one transaction of its "
                                              "own and must not contain BEGIN, COMMIT or "
                                              "ROLLBACK"}));
    }
    int step;
    while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    if (step != SQLITE_DONE) {
      Status s = error(step, sql_excerpt(rest));
      sqlite3_finalize(stmt);
      return s;
    }
    sqlite3_finalize(stmt);
    rest = std::string_view(tail, static_cast<std::size_t>(rest.data() + rest.size() - tail));
  }
  return Status();
}

}  // namespace holdfast::sqlite::detail
