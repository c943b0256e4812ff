// The figures of one storm period per strategy (drill.hpp's StrategyResult), from what an
// instance saw: its answers, the breakers open at their starts, its counters' attempts, and
// its log rows. The report around them is drill_report.cpp's.
#include "drill_figures.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace holdfast::panel::drill {
namespace {

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// One count(*) from a read-only connection of its own, with text parameters; -1 on error.
std::int64_t count_rows(const std::string& path, const std::string& sql,
                        const std::vector<std::string>& params) {
  sqlite3* db = nullptr;
  std::int64_t n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
      int i = 0;
      for (const std::string& p : params)
        sqlite3_bind_text(st, ++i, p.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close_v2(db);
  return n;
}

// The answers `inst` got in `period`: counts, latency percentiles, served share, back after.
StrategyResult count_answers(const Instance& inst, const Period& period) {
  const StormResult& sr = period.storm;
  StrategyResult r;
  r.name = inst.name;
  r.processes = inst.ports.empty() ? 1 : static_cast<int>(inst.ports.size());
  std::vector<double> latencies, busy;
  std::int64_t during = 0;
  std::int64_t served_during = 0;
  std::int64_t payments_during = 0, payments_confirmed = 0;
  std::int64_t after_first_second = 0, fast = 0;
  for (const Record& rec : inst.records) {
    if (rec.start_s < sr.start_s || rec.start_s >= period.to) continue;
    ++r.requests;
    if (rec.status == 0) ++r.unanswered;
    if (rec.stale_after_write) ++r.stale_reads_after_write;
    latencies.push_back(rec.latency_ms);
    const bool holdfast_busy = inst.strategy == Strategy::kHoldfast && rec.status == 503;
    bool fresh = false;
    bool error = false;
    if (holdfast_busy) {
      ++r.status_503;
      busy.push_back(rec.latency_ms);
    } else if (rec.status >= 500 || rec.status == 0) {
      ++r.error_pages;
      error = true;
    } else if (rec.stale) {
      ++r.stale;
    } else if (rec.status >= 200 && rec.status < 300) {
      ++r.served;
      fresh = true;
    }
    if (rec.start_s < sr.end_s) {
      ++during;
      if (rec.pay) {
        ++payments_during;
        if (rec.status == 200 || rec.status == 201) ++payments_confirmed;
      }
      // Served: a fresh page within the origin's 6 s budget (nobody waits 20 s).
      if (fresh && rec.latency_ms <= kServedWithinMs) ++served_during;
      if (rec.start_s >= sr.start_s + kFastAnswersFromS) {
        ++after_first_second;
        if (!error && rec.latency_ms <= kFastAnswerMs) ++fast;
      }
    }
    // Back: the last answer that was not a fresh page, from the release until the next
    // storm starts (what happens after that is the next storm's).
    const double answered = rec.start_s + rec.latency_ms / 1000.0;
    if (!fresh && answered > sr.end_s && answered <= period.to)
      r.back_after_s = std::max(r.back_after_s, answered - sr.end_s);
  }
  r.served_during_storm_pct =
      during > 0 ? 100.0 * static_cast<double>(served_during) / static_cast<double>(during) : 100.0;
  r.payments_served_pct = payments_during > 0 ? 100.0 * static_cast<double>(payments_confirmed) /
                                                    static_cast<double>(payments_during)
                                              : -1.0;
  // No request started in a window of a second or more: every worker was still waiting on
  // an earlier one, so none got a fast answer (the load is closed-loop).
  const double window_s = sr.end_s - (sr.start_s + kFastAnswersFromS);
  r.fast_answers_pct = after_first_second > 0 ? 100.0 * static_cast<double>(fast) /
                                                    static_cast<double>(after_first_second)
                       : window_s >= 1.0 ? 0.0
                                         : -1.0;
  r.p50_ms = percentile(latencies, 0.50);
  r.p99_ms = percentile(latencies, 0.99);
  r.max_ms = latencies.empty() ? 0 : latencies.back();
  r.status_503_max_ms = busy.empty() ? 0 : *std::max_element(busy.begin(), busy.end());
  return r;
}

// Whether a request that began with `open` (Sample::open bits) had its way to the data
// closed: for a payment the writes' Shield or the primary's write pool; for a page the
// reads' Shield or the primary's read pool, and where pages read from a standby, the
// standby's Shield as well (a page with a closed standby breaker reads there instead).
bool way_closed(const Instance& inst, const Record& rec, std::uint8_t open) {
  if (rec.pay) return (open & (Sample::kWritesOpen | Sample::kWritesPoolOpen)) != 0;
  const bool primary = (open & (Sample::kReadsOpen | Sample::kReadsPoolOpen)) != 0;
  return primary && (!inst.standby_reads || (open & Sample::kStandbyOpen) != 0);
}

// The answers in `period` to requests that began while their way to the data was closed
// by open breakers (way_closed()), and those that began while any breaker of their
// process was: how many, their p99 and slowest.
void count_open_breaker_answers(const Instance& inst, const Period& period, StrategyResult& r) {
  std::vector<double> own, any;
  for (const Record& rec : inst.records) {
    if (rec.start_s < period.storm.start_s || rec.start_s >= period.to) continue;
    const std::uint8_t open = open_around(inst.samples, rec.start_s, rec.process);
    if (open == 0) continue;
    any.push_back(rec.latency_ms);
    if (way_closed(inst, rec, open)) own.push_back(rec.latency_ms);
  }
  r.open_breaker_answers = static_cast<std::int64_t>(own.size());
  r.open_breaker_p99_ms = percentile(own, 0.99);
  r.open_breaker_max_ms = own.empty() ? 0 : own.back();
  r.any_open_breaker_answers = static_cast<std::int64_t>(any.size());
  r.any_open_breaker_p99_ms = percentile(any, 0.99);
  r.any_open_breaker_max_ms = any.empty() ? 0 : any.back();
}

}  // namespace

// Instance::count, or count_rows() on its SQLite file.
std::int64_t count_in(const Instance& inst, const std::string& sql,
                      const std::vector<std::string>& params) {
  return inst.count ? inst.count(sql, params) : count_rows(inst.path, sql, params);
}

// The breakers of process `p` that both samples around `t` saw open (samples in time
// order): Sample::kReadsOpen, kWritesOpen.
std::uint8_t open_around(const std::vector<Sample>& samples, double t, int p) {
  const auto after = std::upper_bound(samples.begin(), samples.end(), t,
                                      [](double v, const Sample& s) { return v < s.t; });
  if (after == samples.begin() || after == samples.end()) return 0;
  const auto before = std::prev(after);
  const auto at = static_cast<std::size_t>(p);
  if (at >= before->open.size() || at >= after->open.size()) return 0;
  return before->open[at] & after->open[at];
}

// count_answers() plus the database attempts per request and per call, the answers while
// a breaker was open, and the log rows written.
StrategyResult period_result(const Instance& inst, const Period& period, double seconds) {
  StrategyResult r = count_answers(inst, period);
  Sample first, last, at_end;
  for (const Sample& s : inst.samples) {
    if (s.t <= period.storm.start_s) first = s;
    if (s.t <= std::min(period.to, seconds)) last = s;
    if (s.t <= period.storm.end_s) at_end = s;
  }
  r.attempts_during_storm = at_end.attempts >= first.attempts
                                ? static_cast<std::int64_t>(at_end.attempts - first.attempts)
                                : 0;
  const auto per_request = [&](std::uint64_t from, std::uint64_t to) {
    return r.requests > 0 ? static_cast<double>(to - from) / static_cast<double>(r.requests) : 0.0;
  };
  const std::uint64_t a0 = first.attempts, a1 = last.attempts;
  const std::uint64_t c0 = first.calls, c1 = last.calls;
  r.attempts_per_request = per_request(a0, a1);
  r.primary_attempts_per_request = per_request(first.primary_attempts, last.primary_attempts);
  r.standby_attempts_per_request = per_request(first.standby_attempts, last.standby_attempts);
  r.attempts_per_call = c1 > c0 ? static_cast<double>(a1 - a0) / static_cast<double>(c1 - c0) : 0.0;
  const std::int64_t pages = r.served + r.stale;
  r.attempts_per_page = pages > 0 ? static_cast<double>(a1 - a0) / static_cast<double>(pages) : 0.0;
  count_open_breaker_answers(inst, period, r);
  r.log_rows_during_storm =
      count_in(inst, "SELECT count(*) FROM logs WHERE created_at >= $1 AND created_at < $2",
               {period.wall.from, period.wall.to});
  r.gap_line = count_in(inst,
                        "SELECT count(*) FROM logs WHERE message LIKE 'Log persistence "
                        "paused%' AND created_at >= $1",
                        {period.wall.from}) > 0;
  return r;
}

}  // namespace holdfast::panel::drill
