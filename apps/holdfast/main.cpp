// holdfast: the command-line tool. One subcommand per file; see commands.hpp.
//
// Exit status: 0 done; 2 a wrong flag or value (one line on stderr); 1 anything else that
// went wrong, exceptions included (one line on stderr, never an abort).
#include <sqlite3.h>
#include <CLI/CLI.hpp>

#include <exception>

#include <fmt/core.h>

#include "commands.hpp"

int main(int argc, char** argv) {
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
      fmt::print(stderr, "error: {} (see {} --help)\n", e.what(), argv[0]);
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (...) {
    fmt::print(stderr, "error: an unexpected failure (not a std::exception)\n");
    return 1;
  }
}
