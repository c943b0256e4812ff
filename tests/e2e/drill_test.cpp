// The drill itself, on a short configuration, asserting on its JSON report.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drill.hpp"

namespace holdfast::panel {
namespace {

namespace fs = std::filesystem;

TEST(Drill, HoldfastShowsNoErrorPagesForTwoSecondStorms) {
  DrillOptions o;
  o.strategies = {Strategy::kNone, Strategy::kHoldfast};
  o.storms = {{StormKind::kWrite, 2.0}, {StormKind::kRead, 2.0}};
  o.workers = 3;
  o.warmup_s = 1.0;
  o.gap_s = 2.0;
  o.log_tail_s = 0.0;
  o.progress = false;
  o.out_dir =
      (fs::temp_directory_path() / ("holdfast-drill-test-" + std::to_string(::getpid()))).string();
  Result<DrillResult> result = run_drill(o);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  ASSERT_TRUE(write_drill_reports(o, *result).ok());

  std::ifstream in(fs::path(o.out_dir) / "drill-report.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["storms"].size(), 2u);
  for (const auto& storm : j["storms"]) {
    EXPECT_EQ(storm["seconds"], 2.0);
    bool saw_holdfast = false;
    for (const auto& s : storm["strategies"]) {
      for (const char* key :
           {"name", "requests", "error_pages", "status_503", "stale", "p50_ms", "p99_ms", "max_ms",
            "attempts_per_request", "log_rows_during_storm", "gap_line"}) {
        EXPECT_TRUE(s.contains(key)) << key;
      }
      if (s["name"] == "holdfast") {
        saw_holdfast = true;
        EXPECT_GT(s["requests"].get<int>(), 0);
        EXPECT_EQ(s["error_pages"].get<int>(), 0) << storm.dump();
        // DESIGN.md's bar: every request started during a short lock gets a fresh page.
        EXPECT_EQ(s["served_during_storm_pct"].get<double>(), 100.0) << storm.dump();
      }
    }
    EXPECT_TRUE(saw_holdfast);
  }
  EXPECT_EQ(j["payments_applied_twice"], 0);
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "drill-report.md"));
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "drill-timeline.svg"));
  fs::remove_all(o.out_dir);
}

// The console table: every row of a storm's table as long as its header, and each column's
// right edge in the same place, whatever the widths of the names and numbers.
TEST(Drill, TheConsoleTablesColumnsLineUp) {
  DrillResult result;
  StormResult storm;
  storm.spec = {StormKind::kWrite, 20};
  StrategyResult small;
  small.name = "none";
  StrategyResult wide;
  wide.name = "origin-breaker-with-a-long-name";
  wide.requests = 123456789;
  wide.error_pages = 7654321;
  wide.served_during_storm_pct = 100;
  wide.back_after_s = 1234.5;
  wide.max_ms = 1234567;
  wide.attempts_per_request = 12345.67;
  wide.log_rows_during_storm = 99999999;
  wide.gap_line = true;
  storm.strategies = {small, wide};
  result.storms = {storm};
  std::istringstream table(drill_table(result));
  std::vector<std::string> rows;
  for (std::string line; std::getline(table, line);) {
    if (line.rfind("  ", 0) == 0) rows.push_back(line);
  }
  ASSERT_EQ(rows.size(), 3u);
  for (const std::string& row : rows)
    EXPECT_EQ(row.size(), rows[0].size()) << row;
  // Columns are two spaces apart: a cell never runs into the next one.
  EXPECT_NE(rows[0].find("max ms  attempts/r"), std::string::npos) << rows[0];
  // Right-aligned: a header ends where its cells end.
  EXPECT_EQ(rows[0].find("attempts/r") + 10, rows[2].find("12345.67") + 8) << rows[2];
  EXPECT_EQ(rows[0].find("max ms") + 6, rows[2].find("1234567 ") + 7) << rows[2];
}

}  // namespace
}  // namespace holdfast::panel
