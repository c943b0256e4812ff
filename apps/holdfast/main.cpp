// holdfast: the command-line tool. One subcommand per file; see commands.hpp.
//
// Exit status: 0 done; 2 a wrong flag or value (one line on stderr); 1 anything else that
// went wrong, exceptions included (one line on stderr, never an abort). Output that cannot be
// written (a reader that went away, a full disk) is 1 as well: silently for a closed pipe,
// since its reader chose to stop reading.
#include <sqlite3.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <system_error>

#include <fmt/core.h>

#include "commands.hpp"
#include "safe_print.hpp"

int main(int argc, char** argv) {
  // First of all, before any thread or file exists: a write to a pipe whose reader has gone
  // (`holdfast panel 2>&1 | head -2`, then a log line) fails with EPIPE instead of killing the
  // process. Every write handles its failure: a log or error line is dropped, a command's
  // output ends the command with 1. Children spawned later get SIGPIPE back (drill_pg_process).
  (void)std::signal(SIGPIPE, SIG_IGN);
  // Before any other SQLite call: SQLite's allocation statistics take one process-wide mutex
  // on every malloc and free, which the panel's threads contended on (about a tenth of the
  // panel's CPU under load went to it and to the futex waits). The tool reads none of them
  // (sqlite3_memory_used(), a soft heap limit). A failure leaves the statistics on: harmless.
  (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  try {
    CLI::App app{"holdfast: keep a service answering while its database is busy"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "holdfast 0.1.0");

    holdfast::cli::add_classify_command(app);
    holdfast::cli::add_panel_command(app);
    holdfast::cli::add_drill_command(app);
    holdfast::cli::add_sim_command(app);
    holdfast::cli::add_logs_command(app);
    holdfast::cli::add_report_command(app);

    try {
      app.parse(argc, argv);
    } catch (const CLI::Success& e) {
      return app.exit(e);  // --help, --version
    } catch (const CLI::RuntimeError& e) {
      return e.get_exit_code();  // a command's own failure, already reported
    } catch (const CLI::ParseError& e) {
      holdfast::cli::eprint("error: {} (see {} --help)\n", e.what(), argv[0]);
      return 2;
    }
    // The end of the output still in stdout's buffer is written now, while a failure can be
    // told: exit() would write it and ignore the failure.
    if (std::fflush(stdout) != 0) {
      const int error = errno;
      if (error != EPIPE)
        holdfast::cli::eprint("error: cannot write the output: {}\n", std::strerror(error));
      return 1;
    }
    return 0;
  } catch (const std::system_error& e) {
    // Here lands a failed write of a command's output (fmt::print throws fmt::system_error);
    // a closed pipe has no one left to tell.
    if (e.code() != std::errc::broken_pipe) holdfast::cli::eprint("error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    holdfast::cli::eprint("error: {}\n", e.what());
    return 1;
  } catch (...) {
    holdfast::cli::eprint("error: an unexpected failure (not a std::exception)\n");
    return 1;
  }
}
