#include "drill_markdown.hpp"

#include <algorithm>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace holdfast::cli {
namespace {

using nlohmann::json;

enum class Unit { kText, kCount, kRatio, kPct, kSeconds, kMs, kYesNo };
enum class Show { kAll, kPostgres, kNever };

struct Column {
  std::string key;
  std::string header;
  Unit unit = Unit::kText;
};

// The fields drill_report.cpp writes today, in the order the tables show them. kNever: in
// the JSON for those who look, left out of the tables to keep them readable.
struct Known {
  std::string_view key;
  std::string_view header;
  Unit unit;
  Show show;
};
constexpr Known kKnown[] = {
    {"name", "strategy", Unit::kText, Show::kAll},
    {"requests", "requests", Unit::kCount, Show::kAll},
    {"error_pages", "error pages", Unit::kCount, Show::kAll},
    {"status_503", "503", Unit::kCount, Show::kAll},
    {"stale", "stale", Unit::kCount, Show::kAll},
    {"served_during_storm_pct", "served during storm", Unit::kPct, Show::kAll},
    {"back_after_s", "back after", Unit::kSeconds, Show::kAll},
    {"p50_ms", "p50 ms", Unit::kMs, Show::kAll},
    {"p99_ms", "p99 ms", Unit::kMs, Show::kAll},
    {"max_ms", "max ms", Unit::kMs, Show::kAll},
    {"unanswered", "unanswered", Unit::kCount, Show::kAll},
    {"fast_answers_pct", "fast answers", Unit::kPct, Show::kAll},
    {"attempts_per_request", "attempts/request", Unit::kRatio, Show::kAll},
    {"attempts_per_page", "attempts/page", Unit::kRatio, Show::kPostgres},
    {"attempts_per_call", "attempts/call", Unit::kRatio, Show::kPostgres},
    {"primary_attempts_per_request", "primary attempts/request", Unit::kRatio, Show::kPostgres},
    {"open_breaker_answers", "answers while breaker open", Unit::kCount, Show::kPostgres},
    {"open_breaker_p99_ms", "their p99 ms", Unit::kMs, Show::kPostgres},
    {"open_breaker_max_ms", "their max ms", Unit::kMs, Show::kPostgres},
    {"status_503_max_ms", "slowest 503 ms", Unit::kMs, Show::kPostgres},
    {"stale_reads_after_write", "reads missing own payment", Unit::kCount, Show::kPostgres},
    {"log_rows_during_storm", "log rows during storm", Unit::kCount, Show::kAll},
    {"gap_line", "gap line", Unit::kYesNo, Show::kAll},
    {"attempts_during_storm", "attempts during the fault", Unit::kCount, Show::kPostgres},
    {"processes", "", Unit::kCount, Show::kNever},
    {"served", "", Unit::kCount, Show::kNever},
    {"standby_attempts_per_request", "", Unit::kRatio, Show::kNever},
    {"any_open_breaker_answers", "", Unit::kCount, Show::kNever},
    {"any_open_breaker_p99_ms", "", Unit::kMs, Show::kNever},
    {"any_open_breaker_max_ms", "", Unit::kMs, Show::kNever},
};

bool is_postgres(const json& report) {
  return report.value("engine", "sqlite") == "postgres";
}

// A field the renderer does not know: its unit from its name's ending.
Unit unit_of_unknown(std::string_view key, const json& value) {
  if (value.is_boolean()) return Unit::kYesNo;
  if (!value.is_number()) return Unit::kText;
  if (key.ends_with("_pct")) return Unit::kPct;
  if (key.ends_with("_ms")) return Unit::kMs;
  if (key.ends_with("_s")) return Unit::kSeconds;
  return value.is_number_integer() ? Unit::kCount : Unit::kRatio;
}

std::string cell(const json& value, Unit unit) {
  if (value.is_null()) return "-";
  if (value.is_boolean()) return value.get<bool>() ? "yes" : "no";
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_number()) return "-";
  const double v = value.get<double>();
  switch (unit) {
    case Unit::kPct:
      return fmt::format("{:.0f} %", v);
    case Unit::kSeconds:
      return fmt::format("{:.1f} s", v);
    case Unit::kMs:
      return fmt::format("{:.0f}", v);
    case Unit::kRatio:
      return fmt::format("{:.2f}", v);
    default:
      return value.is_number_integer() ? fmt::format("{}", value.get<std::int64_t>())
                                       : fmt::format("{:.2f}", v);
  }
}

bool left_aligned(Unit unit) {
  return unit == Unit::kText || unit == Unit::kYesNo;
}

// The columns of every table of the report: the known fields any entry has (those its
// engine shows), then every other scalar field, in the order they first appear.
std::vector<Column> columns_of(const json& report) {
  const bool pg = is_postgres(report);
  auto present = [&](std::string_view key) {
    for (const json& storm : report.at("storms")) {
      for (const json& s : storm.value("strategies", json::array()))
        if (s.contains(key)) return true;
    }
    return false;
  };
  std::vector<Column> columns;
  for (const Known& k : kKnown) {
    const bool shown = k.show == Show::kAll || (k.show == Show::kPostgres && pg);
    if (shown && present(k.key))
      columns.push_back({std::string(k.key), std::string(k.header), k.unit});
  }
  auto known = [](std::string_view key) {
    return std::any_of(std::begin(kKnown), std::end(kKnown),
                       [&](const Known& k) { return k.key == key; });
  };
  for (const json& storm : report.at("storms")) {
    for (const json& s : storm.value("strategies", json::array())) {
      for (const auto& [key, value] : s.items()) {
        if (known(key) || value.is_structured()) continue;
        if (std::none_of(columns.begin(), columns.end(),
                         [&](const Column& c) { return c.key == key; }))
          columns.push_back({key, key, unit_of_unknown(key, value)});
      }
    }
  }
  return columns;
}

// "write lock storm, 5 s" on SQLite, "stop fault, 15 s" on PostgreSQL.
std::string storm_title(const json& report, const json& storm) {
  return fmt::format("{} {}, {:g} s", storm.value("kind", "?"),
                     is_postgres(report) ? "fault" : "lock storm", storm.value("seconds", 0.0));
}

std::string payments_line(const json& report) {
  return fmt::format("Payments sent: {}; applied twice: {}.\n",
                     cell(report.value("payments_sent", json()), Unit::kCount),
                     cell(report.value("payments_applied_twice", json()), Unit::kCount));
}

std::string table_row(const std::vector<std::string>& cells) {
  std::string row = "|";
  for (const std::string& c : cells)
    row += " " + c + " |";
  return row + "\n";
}

}  // namespace

std::string drill_tables_markdown(const json& report) {
  const std::vector<Column> columns = columns_of(report);
  std::vector<std::string> header, rule;
  for (const Column& c : columns) {
    header.push_back(c.header);
    rule.push_back(left_aligned(c.unit) ? "---" : "---:");
  }
  std::string md;
  for (const json& storm : report.at("storms")) {
    md += fmt::format("### {}\n\n", storm_title(report, storm));
    md += table_row(header);
    md += fmt::format("|{}|\n", fmt::join(rule, "|"));
    for (const json& s : storm.value("strategies", json::array())) {
      std::vector<std::string> cells;
      for (const Column& c : columns)
        cells.push_back(cell(s.value(c.key, json()), c.unit));
      md += table_row(cells);
    }
    md += "\n";
  }
  return md + payments_line(report);
}

std::string drill_summary_markdown(const json& report) {
  const json& storms = report.at("storms");
  std::vector<std::string> names;  // in the order of the first storm that has them
  for (const json& storm : storms) {
    for (const json& s : storm.value("strategies", json::array())) {
      const std::string name = s.value("name", "?");
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::vector<std::string> header = {"strategy"}, rule = {"---"};
  for (const json& storm : storms) {
    header.push_back(
        fmt::format("{} {:g} s", storm.value("kind", "?"), storm.value("seconds", 0.0)));
    rule.push_back("---:");
  }
  std::string md = table_row(header) + fmt::format("|{}|\n", fmt::join(rule, "|"));
  for (const std::string& name : names) {
    std::vector<std::string> cells = {name};
    for (const json& storm : storms) {
      std::string c = "-";
      for (const json& s : storm.value("strategies", json::array())) {
        if (s.value("name", "") != name) continue;
        c = fmt::format("{} / {:.1f} s", cell(s.value("error_pages", json()), Unit::kCount),
                        s.value("p99_ms", 0.0) / 1000.0);
      }
      cells.push_back(c);
    }
    md += table_row(cells);
  }
  md += "\nEach cell: error pages / p99 latency of the storm's requests. ";
  return md + payments_line(report);
}

std::string replace_generated_blocks(const std::string& page, const json& report, int* replaced) {
  const std::string engine = report.value("engine", "sqlite");
  struct Kind {
    std::string what;
    std::string body;
  };
  const Kind kinds[] = {{"drill tables", drill_tables_markdown(report)},
                        {"drill summary", drill_summary_markdown(report)}};
  std::string out = page;
  int count = 0;
  // A marker counts only at the start of a line: a page may quote one in its prose.
  auto line_start = [&out](const std::string& marker, std::size_t from) {
    for (std::size_t at = out.find(marker, from); at != std::string::npos;
         at = out.find(marker, at + 1)) {
      if (at == 0 || out[at - 1] == '\n') return at;
    }
    return std::string::npos;
  };
  for (const Kind& k : kinds) {
    const std::string begin = fmt::format("<!-- begin {} ({})", k.what, engine);
    const std::string end = fmt::format("<!-- end {} ({})", k.what, engine);
    std::size_t from = 0;
    while ((from = line_start(begin, from)) != std::string::npos) {
      const std::size_t body = out.find('\n', from);
      const std::size_t to = body == std::string::npos ? body : line_start(end, body);
      if (to == std::string::npos) break;
      const std::string fresh = fmt::format("\n{}\n", k.body);
      out.replace(body + 1, to - body - 1, fresh);
      from = body + 1 + fresh.size() + end.size();
      ++count;
    }
  }
  if (replaced != nullptr) *replaced = count;
  return out;
}

}  // namespace holdfast::cli
