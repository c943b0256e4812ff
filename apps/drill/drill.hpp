// holdfast drill: the origin's incident, replayed on demand.
//
// Every strategy gets its own fresh SQLite file and its own panel on a loopback port, and
// all of them run at the same time under identical load: K virtual workers per panel that
// sign in, load the schedule page over real HTTP and now and then pay (with an
// Idempotency-Key), plus a cron-like batch writer. At the same instants a real lock storm
// hits every file (storm.hpp): a batch job holding the write lock, or a process holding the
// file in exclusive locking mode. Each storm is followed by a quiet gap, so recovery shows.
//
// Per storm period (from the storm's start to the next storm's start) and strategy the
// drill reports requests, error pages (5xx other than holdfast's 503), 503s, stale pages,
// p50/p99/max latency, database attempts per request, log rows written during the storm and
// whether the gap line was written; plus a timeline sampled every 250 ms.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "holdfast/core/result.hpp"
#include "storm.hpp"
#include "strategy.hpp"

namespace holdfast::panel {

struct StormSpec {
  StormKind kind = StormKind::kWrite;
  double seconds = 2.0;
  // The PostgreSQL drill's fault ("write-lock", "stop", ...; drill_pg.hpp). Empty: a
  // SQLite lock storm of `kind`.
  std::string fault{};
};

// "write" or "read" for a SQLite storm, the fault's name for a PostgreSQL one.
[[nodiscard]] std::string storm_name(const StormSpec& spec);

struct DrillOptions {
  std::vector<Strategy> strategies = baselines::all_strategies();
  std::vector<StormSpec> storms;  // empty: the defaults (see default_storms())
  int workers = 8;                // per strategy
  double warmup_s = 2.0;
  double gap_s = 3.0;  // quiet time after each storm
  int think_ms = 100;  // a worker's pause between requests
  int pay_every = 10;  // every Nth request of a worker is a payment
  std::uint64_t seed = 1;
  std::string out_dir = "drill-out";
  bool progress = true;  // a progress bar on stderr
  // After the last storm, wait at most this long for paused log sinks to resume (their
  // 30 s pause), so the gap lines they write can be counted.
  double log_tail_s = 35.0;
  // holdfast's logger pauses this long after the database refuses a log batch. The
  // origin's (and DatabaseSink's default) is 30 s; the drill uses 10 s so that the last
  // storm's gap line arrives within seconds and `make drill` ends within 3 minutes.
  double log_pause_s = 10.0;
};

// 2 s, 5 s and 20 s, each as a write storm and as a read storm.
std::vector<StormSpec> default_storms();

struct StrategyResult {
  std::string name;
  std::int64_t requests = 0;
  // Error pages (5xx other than holdfast's 503) and requests with no answer at all.
  std::int64_t error_pages = 0;
  // Of error_pages, the requests that got no HTTP answer: the connection closed or reset
  // without one, or nothing came for the load client's 30 s (kNoAnswerAfter).
  std::int64_t unanswered = 0;
  // Of the requests started from the storm's start + 1 s to its end, the share answered
  // within 100 ms (kFastAnswerMs) with anything but an error page: fresh, stale or a 503.
  // 0 when none started in a window of 1 s or more (every worker of the closed-loop load
  // was still waiting on an earlier request); -1 when none started in a shorter one.
  double fast_answers_pct = -1;
  std::int64_t status_503 = 0;
  double status_503_max_ms = 0;  // the slowest of holdfast's 503s
  std::int64_t stale = 0;
  // From sending a request to its answer (or to giving up on it: max_ms is the longest
  // wait any request had).
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double attempts_per_request = 0;
  // Database attempts from the storm's start to its end (the panels' counters).
  std::int64_t attempts_during_storm = 0;
  // Database attempts per database call the panel made (a statement or transaction it
  // asked for, before retries): 1.0 means no call was tried twice. Unlike attempts per
  // request it does not fall when a strategy gives a page up at its first failed query.
  double attempts_per_call = 0;
  // Database attempts per request answered with its page, fresh or stale (a payment:
  // applied): what each answer a user could use cost. Unlike attempts per request it
  // does not fall when a strategy gives pages up; 0 when nothing was answered.
  double attempts_per_page = 0;
  // PostgreSQL: of attempts_per_request, those that reached the primary and the standby
  // (a server under a fault sees only its own share; unlike attempts_per_request these do
  // not count a baseline's calls refused before reaching a server).
  double primary_attempts_per_request = 0;
  double standby_attempts_per_request = 0;
  // Answers to requests that began while a breaker they go through (a page: the reads'
  // Shield or the primary read pool's breaker on connects; a payment: the writes') was
  // open in the request's own panel process,
  // as the samples on both sides of the request's start saw it, and their p99 and slowest;
  // 0 answers when no breaker was seen open (or the strategy has none).
  std::int64_t open_breaker_answers = 0;
  double open_breaker_p99_ms = 0, open_breaker_max_ms = 0;
  // The same for requests that began while any breaker of their process was open.
  std::int64_t any_open_breaker_answers = 0;
  double any_open_breaker_p99_ms = 0, any_open_breaker_max_ms = 0;
  std::int64_t log_rows_during_storm = 0;
  bool gap_line = false;
  std::int64_t served = 0;  // 2xx with fresh data
  // Of the requests started while the lock was held, the share answered with a fresh page
  // within 6 s (the origins' retry budget).
  double served_during_storm_pct = 0;
  // Of the payments started while the storm was held, the share confirmed (200/201, at any
  // latency); -1 when none started.
  double payments_served_pct = -1;
  // From the lock's release to the last answer that was not a fresh page (0: none after it).
  double back_after_s = 0;
  int processes = 1;  // panel processes serving the strategy
  // Fresh pages, loaded right after the worker's own payment was confirmed, that did not
  // count that payment (the PostgreSQL drill; 0 on SQLite, which has no replicas).
  std::int64_t stale_reads_after_write = 0;
  // A failover (StormResult::promoted_s set): seconds from the promotion to the first
  // payment answered 200/201 after it (-1: none, or no promotion). A fault with
  // StormResult::audit_payments: the payments answered 200/201 from the fault's start to
  // the next fault's start whose key is not on the writer at the drill's end (-1: not
  // counted, or not countable).
  double first_payment_after_promotion_s = -1;
  std::int64_t confirmed_payments_lost = -1;
};

struct StormResult {
  StormSpec spec;
  double start_s = 0;  // since the drill began
  double end_s = 0;
  // The PostgreSQL drill's silence faults: how the drill proved the fault was caused
  // ("12 processes stopped ...; SELECT 1 unanswered for 800 ms"), and the milliseconds
  // from the fault's end to the first answer to SELECT 1 on the path it cut (the server,
  // the proxy, PgBouncer). Empty and -1 for the other faults and storms.
  std::string evidence{};
  double answered_again_ms = -1;
  // The PostgreSQL drill's failover and switchover: when the standby was promoted (seconds since
  // the drill began, as start_s); -1 for the other faults.
  double promoted_s = -1;
  // Its strategies carry confirmed_payments_lost (and first_payment_after_promotion_s):
  // a change of primary, and every fault of the HA drill.
  bool audit_payments = false;
  std::vector<StrategyResult> strategies;
};

struct TimelinePoint {
  double t = 0;
  std::string strategy;
  double requests_per_s = 0;
  double errors_per_s = 0;  // error pages + 503s
  int breaker = 0;          // 0 closed, 1 half-open, 2 open (holdfast and origin-breaker)
};

struct DrillResult {
  std::string engine = "sqlite";
  std::vector<StormResult> storms;
  std::vector<TimelinePoint> timeline;
  double seconds = 0;
  std::int64_t payments_sent = 0;     // across strategies
  std::int64_t payments_doubled = 0;  // rows beyond one per idempotency key (must be 0)
  // Payments answered 200/201 during the whole drill whose key is not on the writer at its
  // end (-1: not counted: no fault audits payments).
  std::int64_t confirmed_payments_lost = -1;
};

// Runs the drill. `progress(done_s, total_s, what)` is called a few times a second.
Result<DrillResult> run_drill(
    const DrillOptions& options,
    const std::function<void(double, double, const std::string&)>& progress = {});

// drill-report.md, drill-report.json and drill-timeline.svg in options.out_dir.
Status write_drill_reports(const DrillOptions& options, const DrillResult& result);
// The console table.
std::string drill_table(const DrillResult& result);

}  // namespace holdfast::panel
