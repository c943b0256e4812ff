// The drill's Markdown tables are rendered from drill-report.json alone (holdfast report).
#include "drill_markdown.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using holdfast::cli::drill_summary_markdown;
using holdfast::cli::drill_tables_markdown;
using holdfast::cli::replace_generated_blocks;
using nlohmann::json;

// Two strategies of one SQLite storm, with the fields the drill writes today (some of them)
// and one the renderer does not know (`queue_depth`), plus a PostgreSQL-only field.
json small_sqlite_report() {
  return json::parse(R"({
    "engine": "sqlite", "payments_sent": 12, "payments_applied_twice": 0,
    "storms": [{"kind": "write", "seconds": 5, "strategies": [
      {"name": "none", "requests": 40, "error_pages": 3, "status_503": 0, "stale": 0,
       "served_during_storm_pct": 62.4, "back_after_s": 0.04, "p50_ms": 1.2, "p99_ms": 5012.7,
       "max_ms": 5100, "attempts_per_request": 6.4, "attempts_per_call": 1.0,
       "log_rows_during_storm": 2, "gap_line": false, "processes": 1, "unanswered": 4,
       "queue_depth": 7},
      {"name": "holdfast", "requests": 48, "error_pages": 0, "status_503": 1, "stale": 2,
       "served_during_storm_pct": 100, "back_after_s": 0, "p50_ms": 1, "p99_ms": 4876,
       "max_ms": 5286, "attempts_per_request": 6.31, "attempts_per_call": 1.0,
       "log_rows_during_storm": 0, "gap_line": true, "processes": 1, "unanswered": 0,
       "queue_depth": 0}
    ]}]})");
}

TEST(DrillMarkdown, AStormBecomesATableWithEveryFieldANewOneIncluded) {
  EXPECT_EQ(drill_tables_markdown(small_sqlite_report()),
            "### write lock storm, 5 s\n"
            "\n"
            "| strategy | requests | error pages | 503 | stale | served during storm | back after "
            "| p50 ms | p99 ms | max ms | unanswered | attempts/request | log rows during storm "
            "| gap line | queue_depth |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n"
            "| none | 40 | 3 | 0 | 0 | 62 % | 0.0 s | 1 | 5013 | 5100 | 4 | 6.40 | 2 | no | 7 |\n"
            "| holdfast | 48 | 0 | 1 | 2 | 100 % | 0.0 s | 1 | 4876 | 5286 | 0 | 6.31 | 0 | yes "
            "| 0 |\n"
            "\n"
            "Payments sent: 12; applied twice: 0.\n");
}

TEST(DrillMarkdown, PostgresShowsItsOwnColumnsAndCallsStormsFaults) {
  json report = small_sqlite_report();
  report["engine"] = "postgres";
  report["storms"][0]["kind"] = "stop";
  report["storms"][0]["seconds"] = 15;
  const std::string md = drill_tables_markdown(report);
  EXPECT_NE(md.find("### stop fault, 15 s\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| attempts/request | attempts/call | log rows during storm |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 6.40 | 1.00 | 2 | no | 7 |"), std::string::npos) << md;
}

TEST(DrillMarkdown, NewFieldsAreFormattedByTheirNamesEnding) {
  json report = small_sqlite_report();
  report["storms"][0]["strategies"][0]["fast_answers_pct"] = 97.4;
  report["storms"][0]["strategies"][0]["slowest_wait_ms"] = 812.4;
  const std::string md = drill_tables_markdown(report);
  // After the known fields, the others in the JSON object's (alphabetical) order.
  EXPECT_NE(md.find("| max ms | unanswered | fast answers |"), std::string::npos) << md;
  EXPECT_NE(md.find("| gap line | queue_depth | slowest_wait_ms |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 5100 | 4 | 97 % |"), std::string::npos) << md;
  EXPECT_NE(md.find("| no | 7 | 812 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 5286 | 0 | - |"), std::string::npos) << md;  // holdfast lacks two
  EXPECT_NE(md.find("| yes | 0 | - |"), std::string::npos) << md;
}

TEST(DrillMarkdown, TheSummaryIsErrorPagesAndP99PerStrategyAndStorm) {
  EXPECT_EQ(drill_summary_markdown(small_sqlite_report()),
            "| strategy | write 5 s |\n"
            "|---|---:|\n"
            "| none | 3 / 5.0 s |\n"
            "| holdfast | 0 / 4.9 s |\n"
            "\n"
            "Each cell: error pages / p99 latency of the storm's requests. "
            "Payments sent: 12; applied twice: 0.\n");
}

TEST(DrillMarkdown, GeneratedBlocksOfTheReportsEngineAreReplacedAndNothingElse) {
  const std::string page =
      "# Drill\n"
      "Prose may quote `<!-- begin drill summary (sqlite) -->`.\n"
      "<!-- begin drill summary (sqlite): holdfast report --into page.md r.json -->\n"
      "old numbers\n"
      "<!-- end drill summary (sqlite) -->\n"
      "kept\n"
      "<!-- begin drill summary (postgres): another run -->\n"
      "postgres numbers\n"
      "<!-- end drill summary (postgres) -->\n";
  int replaced = 0;
  const std::string out = replace_generated_blocks(page, small_sqlite_report(), &replaced);
  EXPECT_EQ(replaced, 1);
  EXPECT_EQ(out,
            "# Drill\n"
            "Prose may quote `<!-- begin drill summary (sqlite) -->`.\n"
            "<!-- begin drill summary (sqlite): holdfast report --into page.md r.json -->\n"
            "\n" +
                drill_summary_markdown(small_sqlite_report()) +
                "\n"
                "<!-- end drill summary (sqlite) -->\n"
                "kept\n"
                "<!-- begin drill summary (postgres): another run -->\n"
                "postgres numbers\n"
                "<!-- end drill summary (postgres) -->\n");
  EXPECT_EQ(replace_generated_blocks(out, small_sqlite_report()), out);  // idempotent
}

}  // namespace
