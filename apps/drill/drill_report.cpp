// The drill's report: the figures of each storm period per strategy (drill_figures.cpp) and
// the timeline, from what the instances saw; the console table; drill-report.json, drill-report.md,
// drill-timeline.svg and drill-requests.csv.
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drill_figures.hpp"
#include "drill_run.hpp"
#include "svg_plot.hpp"

namespace holdfast::panel {
namespace drill {
namespace {

// `inst`'s timeline, one point per second: requests, errors and the most open breaker.
void add_timeline(const Instance& inst, DrillResult& result) {
  const int buckets = static_cast<int>(std::ceil(result.seconds)) + 1;
  std::vector<double> req(static_cast<std::size_t>(buckets)), err(req.size());
  for (const Record& rec : inst.records) {
    const auto b = static_cast<std::size_t>(rec.start_s);
    if (b >= req.size()) continue;
    req[b] += 1;
    if (rec.status >= 500 || rec.status == 0) err[b] += 1;
  }
  for (int b = 0; b < buckets; ++b) {
    int breaker = 0;
    for (const Sample& s : inst.samples) {
      if (s.t >= b && s.t < b + 1) breaker = std::max(breaker, s.breaker);
    }
    result.timeline.push_back({static_cast<double>(b), inst.name, req[static_cast<std::size_t>(b)],
                               err[static_cast<std::size_t>(b)], breaker});
  }
}

// Every drill payment carries a key; applied once per key means payment rows made during
// the drill equal the keys recorded.
void count_payments(const Instance& inst, DrillResult& result) {
  result.payments_sent += inst.payments_sent.load();
  const std::int64_t rows =
      count_in(inst, "SELECT count(*) FROM payments WHERE id > CAST($1 AS BIGINT)",
               {std::to_string(inst.payments_before)});
  const std::int64_t keys =
      count_in(inst, "SELECT count(*) FROM idempotency_keys WHERE key LIKE $1", {"%:payments:%"});
  if (rows > keys && keys >= 0) result.payments_doubled += rows - keys;
}

// drill-requests.csv: one line per request, in start order per strategy, with the breakers
// of its process open at its start (r, w, s: the reads', writes' and standby's Shields;
// R, W: the primary pools' backoff),
// for finding which answer made a figure. start_s to the microsecond, so a request falls in
// the same storm period here as in the report.
void write_requests_csv(const DrillRun& run) {
  std::ofstream out(std::filesystem::path(run.options.out_dir) / "drill-requests.csv");
  out << "strategy,process,kind,start_s,latency_ms,status,stale,own_write_miss,open\n";
  for (const auto& inst : run.instances) {
    std::vector<Record> records = inst->records;
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.start_s < b.start_s; });
    for (const Record& rec : records) {
      const std::uint8_t open = open_around(inst->samples, rec.start_s, rec.process);
      std::string bits;
      if ((open & Sample::kReadsOpen) != 0) bits += 'r';
      if ((open & Sample::kWritesOpen) != 0) bits += 'w';
      if ((open & Sample::kReadsPoolOpen) != 0) bits += 'R';
      if ((open & Sample::kWritesPoolOpen) != 0) bits += 'W';
      if ((open & Sample::kStandbyOpen) != 0) bits += 's';
      out << fmt::format("{},{},{},{:.6f},{:.1f},{},{},{},{}\n", inst->name, rec.process,
                         rec.pay ? "payment" : "page", rec.start_s, rec.latency_ms, rec.status,
                         rec.stale ? 1 : 0, rec.stale_after_write ? 1 : 0, bits);
    }
  }
}

// Of the confirmed payments answered from `from` to `to` (seconds since the load began),
// those whose key the writer lacks now.
std::int64_t lost_between(const Instance& inst, double from, double to) {
  std::string keys;
  for (const Instance::Confirmed& c : inst.confirmed_keys) {
    if (c.answered_s >= from && c.answered_s < to) keys += (keys.empty() ? "" : ",") + c.key;
  }
  if (keys.empty()) return 0;
  // The keys are scoped as USER:payments:KEY (club_store_pg.cpp's scoped_key()).
  return count_in(inst,
                  "SELECT count(*) FROM unnest(string_to_array($1, ',')) AS k WHERE "
                  "NOT EXISTS (SELECT 1 FROM idempotency_keys i WHERE "
                  "right(i.key, length(k) + 10) = ':payments:' || k)",
                  {keys});
}

// A failover's figures (StrategyResult): the first payment confirmed after the
// promotion, and the payments confirmed from the fault's start to `to` (the next fault's
// start) whose key the writer lacks.
void count_failover(const Instance& inst, const StormResult& sr, double to, StrategyResult& r) {
  if (sr.promoted_s >= 0) {
    double first = -1;
    for (const Record& rec : inst.records) {
      if (!rec.pay || (rec.status != 200 && rec.status != 201)) continue;
      const double answered = rec.start_s + rec.latency_ms / 1000.0;
      if (answered >= sr.promoted_s && (first < 0 || answered < first)) first = answered;
    }
    r.first_payment_after_promotion_s = first < 0 ? -1 : first - sr.promoted_s;
  }
  r.confirmed_payments_lost = lost_between(inst, sr.start_s, to);
}

}  // namespace

void summarize(const DrillRun& run, DrillResult& result) {
  bool audited = false;
  for (std::size_t si = 0; si < result.storms.size(); ++si) {
    StormResult& sr = result.storms[si];
    const double to = si + 1 < result.storms.size() ? result.storms[si + 1].start_s
                                                    : sr.end_s + run.options.gap_s;
    const Period period{sr, to, run.storm_wall[si]};
    for (auto& inst : run.instances) {
      sr.strategies.push_back(period_result(*inst, period, result.seconds));
      if (sr.audit_payments) count_failover(*inst, sr, to, sr.strategies.back());
    }
    if (sr.audit_payments) audited = true;
  }
  if (audited) {
    result.confirmed_payments_lost = 0;
    for (const auto& inst : run.instances) {
      const std::int64_t lost = lost_between(*inst, 0, result.seconds + 1);
      if (lost < 0) {
        result.confirmed_payments_lost = -1;
        break;
      }
      result.confirmed_payments_lost += lost;
    }
  }
  for (auto& inst : run.instances) {
    add_timeline(*inst, result);
    count_payments(*inst, result);
  }
  write_requests_csv(run);
}

}  // namespace drill

namespace {

namespace fs = std::filesystem;

// "write lock storm, 5 s" or "stop fault, 15 s".
std::string storm_title(const StormSpec& spec) {
  return fmt::format("{} {}, {:g} s", storm_name(spec), spec.fault.empty() ? "lock storm" : "fault",
                     spec.seconds);
}

// The last columns: the logs table on SQLite; on PostgreSQL, attempts per call and the
// attempts per request that reached the primary, the answers while a breaker was open and
// reads that missed the worker's own payment.
std::vector<std::string> tail_header(bool pg, bool markdown) {
  if (pg && markdown) {
    return {"attempts during fault",      "attempts/call", "primary attempts/request",
            "answers while breaker open", "their p99 ms",  "their max ms",
            "reads missing own payment"};
  }
  if (pg) {
    return {"att in fault", "att/call", "primary/r",       "open n",
            "open p99",     "open max", "own-write misses"};
  }
  if (markdown) return {"log rows during storm", "gap line"};
  return {"log rows", "gap"};
}
std::vector<std::string> tail_cells(const StrategyResult& r, bool pg) {
  if (pg) {
    const bool open = r.open_breaker_answers > 0;
    return {fmt::format("{}", r.attempts_during_storm),
            fmt::format("{:.2f}", r.attempts_per_call),
            fmt::format("{:.2f}", r.primary_attempts_per_request),
            fmt::format("{}", r.open_breaker_answers),
            open ? fmt::format("{:.0f}", r.open_breaker_p99_ms) : "-",
            open ? fmt::format("{:.0f}", r.open_breaker_max_ms) : "-",
            fmt::format("{}", r.stale_reads_after_write)};
  }
  return {fmt::format("{}", r.log_rows_during_storm), r.gap_line ? "yes" : "no"};
}
using nlohmann::json;

// "97 %" (with `unit`), or "-" for a share with nothing to count (-1).
std::string percent_or_dash(double pct, const char* unit) {
  return pct < 0 ? std::string("-") : fmt::format("{:.0f}{}", pct, unit);
}

json report_json(const DrillOptions& options, const DrillResult& result) {
  json j;
  j["engine"] = result.engine;
  j["seconds"] = result.seconds;
  j["workers"] = options.workers;
  j["seed"] = options.seed;
  j["payments_sent"] = result.payments_sent;
  j["payments_applied_twice"] = result.payments_doubled;
  if (result.confirmed_payments_lost >= 0)
    j["confirmed_payments_lost"] = result.confirmed_payments_lost;
  j["storms"] = json::array();
  for (const StormResult& s : result.storms) {
    json storm = {{"seconds", s.spec.seconds},
                  {"kind", storm_name(s.spec)},
                  {"start_s", s.start_s},
                  {"end_s", s.end_s},
                  {"strategies", json::array()}};
    if (!s.evidence.empty()) storm["evidence"] = s.evidence;
    if (s.answered_again_ms >= 0) storm["answered_again_ms"] = s.answered_again_ms;
    if (s.promoted_s >= 0) storm["promoted_s"] = s.promoted_s;
    for (const StrategyResult& r : s.strategies) {
      storm["strategies"].push_back(
          {{"name", r.name},
           {"requests", r.requests},
           {"served", r.served},
           {"served_during_storm_pct", r.served_during_storm_pct},
           {"payments_served_pct",
            r.payments_served_pct >= 0 ? json(r.payments_served_pct) : json(nullptr)},
           {"back_after_s", r.back_after_s},
           {"error_pages", r.error_pages},
           {"unanswered", r.unanswered},
           {"fast_answers_pct", r.fast_answers_pct >= 0 ? json(r.fast_answers_pct) : json(nullptr)},
           {"status_503", r.status_503},
           {"status_503_max_ms", r.status_503_max_ms},
           {"stale", r.stale},
           {"p50_ms", r.p50_ms},
           {"p99_ms", r.p99_ms},
           {"max_ms", r.max_ms},
           {"attempts_per_request", r.attempts_per_request},
           {"attempts_during_storm", r.attempts_during_storm},
           {"attempts_per_call", r.attempts_per_call},
           {"attempts_per_page", r.attempts_per_page},
           {"primary_attempts_per_request", r.primary_attempts_per_request},
           {"standby_attempts_per_request", r.standby_attempts_per_request},
           {"open_breaker_answers", r.open_breaker_answers},
           {"open_breaker_p99_ms", r.open_breaker_p99_ms},
           {"open_breaker_max_ms", r.open_breaker_max_ms},
           {"any_open_breaker_answers", r.any_open_breaker_answers},
           {"any_open_breaker_p99_ms", r.any_open_breaker_p99_ms},
           {"any_open_breaker_max_ms", r.any_open_breaker_max_ms},
           {"log_rows_during_storm", r.log_rows_during_storm},
           {"gap_line", r.gap_line},
           {"processes", r.processes},
           {"stale_reads_after_write", r.stale_reads_after_write}});
      if (s.audit_payments) {
        json& last = storm["strategies"].back();
        last["first_payment_after_promotion_s"] = r.first_payment_after_promotion_s >= 0
                                                      ? json(r.first_payment_after_promotion_s)
                                                      : json(nullptr);
        last["confirmed_payments_lost"] = r.confirmed_payments_lost;
      }
    }
    j["storms"].push_back(storm);
  }
  return j;
}

std::string report_markdown(const DrillOptions& options, const DrillResult& result) {
  std::string md = "# holdfast drill\n\n";
  md += fmt::format(
      "{} workers per strategy, {:.0f} s in all. Each storm is counted from its start to the next "
      "storm's start, so recovery is included. *errors*: error pages (any 5xx other than "
      "holdfast's 503, and requests with no answer); *unanswered*: of those, requests that got "
      "no HTTP answer (the connection closed or reset, or no byte for the load client's 30 s); "
      "*503*: holdfast's \"busy, retry in N s\" page; *stale*: the last good "
      "schedule with an \"as of\" banner; *served during storm*: requests started during the "
      "storm that got a fresh page within 6 s; *fast answers*: of the requests started from the "
      "storm's start + 1 s to its end, the share answered within 100 ms with a fresh or stale "
      "page or a 503 (0 % when no request started in a second or more of it: every worker was "
      "still waiting; -: a storm of 2 s or less where none started); *back after*: from the lock's "
      "release to the last "
      "answer that was not a fresh page, until the next storm starts; *max ms*: the longest "
      "wait from sending a request to its answer or to giving up on it.\n",
      options.workers, result.seconds);
  const bool pg = result.engine == "postgres";
  if (pg) {
    md +=
        "\nOn PostgreSQL each strategy runs as several panel processes (each request goes to "
        "the next one); *attempts/call*: database attempts per database call the panels made (a "
        "statement or transaction, before retries); *primary attempts/request*: the attempts "
        "per request that reached the primary; *answers while breaker open*: requests that began "
        "while "
        "a breaker they go through (a page: the reads' Shield or the primary's read pool's "
        "breaker on connects; a payment: the writes') was open in their process, as the "
        "samples of its /metrics (every 100 ms) on both sides of the request's start saw it; "
        "*reads missing own payment*: fresh pages, "
        "loaded right after the worker's payment was confirmed, whose count of today's "
        "payments does not include it.\n";
  }
  for (const StormResult& s : result.storms) {
    md += fmt::format("\n## {}\n\n", storm_title(s.spec));
    if (!s.evidence.empty()) {
      md += fmt::format("Caused: {}. ", s.evidence);
      if (s.answered_again_ms >= 0)
        md += fmt::format("Undone: answered again {:.0f} ms after its end.", s.answered_again_ms);
      md += "\n\n";
    }
    if (s.audit_payments) {
      md += s.promoted_s >= 0
                ? "The primary changed; per strategy: the first payment confirmed after the "
                  "promotion; the payments confirmed from this fault's start to the next's whose "
                  "key the writer lacks at the drill's end.\n\n"
                : "No promotion was seen; per strategy: the payments confirmed from this fault's "
                  "start to the next's whose key the writer lacks at the drill's end.\n\n";
      for (const StrategyResult& r : s.strategies) {
        md += fmt::format("- {}: first payment {}; confirmed payments lost: {}\n", r.name,
                          s.promoted_s < 0 ? std::string("- (no promotion)")
                          : r.first_payment_after_promotion_s >= 0
                              ? fmt::format("{:.2f} s after the promotion (at {:.2f} s)",
                                            r.first_payment_after_promotion_s, s.promoted_s)
                              : std::string("none after the promotion"),
                          r.confirmed_payments_lost);
      }
      md += "\n";
    }
    md +=
        "| strategy | requests | error pages | unanswered | 503 | stale | served during storm | "
        "fast answers | back after | p50 ms | p99 ms | max ms | attempts/request";
    const std::vector<std::string> tail = tail_header(pg, true);
    for (const std::string& h : tail)
      md += " | " + h;
    // Numbers right-aligned; the strategy and SQLite's gap column (yes/no) left.
    constexpr std::size_t kFirstColumns = 13;
    const std::size_t columns = kFirstColumns + tail.size();
    md += " |\n|---|";
    for (std::size_t i = 1; i < columns; ++i)
      md += !pg && i + 1 == columns ? "---|" : "---:|";
    md += "\n";
    for (const StrategyResult& r : s.strategies) {
      md += fmt::format(
          "| {} | {} | {} | {} | {} | {} | {:.0f} % | {} | {:.1f} s | {:.0f} | {:.0f} | {:.0f} | "
          "{:.2f}",
          r.name, r.requests, r.error_pages, r.unanswered, r.status_503, r.stale,
          r.served_during_storm_pct, percent_or_dash(r.fast_answers_pct, " %"), r.back_after_s,
          r.p50_ms, r.p99_ms, r.max_ms, r.attempts_per_request);
      for (const std::string& c : tail_cells(r, pg))
        md += " | " + c;
      md += " |\n";
    }
  }
  md +=
      fmt::format("\nPayments sent: {}; applied twice: {}{}.\n\n![timeline](drill-timeline.svg)\n",
                  result.payments_sent, result.payments_doubled,
                  result.confirmed_payments_lost >= 0
                      ? fmt::format("; confirmed but lost: {}", result.confirmed_payments_lost)
                      : std::string());
  return md;
}

// Requests, errors and breaker state over time, with the storms shaded.
std::vector<svg::LineChart> timeline_charts(const DrillResult& result) {
  std::vector<svg::LineChart> charts(3);
  charts[0].title = "Requests per second";
  charts[1].title = "Errors per second (error pages and 503s)";
  charts[2].title = "Breaker state (0 closed, 1 half-open, 2 open)";
  for (auto& c : charts) {
    c.x.label = "time (s)";
    for (const StormResult& s : result.storms) {
      svg::Span span;
      span.from = s.start_s;
      span.to = s.end_s;
      span.label = fmt::format("{} {:g}s", storm_name(s.spec), s.spec.seconds);
      c.spans.push_back(span);
    }
  }
  charts[0].y.label = "requests/s";
  charts[1].y.label = "errors/s";
  charts[2].y.label = "state";
  charts[2].y.max = 2;
  std::vector<std::string> names;  // in the order the timeline has them
  for (const TimelinePoint& p : result.timeline) {
    if (std::find(names.begin(), names.end(), p.strategy) == names.end())
      names.push_back(p.strategy);
  }
  for (const std::string& name : names) {
    svg::Series req, err, brk;
    req.name = err.name = brk.name = name;
    for (const TimelinePoint& p : result.timeline) {
      if (p.strategy != name) continue;
      req.x.push_back(p.t);
      req.y.push_back(p.requests_per_s);
      err.x.push_back(p.t);
      err.y.push_back(p.errors_per_s);
      brk.x.push_back(p.t);
      brk.y.push_back(p.breaker);
    }
    charts[0].series.push_back(req);
    charts[1].series.push_back(err);
    if (name.starts_with("holdfast") || name == to_string(Strategy::kOriginBreaker))
      charts[2].series.push_back(brk);
  }
  return charts;
}

// Rows of cells as columns that line up: each column as wide as its widest cell, the first
// left-aligned, the others right-aligned, two spaces apart.
std::string aligned_columns(const std::vector<std::vector<std::string>>& rows,
                            std::string_view indent) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    out += indent;
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c == 0) {
        out += fmt::format("{:<{}}", row[c], width[c]);
      } else {
        out += fmt::format("  {:>{}}", row[c], width[c]);
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string drill_table(const DrillResult& result) {
  std::string out;
  for (const StormResult& s : result.storms) {
    out += fmt::format("\n{} (from t={:.1f} s; counted until the next storm)\n",
                       storm_title(s.spec), s.start_s);
    const bool pg = result.engine == "postgres";
    std::vector<std::vector<std::string>> rows = {{"strategy", "requests", "errors", "no answer",
                                                   "503", "stale", "served", "fast", "back s",
                                                   "p50 ms", "p99 ms", "max ms", "attempts/r"}};
    for (const std::string& h : tail_header(pg, false))
      rows[0].push_back(h);
    for (const StrategyResult& r : s.strategies) {
      rows.push_back({r.name, fmt::format("{}", r.requests), fmt::format("{}", r.error_pages),
                      fmt::format("{}", r.unanswered), fmt::format("{}", r.status_503),
                      fmt::format("{}", r.stale), fmt::format("{:.0f}%", r.served_during_storm_pct),
                      percent_or_dash(r.fast_answers_pct, "%"),
                      fmt::format("{:.1f}", r.back_after_s), fmt::format("{:.0f}", r.p50_ms),
                      fmt::format("{:.0f}", r.p99_ms), fmt::format("{:.0f}", r.max_ms),
                      fmt::format("{:.2f}", r.attempts_per_request)});
      for (const std::string& c : tail_cells(r, pg))
        rows.back().push_back(c);
    }
    out += aligned_columns(rows, "  ");
    if (s.audit_payments) {
      for (const StrategyResult& r : s.strategies) {
        out += fmt::format(
            "  {}: {}; confirmed payments lost: {}\n", r.name,
            s.promoted_s < 0 ? std::string("no promotion seen")
            : r.first_payment_after_promotion_s >= 0
                ? fmt::format("first payment {:.2f} s after the promotion (at {:.1f} s)",
                              r.first_payment_after_promotion_s, s.promoted_s)
                : fmt::format("promoted at {:.1f} s, no payment after it", s.promoted_s),
            r.confirmed_payments_lost);
      }
    }
  }
  out += fmt::format("\npayments sent: {}; applied twice: {}{}\n", result.payments_sent,
                     result.payments_doubled,
                     result.confirmed_payments_lost >= 0
                         ? fmt::format("; confirmed but lost: {}", result.confirmed_payments_lost)
                         : std::string());
  return out;
}

Status write_drill_reports(const DrillOptions& options, const DrillResult& result) {
  const fs::path dir(options.out_dir);
  std::ofstream(dir / "drill-report.json") << report_json(options, result).dump(2) << "\n";
  std::ofstream(dir / "drill-report.md") << report_markdown(options, result);
  std::ofstream(dir / "drill-timeline.svg") << svg::render(timeline_charts(result));
  if (!fs::exists(dir / "drill-report.json")) {
    return Status(Code::kFailedPrecondition, "could not write the reports in " + dir.string());
  }
  return Status();
}

}  // namespace holdfast::panel
