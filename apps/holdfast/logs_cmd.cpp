// `holdfast logs`: read the logs table without adding reads to the production database, and
// `holdfast logs prune`: retention from the command line.
//
//   $ holdfast logs --db club.db --since 2026-09-11T06:20 --level WARN --context payments
//   2026-09-11T06:21:07.412Z ERROR [payments] charge failed: database is locked
//   2026-09-11T06:20:13.004Z WARN  [payments] slow commit ms=840
//   $ holdfast logs prune --db club.db --older-than 90d
//   deleted 1200 rows older than 2026-09-01T11:40:21.123Z
//
// `logs` reads what it prints and nothing more: one read transaction on a read-only
// connection to the production file (the schema check, then the query with its LIMIT), the
// rows kept in memory, the transaction ended and the file closed before the first line is
// printed. However slowly the output is taken (a pager, a full pipe), production sees one
// short read. Above --limit 10000 (kDirectReadRows) the rows could need too much memory, so
// `logs` copies the database with SQLite's online backup API (again one read transaction:
// the copy is a consistent snapshot), saying first on stderr how many bytes it copies and
// where, queries the copy, and deletes it on every way out: an error, a reader that closed
// the pipe (`holdfast logs | head -1`: the write fails with EPIPE, as main() ignores
// SIGPIPE, and the command ends quietly with 1), Ctrl-C, SIGTERM or SIGHUP (the signal then
// ends the process as it would have).
//
// Rows are printed newest first, one per line: created_at level [context] message, with
// control bytes escaped so that a row can neither drive the terminal nor fake another line:
// "\n", "\r", "\\", "\xNN" for other C0 bytes, DEL and bytes that are not UTF-8, "\u00NN" for
// C1 characters; a tab stays a tab. Errors print "error: ..." on stderr and exit with 1 (2
// for bad arguments).
//
// On PostgreSQL (`--pg URL` instead of `--db FILE`) the table is read with one query on a
// read-only session (its own snapshot), and prune deletes through pg::PgLogStore in the
// same small batches; the URL is shown without its password.
#include <fmt/core.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/sqlite/log_store.hpp"
#include "safe_print.hpp"
#include "utf8.hpp"
#ifdef HOLDFAST_HAVE_PG
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/log_store.hpp"
#include "holdfast/pg/url.hpp"
#endif

namespace holdfast::cli {
namespace {

struct LogsArgs {
  std::string db;
  std::string pg;
  std::string since;
  std::string level = "INFO";
  std::string context;
  int limit = 50;
};

struct PruneArgs {
  std::string db;
  std::string pg;
  std::string older_than;
  int batch_size = 500;
};

// A row's level as the number Level has (INFO 1, WARN 2, ERROR 3), in SQL both databases
// understand, for "--level WARN and above".
constexpr const char* kLevelRank =
    "(CASE level WHEN 'INFO' THEN 1 WHEN 'WARN' THEN 2 WHEN 'ERROR' THEN 3 ELSE 0 END)";

[[noreturn]] void fail(const std::string& message, int exit_code = 1) {
  eprint("error: {}\n", message);
  throw CLI::RuntimeError(exit_code);
}

struct SqliteCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
using Handle = std::unique_ptr<sqlite3, SqliteCloser>;

struct StatementFinalizer {
  void operator()(sqlite3_stmt* st) const noexcept { sqlite3_finalize(st); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;

Handle open_handle(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Handle db(raw);
  if (rc != SQLITE_OK) {
    fail(fmt::format("cannot open '{}': {}", path, raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

void require_file(const std::string& path) {
  std::error_code ec;
  if (path.empty()) fail("name the database: --db FILE or --pg URL", 2);
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(fmt::format("'{}' does not exist or is not a file", path));
  }
}

// Whether `db` has a logs table (the query fails with the engine's message on a file that
// is not a database).
void require_logs_table(sqlite3* db, const std::string& shown_as) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v2(
      db, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'logs'", -1, &raw,
      nullptr);
  Stmt st(raw);
  if (rc != SQLITE_OK) fail(fmt::format("cannot read '{}': {}", shown_as, sqlite3_errmsg(db)));
  const int step = sqlite3_step(raw);
  if (step != SQLITE_ROW) fail(fmt::format("cannot read '{}': {}", shown_as, sqlite3_errmsg(db)));
  if (sqlite3_column_int(raw, 0) == 0) fail(fmt::format("'{}' has no logs table", shown_as));
}

// The files of the snapshot copy, for the signal handler: fixed buffers (a handler may not
// allocate), armed once they hold the names.
constexpr std::array<const char*, 4> kCopySuffixes = {"", "-journal", "-wal", "-shm"};
constexpr std::size_t kMaxCopyPath = 4096;
char g_copy_files[kCopySuffixes.size()][kMaxCopyPath + 16];
volatile std::sig_atomic_t g_copy_armed = 0;

// The signals that end the process while it holds the copy. SA_RESETHAND: the handler runs
// once, then the signal does what it would have done (the exit status says which). Not
// SIGPIPE: main() ignores it, and a closed pipe ends the command by its failed write, which
// unwinds through ~TempCopy.
constexpr std::array<int, 3> kEndingSignals = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_copy_and_end(int signal_number) {
  if (g_copy_armed != 0) {
    for (const char* file : g_copy_files)
      ::unlink(file);  // async-signal-safe
  }
  ::raise(signal_number);  // the default action now: ends the process
}

// A temporary file removed (with any journal SQLite left beside it) when this goes away,
// or when one of kEndingSignals ends the process first.
class TempCopy {
 public:
  TempCopy() {
    struct sigaction on_signal {};
    on_signal.sa_handler = &remove_copy_and_end;
    sigemptyset(&on_signal.sa_mask);
    for (int s : kEndingSignals)
      sigaddset(&on_signal.sa_mask, s);
    on_signal.sa_flags = SA_RESETHAND;
    // Installed before the file exists: no moment when it exists without its handler. A
    // signal the process was started ignoring (nohup) stays ignored.
    for (std::size_t i = 0; i < kEndingSignals.size(); ++i) {
      ::sigaction(kEndingSignals[i], &on_signal, &previous_[i]);
      if (previous_[i].sa_handler == SIG_IGN)
        ::sigaction(kEndingSignals[i], &previous_[i], nullptr);
    }
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    std::string pattern = (dir / "holdfast-logs-XXXXXX").string();
    if (pattern.size() > kMaxCopyPath) {
      restore_signals();
      fail(fmt::format("the temporary folder's name is too long: '{}'", dir.string()));
    }
    // The signals wait from before the file exists until the handler knows its name: one
    // that came in between would end the process and leave the file. Delivered after.
    const Held held;
    const int fd = mkstemp(pattern.data());
    if (fd < 0) {
      restore_signals();
      fail(fmt::format("cannot create a temporary file in '{}'", dir.string()));
    }
    ::close(fd);
    path_ = pattern;
    for (std::size_t i = 0; i < kCopySuffixes.size(); ++i) {
      const std::string file = path_ + kCopySuffixes[i];
      std::memcpy(g_copy_files[i], file.c_str(), file.size() + 1);
    }
    g_copy_armed = 1;
  }
  ~TempCopy() {
    // Held while the files go and the handlers are restored: a signal then ends the
    // process (as it would have) once the files are gone.
    const Held held;
    std::error_code ec;
    for (const char* suffix : kCopySuffixes) {
      std::filesystem::remove(path_ + suffix, ec);
    }
    g_copy_armed = 0;
    restore_signals();
  }
  TempCopy(const TempCopy&) = delete;
  TempCopy& operator=(const TempCopy&) = delete;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  void restore_signals() noexcept {
    for (std::size_t i = 0; i < kEndingSignals.size(); ++i)
      ::sigaction(kEndingSignals[i], &previous_[i], nullptr);
  }

  // kEndingSignals held (blocked) on this thread for a scope, then let through.
  class Held {
   public:
    Held() noexcept {
      sigset_t ending;
      sigemptyset(&ending);
      for (int s : kEndingSignals)
        sigaddset(&ending, s);
      ::pthread_sigmask(SIG_BLOCK, &ending, &before_);
    }
    ~Held() { ::pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;

   private:
    sigset_t before_{};
  };

  std::string path_;
  std::array<struct sigaction, kEndingSignals.size()> previous_{};
};

// `text` fit for a terminal line (see the header comment): printable UTF-8 and tabs as they
// are, everything else escaped.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = byte_at(i);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out += static_cast<char>(c);
    } else if (c < 0x80) {
      out += fmt::format("\\x{:02x}", c);  // C0 controls and DEL
    } else {
      const std::size_t len = panel::utf8_sequence_at(text, i);
      if (len == 0) {
        out += fmt::format("\\x{:02x}", c);
        ++i;
        continue;
      }
      if (len == 2 && c == 0xc2 && byte_at(i + 1) < 0xa0) {
        out += fmt::format("\\u{:04x}", byte_at(i + 1));  // C1 controls: U+0080..U+009F
      } else {
        out.append(text.substr(i, len));
      }
      i += len;
      continue;
    }
    ++i;
  }
  return out;
}

// One row as `logs` prints it.
void print_row(std::string_view created_at, std::string_view level, std::string_view context,
               std::string_view message) {
  fmt::print("{} {:<5} [{}] {}\n", printable(created_at), printable(level), printable(context),
             printable(message));
}

// Copies the whole database in one backup step: one read transaction on the source, so
// the copy is one consistent snapshot.
void snapshot(const std::string& source_path, const std::string& copy_path) {
  Handle source = open_handle(source_path, SQLITE_OPEN_READONLY);
  sqlite3_busy_timeout(source.get(), 5000);
  Handle copy = open_handle(copy_path, SQLITE_OPEN_READWRITE);
  sqlite3_backup* backup = sqlite3_backup_init(copy.get(), "main", source.get(), "main");
  if (backup == nullptr) {
    fail(fmt::format("cannot copy '{}': {}", source_path, sqlite3_errmsg(copy.get())));
  }
  const int rc = sqlite3_backup_step(backup, -1);
  sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) {
    fail(fmt::format("cannot copy '{}': {}", source_path, sqlite3_errstr(rc)));
  }
}

// "2026-11-30T11:40:21.123Z" or any prefix of that shape of at least the year.
bool valid_since(std::string_view text) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() < 4 || text.size() > kShape.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(text[i])) != 0;
    if (kShape[i] == 'd' ? !digit : text[i] != kShape[i]) return false;
  }
  return true;
}

// Up to this --limit the rows are read into memory straight from the production file; above
// it from a snapshot copy. 10 000 rows are a few megabytes (a row is a log line).
constexpr int kDirectReadRows = 10'000;

// Runs the logs query of `args` on `db` and hands each row to `on_row(created_at, level,
// context, message)`, newest first. The text passed is valid only during the call.
template <typename OnRow>
void for_each_log_row(sqlite3* db, const LogsArgs& args, Level min_level, OnRow&& on_row) {
  const std::string sql =
      std::string(
          "SELECT created_at, level, context, message FROM logs WHERE created_at >= ?1 "
          "AND ") +
      kLevelRank +
      " >= ?2 AND (?3 IS NULL OR context = ?3) ORDER BY created_at DESC, id DESC LIMIT ?4";
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
    Stmt guard(raw);
    fail(fmt::format("cannot query the logs table of '{}': {}", args.db, sqlite3_errmsg(db)));
  }
  Stmt st(raw);
  sqlite3_bind_text(raw, 1, args.since.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(raw, 2, static_cast<int>(min_level));
  if (args.context.empty()) {
    sqlite3_bind_null(raw, 3);
  } else {
    sqlite3_bind_text(raw, 3, args.context.c_str(), -1, SQLITE_TRANSIENT);
  }
  sqlite3_bind_int(raw, 4, args.limit);

  auto column = [raw](int i) {
    const unsigned char* text = sqlite3_column_text(raw, i);
    return text ? std::string_view(reinterpret_cast<const char*>(text)) : std::string_view();
  };
  int rc = SQLITE_OK;
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
    on_row(column(0), column(1), column(2), column(3));
  }
  if (rc != SQLITE_DONE) {
    fail(fmt::format("cannot read the logs table of '{}': {}", args.db, sqlite3_errmsg(db)));
  }
}

// One row of the logs query, kept until the read that found it has ended.
struct LogRow {
  std::string created_at;
  std::string level;
  std::string context;
  std::string message;
};

// The rows of the logs query, read from the production file in one read transaction that
// has ended (and the file closed) when this returns: no lock is held while they are printed.
std::vector<LogRow> read_rows_directly(const LogsArgs& args, Level min_level) {
  Handle db = open_handle(args.db, SQLITE_OPEN_READONLY);
  sqlite3_busy_timeout(db.get(), 5000);
  // The schema check and the query in one transaction: one read, one snapshot.
  if (sqlite3_exec(db.get(), "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
    fail(fmt::format("cannot read '{}': {}", args.db, sqlite3_errmsg(db.get())));
  }
  require_logs_table(db.get(), args.db);
  std::vector<LogRow> rows;
  for_each_log_row(db.get(), args, min_level,
                   [&rows](std::string_view created_at, std::string_view level,
                           std::string_view context, std::string_view message) {
                     rows.push_back({std::string(created_at), std::string(level),
                                     std::string(context), std::string(message)});
                   });
  // A read commits nothing; should COMMIT fail, closing the connection ends the read anyway.
  (void)sqlite3_exec(db.get(), "COMMIT", nullptr, nullptr, nullptr);
  return rows;
}

#ifdef HOLDFAST_HAVE_PG
// The same query on PostgreSQL, on a read-only session: one statement, one snapshot.
void run_logs_pg(const LogsArgs& args, Level min_level) {
  const std::string shown = pg::redact_password(args.pg);
  pg::ConnectOptions o;
  o.conninfo = args.pg;
  o.application_name = "holdfast-logs-cli";
  o.settings = {{"default_transaction_read_only", "on"}, {"statement_timeout", "30s"}};
  Result<pg::Connection> conn = pg::Connection::open(o);
  if (!conn.ok()) fail(fmt::format("cannot connect to {}: {}", shown, conn.status().to_string()));
  Result<pg::Rows> rows = conn->query(
      std::string("SELECT created_at, level, context, message FROM logs WHERE created_at >= $1 "
                  "AND ") +
          kLevelRank +
          " >= $2 AND ($3::text IS NULL OR context = $3) ORDER BY created_at DESC, id DESC "
          "LIMIT $4",
      {args.since, static_cast<int>(min_level),
       args.context.empty() ? pg::Param(nullptr) : pg::Param(args.context), args.limit});
  if (!rows.ok()) {
    fail(fmt::format("cannot read the logs table at {}: {}", shown, rows.status().to_string()));
  }
  for (int r = 0; r < rows->size(); ++r) {
    print_row(rows->text(r, 0), rows->text(r, 1), rows->text(r, 2), rows->text(r, 3));
  }
}
#else
[[noreturn]] void run_logs_pg(const LogsArgs&, Level) {
  fail("this build of holdfast has no PostgreSQL support", 2);
}
#endif

void run_logs(const LogsArgs& args) {
  Level min_level = Level::kInfo;
  if (!parse_level(args.level, min_level) || min_level == Level::kDebug) {
    fail(fmt::format("unknown --level '{}': use INFO, WARN or ERROR", args.level), 2);
  }
  if (!args.since.empty() && !valid_since(args.since)) {
    fail(fmt::format("bad --since '{}': use ISO-8601 UTC like 2026-09-11T06:20:00.000Z or a "
                     "prefix of it such as 2026-09-11T06",
                     args.since),
         2);
  }
  if (args.limit < 1) fail(fmt::format("--limit must be at least 1, got {}", args.limit), 2);
  if (!args.pg.empty()) {
    if (!args.db.empty()) fail("name one database: --db FILE or --pg URL", 2);
    return run_logs_pg(args, min_level);
  }
  require_file(args.db);
  if (args.limit <= kDirectReadRows) {
    for (const LogRow& row : read_rows_directly(args, min_level)) {
      print_row(row.created_at, row.level, row.context, row.message);
    }
    return;
  }
  TempCopy copy;
  std::error_code ec;
  std::uintmax_t bytes = std::filesystem::file_size(args.db, ec);
  if (ec) bytes = 0;
  // The backup copies the database as a reader sees it: the main file with the WAL's pages.
  if (const std::uintmax_t wal = std::filesystem::file_size(args.db + "-wal", ec); !ec) {
    bytes += wal;
  }
  eprint(
      "holdfast logs: --limit {} is above {}: copying '{}' (about {} bytes) into {} first; "
      "it is deleted afterwards\n",
      args.limit, kDirectReadRows, args.db, bytes, copy.path());
  snapshot(args.db, copy.path());
  Handle db = open_handle(copy.path(), SQLITE_OPEN_READONLY);
  require_logs_table(db.get(), args.db);
  for_each_log_row(db.get(), args, min_level, print_row);
}

// "90d" or "12h": a positive whole number of days or hours.
bool parse_age(std::string_view text, std::chrono::milliseconds& out) {
  if (text.size() < 2 || text.size() > 8) return false;
  const char unit = text.back();
  std::int64_t n = 0;
  for (char c : text.substr(0, text.size() - 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    n = n * 10 + (c - '0');
  }
  if (n <= 0) return false;
  if (unit == 'd') {
    out = std::chrono::days(n);
  } else if (unit == 'h') {
    out = std::chrono::hours(n);
  } else {
    return false;
  }
  return true;
}

void run_prune(const PruneArgs& args) {
  std::chrono::milliseconds age{};
  if (!parse_age(args.older_than, age)) {
    fail(fmt::format("bad --older-than '{}': use a number of days or hours, like 90d or 12h",
                     args.older_than),
         2);
  }
  if (args.batch_size < 1) {
    fail(fmt::format("--batch-size must be at least 1, got {}", args.batch_size), 2);
  }
  const WallTime cutoff = WallClock::system().now() - age;
  PruneOptions options;
  options.batch_size = args.batch_size;
  if (!args.pg.empty()) {
    if (!args.db.empty()) fail("name one database: --db FILE or --pg URL", 2);
#ifdef HOLDFAST_HAVE_PG
    pg::PgLogStore::Options store_options;
    store_options.url = args.pg;
    store_options.statement_timeout = std::chrono::seconds(5);  // prune is not in a hurry
    store_options.lock_timeout = std::chrono::seconds(2);
    store_options.application_name = "holdfast-logs-prune";
    Result<std::unique_ptr<pg::PgLogStore>> store = pg::PgLogStore::open(store_options);
    if (!store.ok()) fail(store.status().to_string());
    Result<std::int64_t> deleted = prune_logs(**store, cutoff, options);
    if (!deleted.ok()) fail(deleted.status().to_string());
    fmt::print("deleted {} rows older than {}\n", *deleted, utc_stamp(cutoff).view());
    return;
#else
    fail("this build of holdfast has no PostgreSQL support", 2);
#endif
  }
  require_file(args.db);
  {
    // Refuse a file without a logs table instead of creating one in it.
    Handle check = open_handle(args.db, SQLITE_OPEN_READONLY);
    sqlite3_busy_timeout(check.get(), 5000);
    require_logs_table(check.get(), args.db);
  }
  sqlite::SqliteLogStore::Options store_options;
  store_options.path = args.db;
  // Each batch waits this long for the write lock; prune is not in a hurry.
  store_options.busy_timeout = std::chrono::seconds(5);
  Result<std::unique_ptr<sqlite::SqliteLogStore>> store =
      sqlite::SqliteLogStore::open(store_options);
  if (!store.ok()) fail(store.status().to_string());

  Result<std::int64_t> deleted = prune_logs(**store, cutoff, options);
  if (!deleted.ok()) fail(deleted.status().to_string());
  fmt::print("deleted {} rows older than {}\n", *deleted, utc_stamp(cutoff).view());
}

}  // namespace

void add_logs_command(CLI::App& app) {
  auto args = std::make_shared<LogsArgs>();
  auto prune_args = std::make_shared<PruneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "logs", "Show the logs table, newest first, in one short read of the database");
  cmd->add_option("--db", args->db,
                  "SQLite database file with a logs table (read once: the rows shown, or a "
                  "snapshot copy above --limit 10000)");
  cmd->add_option("--pg", args->pg,
                  "PostgreSQL URL instead of --db: read the logs table on a read-only session");
  cmd->add_option("--since", args->since,
                  "Only rows at or after this UTC time (2026-09-11T06:20:00.000Z or a prefix)");
  cmd->add_option("--level", args->level, "Lowest level shown: INFO, WARN or ERROR")
      ->capture_default_str();
  cmd->add_option("--context", args->context, "Only rows with this context tag");
  cmd->add_option("--limit", args->limit, "At most this many rows")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();

  CLI::App* prune = cmd->add_subcommand(
      "prune", "Delete old rows in small batches (short transactions), printing how many");
  CLI::Option* prune_db =
      prune->add_option("--db", prune_args->db, "SQLite database file with a logs table");
  CLI::Option* prune_pg =
      prune->add_option("--pg", prune_args->pg, "PostgreSQL URL instead of --db");
  prune_db->excludes(prune_pg);
  prune->add_option("--older-than", prune_args->older_than, "Age of the rows to delete: 90d, 12h")
      ->required();
  prune->add_option("--batch-size", prune_args->batch_size, "Rows per transaction")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  prune->callback([prune_args] { run_prune(*prune_args); });

  cmd->callback([cmd, prune, args] {
    if (cmd->got_subcommand(prune)) return;
    run_logs(*args);
  });
}

}  // namespace holdfast::cli
