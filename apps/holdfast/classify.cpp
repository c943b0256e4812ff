// `holdfast classify --db FILE "SQL"`: says whether holdfast treats a statement as a read
// (retried on read connections opened with PRAGMA query_only=1) or a write, and why.
//
//   $ holdfast classify --db club.db "SELECT * FROM games WHERE day = ?"
//   read because one statement the engine reports as read-only (sqlite3_stmt_readonly), ...
//   $ holdfast classify --db club.db "PRAGMA foreign_keys=OFF"
//   write because a PRAGMA with an argument may change the connection ...
//   $ holdfast classify --db club.db "SELEC 1"
//   error cannot prepare 'SELEC 1': near "SELEC": syntax error      (exit code 1)
//
// The first word is "read", "write" or "error", for scripts. The file is opened read-only and never
// changed; it must exist (":memory:" classifies against an empty schema).
#include <fmt/core.h>

#include <chrono>
#include <memory>
#include <string>

#include "commands.hpp"
#include "holdfast/sqlite.hpp"

namespace holdfast::cli {
namespace {

struct ClassifyArgs {
  std::string db;
  std::string pg;
  std::string sql;
};

void run_classify(const ClassifyArgs& args) {
  if (args.db.empty() && args.pg.empty()) {
    fmt::print("error name the database: --db FILE (SQLite) or --pg URL (PostgreSQL)\n");
    throw CLI::RuntimeError(2);
  }
  if (!args.pg.empty()) {
#ifdef HOLDFAST_HAVE_PG
    if (int rc = classify_pg_sql(args.pg, args.sql); rc != 0) throw CLI::RuntimeError(rc);
    return;
#else
    fmt::print("error this holdfast was built without PostgreSQL support (libpq)\n");
    throw CLI::RuntimeError(1);
#endif
  }
  sqlite::Options options;
  options.path = args.db;
  options.read_only = args.db != ":memory:";
  options.create = false;
  options.journal_mode = sqlite::JournalMode::kKeep;
  options.read_connections = 1;
  options.busy_timeout = std::chrono::seconds(2);

  Result<sqlite::Database> db = sqlite::Database::open(options);
  if (!db.ok()) {
    fmt::print("error {}\n", db.status().message());
    throw CLI::RuntimeError(1);
  }
  Result<sqlite::AccessVerdict> verdict = db->judge_access(args.sql);
  if (!verdict.ok()) {
    fmt::print("error {}\n", verdict.status().message());
    throw CLI::RuntimeError(1);
  }
  fmt::print("{} because {}\n", sqlite::to_string(verdict->access), verdict->reason());
}

}  // namespace

void add_classify_command(CLI::App& app) {
  auto args = std::make_shared<ClassifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "classify", "Say whether a statement is a read (retried) or a write, and why");
  CLI::Option* db = cmd->add_option("--db", args->db, "SQLite database file (opened read-only)");
  CLI::Option* pg = cmd->add_option(
      "--pg", args->pg, "PostgreSQL connection URL (the statement is parsed, never run)");
  db->excludes(pg);
  pg->excludes(db);
  cmd->add_option("sql", args->sql, "One SQL statement")->required();
  cmd->callback([args] { run_classify(*args); });
}

}  // namespace holdfast::cli
