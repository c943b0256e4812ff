#include "status_page.hpp"

#include <chrono>

#include <fmt/format.h>

#include "holdfast/core/shield.hpp"
#include "holdfast/log/database_sink.hpp"
#include "html.hpp"
#include "svg_plot.hpp"

namespace holdfast::panel {
namespace {

// The status page's own rules, on top of the panel's style (html.hpp).
constexpr std::string_view kStatusHead = R"(<meta http-equiv="refresh" content="2"><style>
table{margin:0 0 16px}
.state{font-weight:600;padding:2px 8px;border-radius:4px}
.closed{background:#e8f4ea;color:#1e6b34}
.open,.isolated{background:#fde2e1;color:#9b1c1c}
.half_open{background:#fff4ce;color:#7a5b00}
.note{background:#fff;border:1px solid #d8dde6;padding:10px 14px;border-radius:6px}
</style>)";

// Seconds per point of the chart.
constexpr std::size_t kBucket = 5;

double milliseconds(Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::string shield_row(const ShieldStatus& s) {
  return fmt::format(
      "<tr data-shield=\"{0}\"><td>{0}</td><td><span class=\"state {1}\" "
      "data-breaker=\"{1}\">{1}</span></td><td data-limit=\"{2:.1f}\">{2:.1f}</td><td>{3}</td>"
      "<td>{4:.1f} / {5:.1f}</td><td>{6}</td><td>{7:.1f} ms / {8:.1f} ms</td></tr>",
      escape_html(s.name), escape_html(s.breaker), s.limit, s.in_flight, s.tokens, s.max_tokens,
      s.waiting, s.recent_latency_ms, s.normal_latency_ms);
}

std::string shields_table(const StatusView& view) {
  if (view.shields.empty()) {
    return fmt::format(
        "<p class=\"note\" id=\"no-shields\">This panel runs the <strong>{}</strong> baseline: "
        "it has no Shield, so there is no breaker, concurrency limit or retry throttle to "
        "show.</p>",
        escape_html(view.strategy));
  }
  std::string out =
      "<table id=\"shields\"><thead><tr><th>Shield</th><th>Breaker</th><th>Concurrency "
      "limit</th><th>In flight</th><th>Throttle tokens</th><th>Waiting</th><th>Latency "
      "(recent / normal)</th></tr></thead><tbody>";
  for (const ShieldStatus& s : view.shields)
    out += shield_row(s);
  return out + "</tbody></table>";
}

std::string log_pause_line(const std::optional<LogPauseStatus>& log) {
  if (!log) {
    return "<p class=\"note\" id=\"log-pause\" data-log-pause=\"none\">Log pause: none (this "
           "panel does not write its log through a DatabaseSink).</p>";
  }
  return fmt::format(
      "<p class=\"note\" id=\"log-pause\" data-log-pause=\"{0}\">Log pause: <strong>{0}</strong> "
      "&middot; {1} pauses so far &middot; {2} entries skipped &middot; {3} queued</p>",
      log->paused ? "on" : "off", log->pauses, log->skipped, log->queued);
}

// One line: confirmed writes a change of writer lost, and split brains (PostgreSQL only).
std::string lost_writes_line(const std::optional<pg::LostWritesReport>& lost) {
  if (!lost) return {};
  const bool bad = lost->missing_total > 0 || lost->split_brains > 0;
  std::string line = fmt::format(
      "<p class=\"note\" id=\"lost-writes\" data-missing=\"{0}\" data-split-brains=\"{1}\" "
      "data-unverified=\"{2}\">Confirmed writes lost in a change of writer: <strong>{0}</strong> "
      "&middot; split brains: <strong>{1}</strong> &middot; unverified: {2} &middot; changes of "
      "writer: {3}, checked: {4}",
      lost->missing_total, lost->split_brains, lost->unverified_total, lost->changes, lost->checks);
  if (bad && !lost->last_finding.empty()) {
    line += fmt::format("<br>Last: {}", escape_html(lost->last_finding));
    if (!lost->last_missing.empty()) {
      line += " &middot; <span id=\"lost-keys\">";
      for (std::size_t i = 0; i < lost->last_missing.size(); ++i) {
        line += (i > 0 ? ", " : "") + escape_html(lost->last_missing[i]);
      }
      line += "</span>";
    }
  }
  return line + "</p>";
}

svg::Series bucketed(const TrafficRing::Window& w, TrafficRing::Kind kind, std::string label,
                     std::string color) {
  svg::Series s;
  s.name = fmt::format("{}: {} in 5 min", label, w.total(kind));
  s.color = std::move(color);
  constexpr std::size_t n = TrafficRing::kSeconds;
  static_assert(n % kBucket == 0);
  for (std::size_t start = 0; start < n; start += kBucket) {
    std::uint64_t sum = 0;
    for (std::size_t i = start; i < start + kBucket; ++i)
      sum += w.counts[kind][i];
    // x: how many seconds before now the bucket ends (0: the current bucket).
    s.x.push_back(-static_cast<double>(n - (start + kBucket)));
    s.y.push_back(static_cast<double>(sum));
  }
  return s;
}

}  // namespace

ShieldStatus read_shield_status(const Shield& shield) {
  ShieldStatus s;
  s.name = std::string(shield.name());
  s.breaker = std::string(to_string(shield.breaker().state()));
  s.limit = shield.limit().limit();
  s.in_flight = shield.limit().in_flight();
  s.tokens = shield.throttle().tokens();
  s.max_tokens = shield.throttle().options().max_tokens;
  s.waiting = shield.waiting();
  s.recent_latency_ms = milliseconds(shield.limit().recent_latency());
  s.normal_latency_ms = milliseconds(shield.limit().normal_latency());
  return s;
}

LogPauseStatus read_log_pause(const DatabaseSink& sink) {
  const DatabaseSinkStats stats = sink.stats();
  return LogPauseStatus{stats.paused, stats.pauses, stats.skipped.total(), stats.queued};
}

std::string render_traffic_svg(const TrafficRing::Window& traffic) {
  svg::LineChart chart;
  chart.title = "Answers per 5 s, last 5 minutes";
  chart.x.label = "seconds ago";
  chart.x.min = -static_cast<double>(TrafficRing::kSeconds);
  chart.x.max = 0;
  chart.y.label = "answers per 5 s";
  chart.width = 960;
  chart.height = 320;
  chart.series.push_back(bucketed(traffic, TrafficRing::kRequests, "requests", "#1f4e79"));
  chart.series.push_back(bucketed(traffic, TrafficRing::kErrors, "errors (5xx)", "#c0392b"));
  chart.series.push_back(bucketed(traffic, TrafficRing::kBusy, "503 busy", "#e67e22"));
  chart.series.push_back(bucketed(traffic, TrafficRing::kStale, "stale pages", "#8e44ad"));
  return svg::render(chart);
}

std::string render_status(const StatusView& view, const TrafficRing::Window& traffic) {
  std::string body = fmt::format(
      "<header><strong>holdfast panel &middot; status</strong><span>strategy {} &middot; {} "
      "&middot; as of {} UTC, refreshes every 2 s</span></header><main><h1>Shields</h1>",
      escape_html(view.strategy), escape_html(view.backend), escape_html(view.as_of));
  body += shields_table(view);
  body += log_pause_line(view.log_pause);
  body += lost_writes_line(view.lost_writes);
  body += "<h2>Last 5 minutes</h2><div id=\"traffic\">";
  body += render_traffic_svg(traffic);
  body += "</div></main>";
  return page("Status", body, kStatusHead);
}

}  // namespace holdfast::panel
