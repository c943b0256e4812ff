// `holdfast panel`: the demo court-booking panel on a SQLite file, or on PostgreSQL.
//
//   $ holdfast panel --db club.db --port 8080
//   panel (holdfast) on http://127.0.0.1:8080/login — sign in as Ada.Nowak@club.example / demo
//   $ holdfast panel --pg postgresql://app@127.0.0.1:5432/club
//
//   or open http://127.0.0.1:8080/login/link?token=...   (a one-time sign-in link)
//
// holdfast logs to the logs table of the same database (SQLite or PostgreSQL) through the
// overload-aware DatabaseSink; on PostgreSQL the baselines log to the console only.
//
// Stops on Ctrl-C (SIGINT), SIGTERM or SIGHUP, with exit status 0. A stdout or stderr that
// cannot be written (a pipe whose reader went away, a full disk) does not stop it: the lines
// are dropped (main() ignores SIGPIPE; the console never throws) and it keeps serving.
#include <fmt/core.h>
#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sqlite3.h>

#include "club_store.hpp"
#include "commands.hpp"
#ifdef HOLDFAST_HAVE_PG
#include "holdfast/pg/url.hpp"
#endif
#include "logging.hpp"
#include "safe_print.hpp"
#include "server.hpp"
#include "validators.hpp"

namespace holdfast::cli {
namespace {

struct PanelArgs {
  std::string db = "club.db";
  std::string pg;
  std::vector<std::string> pg_replicas;
  std::string pg_logs;  // empty: args.pg
  std::string pg_pooling = "session";
  std::string host = "127.0.0.1";
  std::vector<std::string> allowed_hosts;
  int port = 8080;
  int workers = 16;  // database-bound requests served at once
  std::string strategy = "holdfast";
  bool secure_cookies = false;
  bool check = false;
  double log_pause_s = 30;  // the origin's
};

// `PRAGMA quick_check` on the SQLite file: OK, or a Status quoting what SQLite found.
Status quick_check(const std::string& path) {
  sqlite3* db = nullptr;
  std::string problems;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* stmt = nullptr;
  if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &stmt, nullptr);
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) break;
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    const std::string line = text != nullptr ? text : "";
    if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
  }
  if (rc != SQLITE_DONE && problems.empty()) problems = sqlite3_errstr(rc);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  if (problems.empty()) return Status();
  return Status(Code::kDataLoss,
                fmt::format("PRAGMA quick_check on {} failed: {}", path, problems.substr(0, 500)));
}

// Why --db `path` cannot be the panel's SQLite file, or "" when it can: a regular file, or a
// name where one will be created. A device (/dev/null, a disk), a FIFO or a directory is
// refused before SQLite opens it: writing the club into a block device, or waiting on a FIFO,
// is never what was meant.
std::string not_a_database_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // missing: created; other errors: open's
  if (S_ISREG(st.st_mode)) return {};
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  return fmt::format(
      "--db '{}' is {}: name a SQLite database file, or a path where one may be "
      "created",
      path, kind);
}

void run_panel(const PanelArgs& args) {
  panel::Strategy strategy;
  if (!baselines::parse_strategy(args.strategy, strategy)) {
    eprint("error: unknown --strategy '{}' ({})\n", args.strategy, baselines::strategy_names());
    throw CLI::RuntimeError(2);
  }
  if (args.pg.empty()) {
    if (const std::string why = not_a_database_file(args.db); !why.empty()) {
      eprint("error: {}\n", why);
      throw CLI::RuntimeError(2);
    }
  }
  // Wait for SIGINT/SIGTERM/SIGHUP on this thread; block them before the server's threads
  // start. Each stops the panel cleanly (its private folder removed) with exit status 0.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  panel::ClubStore::Options store_options;
  store_options.path = args.db;
  store_options.pg_url = args.pg;
  store_options.pg_replica_urls = args.pg_replicas;
  store_options.pg_transaction_pooling = args.pg_pooling == "transaction";
  store_options.strategy = strategy;
  Result<std::unique_ptr<panel::ClubStore>> store = panel::ClubStore::open(store_options);
  if (!store.ok()) {
    eprint("error: {}\n", store.status().to_string());
    throw CLI::RuntimeError(1);
  }
  if (args.check) {
    if (Status s = quick_check(args.db); !s.ok()) {
      eprint("error: {}; not starting (restore a backup, or start without --check)\n", s.message());
      throw CLI::RuntimeError(1);
    }
  }
  const std::string today(utc_stamp(WallClock::system().now()).view().substr(0, 10));
  if (Status s = (*store)->ensure_demo_data(today); !s.ok()) {
    eprint("error: {}\n", s.to_string());
    throw CLI::RuntimeError(1);
  }
  const auto log_pause =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(args.log_pause_s));
  Result<panel::PanelLogging> logging =
      args.pg.empty() ? panel::make_logging(args.db, strategy, Clock::system(), true, log_pause)
                      : panel::make_logging_pg(args.pg_logs.empty() ? args.pg : args.pg_logs,
                                               strategy, Clock::system(), true, log_pause);
  if (!logging.ok()) {
    eprint("error: {}\n", logging.status().to_string());
    throw CLI::RuntimeError(1);
  }
  panel::PanelServer::Options server_options;
  server_options.host = args.host;
  server_options.port = args.port;
  server_options.allowed_hosts = args.allowed_hosts;
  server_options.store = store->get();
  server_options.logger = logging->logger.get();
  server_options.log_sink = logging->sink.get();
  server_options.lane_logs = logging->lane_store;
  server_options.secure_cookies = args.secure_cookies;
  server_options.threads = args.workers;
  panel::PanelServer server(server_options);
  if (Status s = server.start(); !s.ok()) {
    eprint("error: {}\n", s.to_string());
    throw CLI::RuntimeError(1);
  }
#ifdef HOLDFAST_HAVE_PG
  const std::string where =
      args.pg.empty() ? std::string() : ", PostgreSQL " + holdfast::pg::redact_password(args.pg);
#else
  const std::string where;  // without libpq no store opens on a PostgreSQL URL
#endif
  // The panel's own lines go to stdout or nowhere: a closed or full stdout must not stop it.
  print_or_drop(stdout,
                "panel ({}{}) on http://{}:{}/login - sign in as Ada.Nowak@club.example / demo\n",
                args.strategy, where, args.host, server.port());
  // A one-time link that signs the demo user in (valid for 10 minutes).
  Result<std::optional<std::int64_t>> demo = (*store)->user_id_by_email("Ada.Nowak@club.example");
  if (demo.ok() && demo->has_value()) {
    print_or_drop(stdout, "or open http://{}:{}{}\n", args.host, server.port(),
                  server.issue_sign_in_link(**demo));
  }
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  print_or_drop(stdout, "stopping\n");
  // Written (or dropped) here, so that main() finds nothing of the panel's left to report.
  (void)std::fflush(stdout);
  server.stop();
}

}  // namespace

void add_panel_command(CLI::App& app) {
  auto args = std::make_shared<PanelArgs>();
  CLI::App* cmd = app.add_subcommand("panel", "Run the demo court-booking panel");
  CLI::Option* db =
      cmd->add_option("--db", args->db, "SQLite database file (created with demo data)")
          ->check(not_empty("--db"))
          ->capture_default_str();
  CLI::Option* pg = cmd->add_option("--pg", args->pg,
                                    "Run on PostgreSQL instead: a connection URL "
                                    "(postgresql://user[:password]@host:port/dbname); the demo "
                                    "data is created in it if missing. Not with --db")
                        ->check(not_empty("--pg"));
  db->excludes(pg);
  pg->excludes(db);
  cmd->add_option("--pg-replica", args->pg_replicas,
                  "A hot standby of --pg the reads prefer when it has replayed the user's own "
                  "writes (repeat for several)")
      ->check(not_empty("--pg-replica"))
      ->needs(pg);
  // The log store sets its timeouts at connect, which a pooler in transaction mode refuses.
  cmd->add_option("--pg-logs", args->pg_logs,
                  "Where holdfast's log table lives, when not at --pg (e.g. the server itself "
                  "while --pg goes through PgBouncer)")
      ->check(not_empty("--pg-logs"))
      ->needs(pg);
  cmd->add_option("--pg-pooling", args->pg_pooling,
                  "session, or transaction when the URLs reach a pooler in transaction mode "
                  "(PgBouncer's pool_mode = transaction)")
      ->check(CLI::IsMember({"session", "transaction"}))
      ->needs(pg)
      ->capture_default_str();
  cmd->add_option("--host", args->host, "Address to listen on")
      ->check(not_empty("--host"))
      ->capture_default_str();
  cmd->add_option("--allow-host", args->allowed_hosts,
                  "A name the panel answers for besides localhost, 127.0.0.1, [::1] and --host "
                  "(NAME for any port, or NAME:PORT; repeat for several). Requests naming another "
                  "Host get 421 (DNS rebinding)")
      ->check(not_empty("--allow-host"));
  cmd->add_option("--port", args->port, "Port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--workers", args->workers,
                  "Threads that serve database-bound requests at once (light routes such as "
                  "/healthz have 4 of their own); more wait in a queue of 64, then get 503. "
                  "With the holdfast strategy those requests run instead on an async lane "
                  "whose waits hold no thread (docs/hardening.md)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_flag("--secure-cookies", args->secure_cookies,
                "Mark the session cookie Secure (behind TLS: a proxy that terminates HTTPS)");
  CLI::Option* check =
      cmd->add_flag("--check", args->check,
                    "SQLite: run PRAGMA quick_check at start and refuse to start if it fails");
  check->excludes(pg);
  cmd->add_option("--log-pause", args->log_pause_s,
                  "Seconds holdfast's logger stops writing to the logs table after the database "
                  "refuses a batch (the console still gets every line)")
      ->check(seconds_in(3600))
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy,
                  "holdfast, or a baseline: none, naive, backoff, origin-breaker")
      ->capture_default_str();
  cmd->callback([args] { run_panel(*args); });
}

}  // namespace holdfast::cli
