// The holdfast command-line tool's subcommands.
//
// Each subcommand lives in its own .cpp file and exposes one function that registers it
// on the application: its options, its help text and its callback. main.cpp calls every
// add_*_command(). To add one: write <name>.cpp with add_<name>_command(), declare it
// here, call it from main.cpp, and list the file (and the libraries it needs) in
// apps/holdfast/CMakeLists.txt.
//
// A callback reports failure by throwing CLI::RuntimeError(exit_code) after printing its
// own message; main() turns that into the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace holdfast::cli {

// holdfast classify --db FILE "SQL" | --pg URL "SQL": is the statement a read (retried) or
// a write?
void add_classify_command(CLI::App& app);
// The PostgreSQL form (classify_pg.cpp): prints read/write/error first; the exit code.
int classify_pg_sql(const std::string& url, const std::string& sql);

// holdfast panel: the demo court-booking panel (apps/panel).
void add_panel_command(CLI::App& app);

// holdfast drill: the origin's incident replayed, every strategy side by side.
void add_drill_command(CLI::App& app);

// holdfast sim: retry storms and metastable failure, simulated with the real policy code.
void add_sim_command(CLI::App& app);

// holdfast logs --db FILE [--since T] [--level L] [--context C] [--limit N]: the logs table,
// newest first, in one short read; holdfast logs prune --db FILE --older-than 90d.
void add_logs_command(CLI::App& app);

// holdfast report drill-report.json [--summary] [--into PAGE.md]: the drill's tables as
// Markdown, printed or written into a page's generated blocks (report_cmd.cpp).
void add_report_command(CLI::App& app);

}  // namespace holdfast::cli
