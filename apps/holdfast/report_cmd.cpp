// `holdfast report`: the drill's tables as Markdown, from the drill-report.json a run wrote,
// so the numbers in the docs are never typed by hand (drill_markdown.hpp).
//
//   $ holdfast report drill-out/drill-report.json             # every table, on stdout
//   $ holdfast report --summary drill-out/drill-report.json   # the README's short table
//   $ holdfast report --into docs/drill.md --into README.md drill-out/drill-report.json
//   $ holdfast report --svg storm.svg --storm 5 --strategies none,holdfast
//   drill-out/drill-report.json
//
// --into rewrites, in place, the generated blocks of each page for the report's engine
// (between "<!-- begin drill tables (sqlite) ..." and "<!-- end drill tables (sqlite) -->",
// and the same for "drill summary") and fails when a page has none. --svg draws one storm
// (1-based, in the report's order) for the chosen strategies from drill-requests.csv, which
// the drill writes beside the report: fresh pages and error pages answered per second.
// Every file read must be a regular file of at most 256 MiB: a FIFO or a device is refused at
// once ("is a FIFO, not a regular file"), never waited on. Errors print "error: ..." on
// stderr and exit with 1.
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "drill_markdown.hpp"
#include "holdfast/core/result.hpp"
#include "safe_print.hpp"
#include "svg_plot.hpp"

namespace holdfast::cli {
namespace {

struct ReportArgs {
  std::string json_path;
  bool summary = false;
  std::vector<std::string> into;
  std::string svg;
  int storm = 1;
  std::vector<std::string> strategies;
};

// Reports, request logs and pages are megabytes at most; past this a file is not one of them.
constexpr std::int64_t kMaxReportInputBytes = std::int64_t{256} << 20;  // 256 MiB

// What a file of `mode` is, when it is not a regular file ("a FIFO").
const char* not_regular_kind(mode_t mode) noexcept {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

// The whole of the regular file `path`. Anything else is refused before a byte is read: a
// FIFO would block the read until some writer came (O_NONBLOCK keeps even the open from
// waiting for one), and /dev/zero would never end.
Result<std::string> read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return Status(error == ENOENT ? Code::kNotFound : Code::kFailedPrecondition,
                  fmt::format("cannot read {}: {}", path, std::strerror(error)));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("{} is {}, not a regular file", path, not_regular_kind(st.st_mode)));
  }
  const auto too_big = [&](std::int64_t size) {
    return Status(Code::kResourceExhausted,
                  fmt::format("{} is {} MiB, more than the {} MiB a report or a page may be", path,
                              size >> 20, kMaxReportInputBytes >> 20));
  };
  if (st.st_size > kMaxReportInputBytes) return too_big(st.st_size);
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status(Code::kFailedPrecondition,
                    fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    if (n == 0) return text;
    text.append(chunk, static_cast<std::size_t>(n));
    // A file that grows while it is read is held to the same cap.
    if (text.size() > static_cast<std::size_t>(kMaxReportInputBytes)) {
      return too_big(static_cast<std::int64_t>(text.size()));
    }
  }
}

// One line of drill-requests.csv:
// strategy,process,kind,start_s,latency_ms,status,stale,own_write_miss,open
struct CsvRequest {
  std::string strategy;
  double start_s = 0;
  double latency_ms = 0;
  int status = 0;
  bool stale = false;
};

std::vector<CsvRequest> parse_requests_csv(const std::string& text) {
  std::vector<CsvRequest> out;
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');)
      f.push_back(c);
    if (f.size() < 7) continue;
    try {
      out.push_back({f[0], std::stod(f[3]), std::stod(f[4]), std::stoi(f[5]), f[6] == "1"});
    } catch (const std::exception&) {
      continue;  // a malformed line says nothing
    }
  }
  return out;
}

// The storm's period (from a little before its start to the next storm's start) in half
// seconds: the fresh pages and the error pages answered in each. holdfast's designed 503s
// (with Retry-After) are drawn dashed beside the errors.
std::string storm_svg(const nlohmann::json& report, const std::vector<CsvRequest>& requests,
                      int storm_index, std::vector<std::string> strategies) {
  const nlohmann::json& storms = report.at("storms");
  const nlohmann::json& storm = storms.at(static_cast<std::size_t>(storm_index - 1));
  const double start = storm.value("start_s", 0.0);
  const double end = storm.value("end_s", start);
  const double to = static_cast<std::size_t>(storm_index) < storms.size()
                        ? storms[static_cast<std::size_t>(storm_index)].value("start_s", end)
                        : end + 3.0;
  const double from = std::max(0.0, start - 3.0);
  constexpr double kBin = 0.5;
  const auto bins = static_cast<std::size_t>(std::ceil((to - from) / kBin));
  if (strategies.empty()) {
    for (const nlohmann::json& s : storm.at("strategies"))
      strategies.push_back(s.value("name", "?"));
  }
  const std::string kind = storm.value("kind", "?");
  svg::LineChart fresh, errors;
  fresh.title = "Fresh pages answered per second";
  errors.title = "Error pages answered per second (dashed: holdfast's 503 with Retry-After)";
  fresh.y.label = "pages/s";
  errors.y.label = "answers/s";
  const bool pg = report.value("engine", "sqlite") == "postgres";
  for (svg::LineChart* c : {&fresh, &errors}) {
    c->x.label = "time since the drill began (s)";
    c->x.min = from;
    c->x.max = to;
    c->height = 260;
    c->spans.push_back(
        {start, end,
         fmt::format("{} {}, {:g} s", kind, pg ? "fault" : "lock", storm.value("seconds", 0.0))});
  }
  constexpr const char* kColours[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd"};
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    const std::string& name = strategies[i];
    std::vector<double> ok(bins, 0), bad(bins, 0), busy(bins, 0);
    for (const CsvRequest& r : requests) {
      if (r.strategy != name) continue;
      const double done = r.start_s + r.latency_ms / 1000.0;
      if (done < from || done >= to) continue;
      const auto b = static_cast<std::size_t>((done - from) / kBin);
      if (r.status >= 200 && r.status < 300 && !r.stale) ok[b] += 1 / kBin;
      if (r.status >= 500 && r.status != 503) bad[b] += 1 / kBin;
      if (r.status == 503) busy[b] += 1 / kBin;
    }
    std::vector<double> x(bins);
    for (std::size_t b = 0; b < bins; ++b)
      x[b] = from + (static_cast<double>(b) + 0.5) * kBin;
    const std::string colour = kColours[i % std::size(kColours)];
    fresh.series.push_back({name, x, ok, colour});
    errors.series.push_back({name, x, bad, colour});
    if (std::any_of(busy.begin(), busy.end(), [](double v) { return v > 0; })) {
      svg::Series s{fmt::format("{} 503", name), x, busy, colour};
      s.dashed = true;
      errors.series.push_back(s);
    }
  }
  const std::vector<svg::LineChart> charts = {fresh, errors};
  return svg::render(charts);
}

void write_storm_svg(const ReportArgs& args, const nlohmann::json& report) {
  const std::size_t storms = report["storms"].size();
  if (args.storm < 1 || static_cast<std::size_t>(args.storm) > storms) {
    eprint("error: --storm must be within 1..{}\n", storms);
    throw CLI::RuntimeError(2);
  }
  const std::string csv_path =
      (std::filesystem::path(args.json_path).parent_path() / "drill-requests.csv").string();
  Result<std::string> csv = read_whole(csv_path);
  if (!csv.ok()) {
    eprint("error: {} (the drill writes it beside the report)\n", csv.status().message());
    throw CLI::RuntimeError(1);
  }
  std::ofstream(args.svg, std::ios::binary | std::ios::trunc)
      << storm_svg(report, parse_requests_csv(*csv), args.storm, args.strategies);
  fmt::print("{}: storm {} of {}\n", args.svg, args.storm, args.json_path);
}

void run_report(const ReportArgs& args) {
  Result<std::string> text = read_whole(args.json_path);
  if (!text.ok()) {
    eprint("error: {}\n", text.status().message());
    throw CLI::RuntimeError(1);
  }
  const nlohmann::json report = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains("storms") || !report["storms"].is_array()) {
    eprint("error: {} is not a drill report (no \"storms\" list)\n", args.json_path);
    throw CLI::RuntimeError(1);
  }
  if (!args.svg.empty()) {
    write_storm_svg(args, report);
    if (args.into.empty()) return;
  }
  if (args.into.empty()) {
    fmt::print("{}", args.summary ? drill_summary_markdown(report) : drill_tables_markdown(report));
    return;
  }
  for (const std::string& page : args.into) {
    Result<std::string> read = read_whole(page);
    if (!read.ok()) {
      eprint("error: {}\n", read.status().message());
      throw CLI::RuntimeError(1);
    }
    const std::string& before = *read;
    int replaced = 0;
    const std::string after = replace_generated_blocks(before, report, &replaced);
    if (replaced == 0) {
      eprint("error: {} has no generated drill block for engine {}\n", page,
             report.value("engine", "sqlite"));
      throw CLI::RuntimeError(1);
    }
    if (after != before) std::ofstream(page, std::ios::binary | std::ios::trunc) << after;
    fmt::print("{}: {} block(s) {}\n", page, replaced, after == before ? "unchanged" : "rewritten");
  }
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "The drill's tables as Markdown, from the drill-report.json of a run");
  cmd->add_option("report", args->json_path, "drill-report.json (holdfast drill writes it)")
      ->required();
  cmd->add_flag("--summary", args->summary,
                "Only the short table: error pages and p99 per strategy and storm");
  cmd->add_option("--into", args->into,
                  "Rewrite the generated drill blocks of this Markdown page (repeatable)");
  cmd->add_option("--svg", args->svg,
                  "Draw one storm from drill-requests.csv (beside the report) into this SVG");
  cmd->add_option("--storm", args->storm, "With --svg: which storm, 1-based (default 1)");
  cmd->add_option("--strategies", args->strategies, "With --svg: which strategies (default all)")
      ->delimiter(',');
  cmd->callback([args] { run_report(*args); });
}

}  // namespace holdfast::cli
