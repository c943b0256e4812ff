// The drill's tables as Markdown, rendered from drill-report.json (what `holdfast drill`
// writes; apps/drill/drill_report.cpp), so the docs' numbers are never typed by hand.
//
//   nlohmann::json report = nlohmann::json::parse(file);
//   std::string md = holdfast::cli::drill_tables_markdown(report);   // docs/drill.md
//   std::string row = holdfast::cli::drill_summary_markdown(report); // the README's table
//
// The renderer knows the fields the drill writes today (their headers, units and which
// engine shows them) and shows any other field of a strategy's entry too, after the known
// ones, headed by its JSON name: a field the drill adds tomorrow appears without a change
// here. A field whose name ends in _pct is shown as a percentage, _ms as milliseconds, _s as
// seconds; other numbers as they are (integers) or with two decimals.
//
// Generated blocks in a Markdown page sit between two comment lines naming what they hold:
//   <!-- begin drill tables (sqlite): ... -->      <!-- end drill tables (sqlite) -->
//   <!-- begin drill summary (sqlite): ... -->     <!-- end drill summary (sqlite) -->
// replace_generated_blocks() swaps their contents for a new rendering of a report of that
// engine; the begin line (which names the command that regenerates it) is kept. A marker
// counts only at the start of a line, so prose may quote one.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace holdfast::cli {

// One table per storm (or fault): a row per strategy, with every field of its entry; then
// the payments line. Headings are level 3 ("### write lock storm, 5 s").
// Throws nlohmann::json::exception when the report lacks "storms".
[[nodiscard]] std::string drill_tables_markdown(const nlohmann::json& report);

// One short table: a row per strategy, a column per storm with its error pages and p99
// ("0 · 5.0 s"), then the payments line.
[[nodiscard]] std::string drill_summary_markdown(const nlohmann::json& report);

// `page` with the contents of its generated blocks for the report's engine replaced by a
// new rendering; `replaced` (when not null) is set to how many blocks were. A begin line
// without its end line is left alone.
[[nodiscard]] std::string replace_generated_blocks(const std::string& page,
                                                   const nlohmann::json& report,
                                                   int* replaced = nullptr);

}  // namespace holdfast::cli
