// holdfast: the command-line tool. One subcommand per file; see commands.hpp.
#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"holdfast: keep a service answering while its database is busy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "holdfast 0.1.0");

  holdfast::cli::add_classify_command(app);
  holdfast::cli::add_panel_command(app);
  holdfast::cli::add_drill_command(app);
  holdfast::cli::add_sim_command(app);
  holdfast::cli::add_logs_command(app);

  CLI11_PARSE(app, argc, argv);
  return 0;
}
