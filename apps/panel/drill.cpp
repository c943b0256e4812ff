#include "drill.hpp"

#include <httplib.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "club_store.hpp"
#include "holdfast/random.hpp"
#include "holdfast/sqlite_log_store.hpp"
#include "logging.hpp"
#include "server.hpp"
#include "svg_plot.hpp"

namespace holdfast::panel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Steady = std::chrono::steady_clock;

// A request counts as served during a storm when it got a fresh page within this long: the
// origins' RETRY_BUDGET_MS, what a user waits before giving up.
constexpr double kServedWithinMs = 6000.0;

struct Record {
  double start_s;
  double latency_ms;
  int status;
  bool stale;
};

struct Sample {
  double t;
  std::uint64_t attempts;
  int breaker;
};

// One strategy's panel, its workers and what they saw.
struct Instance {
  Strategy strategy{};
  std::string path;
  std::int64_t payments_before = 0;  // the highest payment id of the demo data
  std::unique_ptr<ClubStore> store;
  PanelLogging logging;
  std::unique_ptr<PanelServer> server;
  std::mutex mutex;
  std::vector<Record> records;
  std::vector<Sample> samples;
  std::atomic<std::int64_t> payments_sent{0};

  void close_idle_connections() {
    store->database().close_idle_connections();
    if (logging.store) {
      static_cast<sqlite::SqliteLogStore*>(logging.store.get())
          ->database()
          .close_idle_connections();
    }
    if (logging.sync_sink) logging.sync_sink->database().close_idle_connections();
  }

  // 0 closed, 1 half-open, 2 open: the more open of the read and write breakers.
  int breaker_state() {
    const auto level = [](const Shield* s) {
      if (s == nullptr) return 0;
      switch (s->breaker().state()) {
        case BreakerState::kClosed:
          return 0;
        case BreakerState::kHalfOpen:
          return 1;
        default:
          return 2;
      }
    };
    if (store->read_shield() != nullptr) {
      return std::max(level(store->read_shield()), level(store->write_shield()));
    }
    if (OriginBreaker* b = store->origin_breaker()) {
      switch (b->state()) {
        case OriginBreaker::State::kClosed:
          return 0;
        case OriginBreaker::State::kHalfOpen:
          return 1;
        case OriginBreaker::State::kOpen:
          return 2;
      }
    }
    return 0;
  }
};

std::string today_utc() {
  return std::string(utc_stamp(WallClock::system().now()).view()).substr(0, 10);
}

std::string demo_email(int i) {
  static const char* first[] = {"Ada",   "Bartek", "Chi",  "Dorota", "Emil",  "Fang",
                                "Gosia", "Huong",  "Igor", "Jana",   "Khanh", "Lena"};
  static const char* last[] = {"Nowak", "Tran", "Kowalska", "Nguyen", "Smith"};
  const int n = i % 60;
  return fmt::format("{}.{}@club.example", first[n / 5], last[n % 5]);
}

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
                        std::initializer_list<std::string> params) {
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

std::string kind_name(StormKind k) {
  return k == StormKind::kWrite ? "write" : "read";
}

}  // namespace

std::vector<StormSpec> default_storms() {
  std::vector<StormSpec> storms;
  for (double s : {2.0, 5.0, 20.0}) {
    storms.push_back({StormKind::kWrite, s});
    storms.push_back({StormKind::kRead, s});
  }
  return storms;
}

Result<DrillResult> run_drill(
    const DrillOptions& options,
    const std::function<void(double, double, const std::string&)>& progress) {
  if (options.strategies.empty()) return Status(Code::kInvalidArgument, "no strategies to run");
  if (options.workers < 1 || options.workers > 64) {
    return Status(Code::kInvalidArgument, "workers must be between 1 and 64");
  }
  const std::vector<StormSpec> storms = options.storms.empty() ? default_storms() : options.storms;
  std::error_code ec;
  fs::create_directories(fs::path(options.out_dir) / "db", ec);
  if (ec) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot create {}: {}", options.out_dir, ec.message()));
  }
  const std::string today = today_utc();

  // One fresh database and panel per strategy.
  std::vector<std::unique_ptr<Instance>> instances;
  for (Strategy s : options.strategies) {
    auto inst = std::make_unique<Instance>();
    inst->strategy = s;
    inst->path = (fs::path(options.out_dir) / "db" / fmt::format("{}.db", to_string(s))).string();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"})
      fs::remove(inst->path + suffix, ec);
    ClubStore::Options store_options;
    store_options.path = inst->path;
    store_options.strategy = s;
    Result<std::unique_ptr<ClubStore>> store = ClubStore::open(store_options);
    if (!store.ok()) return store.status();
    inst->store = std::move(*store);
    if (Status st = inst->store->ensure_demo_data(today); !st.ok()) return st;
    auto last = inst->store->database().query_one<std::int64_t>(
        "SELECT coalesce(max(id), 0) FROM payments");
    if (!last.ok()) return last.status();
    inst->payments_before = last->value_or(0);
    Result<PanelLogging> logging = make_logging(
        inst->path, s, Clock::system(), /*console=*/false,
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(options.log_pause_s)));
    if (!logging.ok()) return logging.status();
    inst->logging = std::move(*logging);
    PanelServer::Options server_options;
    server_options.store = inst->store.get();
    server_options.logger = inst->logging.logger.get();
    inst->server = std::make_unique<PanelServer>(server_options);
    if (Status st = inst->server->start(); !st.ok()) return st;
    instances.push_back(std::move(inst));
  }

  const Steady::time_point t0 = Steady::now();
  const auto since = [t0] { return std::chrono::duration<double>(Steady::now() - t0).count(); };
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;

  // Virtual workers: sign in, then load the schedule; every pay_every-th request pays.
  for (auto& inst_ptr : instances) {
    Instance* inst = inst_ptr.get();
    for (int w = 0; w < options.workers; ++w) {
      threads.emplace_back([inst, w, &options, &stop, &since, today] {
        httplib::Client http("127.0.0.1", inst->server->port());
        http.set_read_timeout(std::chrono::seconds(60));
        http.set_keep_alive(true);
        std::string cookie;
        std::string csrf;  // the session's CSRF token, sent with each payment form
        for (int tries = 0; tries < 50 && cookie.empty() && !stop; ++tries) {
          httplib::Params form{{"email", demo_email(w)}, {"password", "demo"}};
          if (auto r = http.Post("/login", form); r && r->status == 303) {
            const std::string set = r->get_header_value("Set-Cookie");
            cookie = set.substr(0, set.find(';'));
            csrf = r->get_header_value("X-CSRF-Token");
          } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }
        const httplib::Headers page_headers{{"Cookie", cookie}};
        std::int64_t n = 0;
        std::string pending_key;  // a payment not yet confirmed is repeated with its key
        std::vector<Record> mine;
        // The same pacing for worker w of every strategy: identical load.
        Random pace(options.seed * 7919 + static_cast<std::uint64_t>(w));
        while (!stop) {
          ++n;
          const double start = since();
          const bool pay = options.pay_every > 0 && n % options.pay_every == 0;
          httplib::Result r(nullptr, httplib::Error::Unknown);
          if (pay) {
            if (pending_key.empty()) {
              pending_key = fmt::format("{}-{}-{}", to_string(inst->strategy), w, n);
              inst->payments_sent++;
            }
            httplib::Headers h{
                {"Cookie", cookie}, {"X-CSRF-Token", csrf}, {"Idempotency-Key", pending_key}};
            r = http.Post("/payments", h,
                          httplib::Params{{"amount_cents", "1250"}, {"method", "card"}});
            if (r && (r->status == 200 || r->status == 201)) pending_key.clear();
          } else {
            r = http.Get("/dashboard/schedule?date=" + today, page_headers);
          }
          const double latency = (since() - start) * 1000.0;
          const int status = r ? r->status : 0;
          const bool stale = r && r->has_header("X-Holdfast-Stale");
          mine.push_back({start, latency, status, stale});
          std::this_thread::sleep_for(
              std::chrono::duration<double, std::milli>(options.think_ms * pace.uniform(0.5, 1.5)));
        }
        std::lock_guard<std::mutex> lock(inst->mutex);
        inst->records.insert(inst->records.end(), mine.begin(), mine.end());
      });
    }
    // A cron-like batch writer: a short write transaction every 2 s, connecting each time.
    threads.emplace_back([inst, &stop] {
      int i = 0;
      while (!stop) {
        sqlite3* db = nullptr;
        if (sqlite3_open_v2(inst->path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
          sqlite3_busy_timeout(db, 5000);
          const std::string sql = fmt::format(
              "BEGIN IMMEDIATE; CREATE TABLE IF NOT EXISTS drill_batch(id INTEGER PRIMARY KEY, "
              "note TEXT); INSERT INTO drill_batch(note) VALUES ('cron batch {}'); COMMIT;",
              ++i);
          if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
            sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
          }
        }
        sqlite3_close_v2(db);
        for (int k = 0; k < 20 && !stop; ++k)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }

  // The sampler: attempts and breaker state every 250 ms.
  threads.emplace_back([&instances, &stop, &since] {
    while (!stop) {
      const double t = since();
      for (auto& inst : instances) {
        Sample s{t, inst->store->attempts(), inst->breaker_state()};
        std::lock_guard<std::mutex> lock(inst->mutex);
        inst->samples.push_back(s);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });

  double total = options.warmup_s;
  for (const StormSpec& s : storms)
    total += s.seconds + options.gap_s;
  const auto wait_until = [&](double t, const std::string& what,
                              const std::function<void()>& tick = {}) {
    while (since() < t) {
      if (progress) progress(since(), total, what);
      if (tick) tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };

  DrillResult result;
  std::vector<std::pair<std::string, std::string>> storm_wall;  // utc stamps of each storm
  double t = options.warmup_s;
  wait_until(t, "warm-up");
  for (const StormSpec& spec : storms) {
    const std::string what = fmt::format("{} storm, {:g} s", kind_name(spec.kind), spec.seconds);
    // Every file is locked at the same instant (one thread each).
    std::vector<std::unique_ptr<LockStorm>> locks;
    for (auto& inst : instances) {
      Instance* raw = inst.get();
      locks.push_back(std::make_unique<LockStorm>(inst->path, spec.kind,
                                                  [raw] { raw->close_idle_connections(); }));
    }
    std::vector<std::thread> starters;
    std::vector<Status> started(locks.size());
    for (std::size_t i = 0; i < locks.size(); ++i) {
      starters.emplace_back([&, i] { started[i] = locks[i]->begin(); });
    }
    for (auto& th : starters)
      th.join();
    StormResult sr;
    sr.spec = spec;
    sr.start_s = since();
    const std::string wall_start(utc_stamp(WallClock::system().now()).view());
    for (const Status& st : started) {
      if (!st.ok()) {
        stop = true;
        for (auto& th : threads)
          th.join();
        return Status(st).annotate(what);
      }
    }
    // A read storm blocks connections that open while it holds the file; the panels keep
    // recycling idle connections, so none that opened before the storm outlives it.
    wait_until(sr.start_s + spec.seconds, what, [&] {
      if (spec.kind != StormKind::kRead) return;
      for (auto& inst : instances)
        inst->close_idle_connections();
    });
    for (auto& l : locks)
      l->end();
    sr.end_s = since();
    storm_wall.emplace_back(wall_start, std::string(utc_stamp(WallClock::system().now()).view()));
    result.storms.push_back(sr);
    t = sr.end_s + options.gap_s;
    wait_until(t, what + " - recovery");
  }
  // Let paused log sinks come back, so the gap lines they write before their next entry
  // can be counted: wait for the pauses to end, then a little more traffic.
  const double tail_start = since();
  for (;;) {
    bool all = true;
    for (auto& inst : instances) {
      if (inst->logging.sink && inst->logging.sink->paused()) all = false;
    }
    if (all || since() - tail_start > options.log_tail_s) break;
    if (progress) progress(since(), total, "waiting for paused log sinks to resume");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (since() - tail_start > 0.5) wait_until(since() + 2.0, "log sinks resumed");
  stop = true;
  for (auto& th : threads)
    th.join();
  for (auto& inst : instances) {
    if (inst->logging.sink) inst->logging.sink->flush(std::chrono::seconds(5));
    inst->server->stop();
  }
  result.seconds = since();

  // Per storm period: from the storm's start to the next storm's start.
  for (std::size_t si = 0; si < result.storms.size(); ++si) {
    StormResult& sr = result.storms[si];
    const double from = sr.start_s;
    // The last storm's period ends after its gap: the log tail that follows is not storm.
    const double to =
        si + 1 < result.storms.size() ? result.storms[si + 1].start_s : sr.end_s + options.gap_s;
    const std::string wall_from = storm_wall[si].first;
    const std::string wall_end = storm_wall[si].second;
    for (auto& inst : instances) {
      StrategyResult r;
      r.name = std::string(to_string(inst->strategy));
      std::vector<double> latencies;
      std::int64_t during = 0;
      std::int64_t served_during = 0;
      for (const Record& rec : inst->records) {
        if (rec.start_s < from || rec.start_s >= to) continue;
        ++r.requests;
        latencies.push_back(rec.latency_ms);
        const bool holdfast_busy = inst->strategy == Strategy::kHoldfast && rec.status == 503;
        bool fresh = false;
        if (holdfast_busy) {
          ++r.status_503;
        } else if (rec.status >= 500 || rec.status == 0) {
          ++r.error_pages;
        } else if (rec.stale) {
          ++r.stale;
        } else if (rec.status >= 200 && rec.status < 300) {
          ++r.served;
          fresh = true;
        }
        if (rec.start_s < sr.end_s) {
          ++during;
          // Served: a fresh page within the origin's 6 s budget (nobody waits 20 s).
          if (fresh && rec.latency_ms <= kServedWithinMs) ++served_during;
        }
        // Back: the last answer that was not a fresh page, from the release until the next
        // storm starts (what happens after that is the next storm's).
        const double answered = rec.start_s + rec.latency_ms / 1000.0;
        if (!fresh && answered > sr.end_s && answered <= to)
          r.back_after_s = std::max(r.back_after_s, answered - sr.end_s);
      }
      r.served_during_storm_pct =
          during > 0 ? 100.0 * static_cast<double>(served_during) / static_cast<double>(during)
                     : 100.0;
      r.p50_ms = percentile(latencies, 0.50);
      r.p99_ms = percentile(latencies, 0.99);
      r.max_ms = latencies.empty() ? 0 : latencies.back();
      std::uint64_t a0 = 0, a1 = 0;
      for (const Sample& s : inst->samples) {
        if (s.t <= from) a0 = s.attempts;
        if (s.t <= std::min(to, result.seconds)) a1 = s.attempts;
      }
      r.attempts_per_request =
          r.requests > 0 ? static_cast<double>(a1 - a0) / static_cast<double>(r.requests) : 0.0;
      r.log_rows_during_storm = count_rows(
          inst->path, "SELECT count(*) FROM logs WHERE created_at >= ?1 AND created_at < ?2",
          {wall_from, wall_end});
      r.gap_line = count_rows(inst->path,
                              "SELECT count(*) FROM logs WHERE message LIKE 'Log persistence "
                              "paused%' AND created_at >= ?1",
                              {wall_from}) > 0;
      sr.strategies.push_back(r);
    }
  }
  // The timeline, per strategy, from consecutive samples.
  for (auto& inst : instances) {
    const int buckets = static_cast<int>(std::ceil(result.seconds)) + 1;
    std::vector<double> req(static_cast<std::size_t>(buckets)), err(req.size());
    for (const Record& rec : inst->records) {
      const auto b = static_cast<std::size_t>(rec.start_s);
      if (b >= req.size()) continue;
      req[b] += 1;
      if (rec.status >= 500 || rec.status == 0) err[b] += 1;
    }
    for (int b = 0; b < buckets; ++b) {
      int breaker = 0;
      for (const Sample& s : inst->samples) {
        if (s.t >= b && s.t < b + 1) breaker = std::max(breaker, s.breaker);
      }
      result.timeline.push_back({static_cast<double>(b), std::string(to_string(inst->strategy)),
                                 req[static_cast<std::size_t>(b)], err[static_cast<std::size_t>(b)],
                                 breaker});
    }
    // Every drill payment carries a key; applied once per key means payment rows made
    // during the drill equal the keys recorded.
    result.payments_sent += inst->payments_sent.load();
    const std::int64_t rows =
        count_rows(inst->path, "SELECT count(*) FROM payments WHERE id > CAST(?1 AS INTEGER)",
                   {std::to_string(inst->payments_before)});
    const std::int64_t keys = count_rows(
        inst->path, "SELECT count(*) FROM idempotency_keys WHERE key LIKE ?1", {"%:payments:%"});
    if (rows > keys && keys >= 0) result.payments_doubled += rows - keys;
  }
  return result;
}

std::string drill_table(const DrillResult& result) {
  std::string out;
  for (const StormResult& s : result.storms) {
    out += fmt::format("\n{} lock storm, {:g} s (from t={:.1f} s; counted until the next storm)\n",
                       kind_name(s.spec.kind), s.spec.seconds, s.start_s);
    out += fmt::format("  {:<15}{:>9}{:>8}{:>7}{:>7}{:>9}{:>8}{:>9}{:>9}{:>9}{:>10}{:>10}{:>6}\n",
                       "strategy", "requests", "errors", "503", "stale", "served", "back s",
                       "p50 ms", "p99 ms", "max ms", "attempts/r", "log rows", "gap");
    for (const StrategyResult& r : s.strategies) {
      out += fmt::format(
          "  "
          "{:<15}{:>9}{:>8}{:>7}{:>7}{:>8.0f}%{:>8.1f}{:>9.0f}{:>9.0f}{:>9.0f}{:>10.2f}{:>10}{:>6}"
          "\n",
          r.name, r.requests, r.error_pages, r.status_503, r.stale, r.served_during_storm_pct,
          r.back_after_s, r.p50_ms, r.p99_ms, r.max_ms, r.attempts_per_request,
          r.log_rows_during_storm, r.gap_line ? "yes" : "no");
    }
  }
  out += fmt::format("\npayments sent: {}; applied twice: {}\n", result.payments_sent,
                     result.payments_doubled);
  return out;
}

Status write_drill_reports(const DrillOptions& options, const DrillResult& result) {
  const fs::path dir(options.out_dir);
  json j;
  j["seconds"] = result.seconds;
  j["workers"] = options.workers;
  j["seed"] = options.seed;
  j["payments_sent"] = result.payments_sent;
  j["payments_applied_twice"] = result.payments_doubled;
  j["storms"] = json::array();
  for (const StormResult& s : result.storms) {
    json storm = {{"seconds", s.spec.seconds},
                  {"kind", kind_name(s.spec.kind)},
                  {"start_s", s.start_s},
                  {"end_s", s.end_s},
                  {"strategies", json::array()}};
    for (const StrategyResult& r : s.strategies) {
      storm["strategies"].push_back({{"name", r.name},
                                     {"requests", r.requests},
                                     {"served", r.served},
                                     {"served_during_storm_pct", r.served_during_storm_pct},
                                     {"back_after_s", r.back_after_s},
                                     {"error_pages", r.error_pages},
                                     {"status_503", r.status_503},
                                     {"stale", r.stale},
                                     {"p50_ms", r.p50_ms},
                                     {"p99_ms", r.p99_ms},
                                     {"max_ms", r.max_ms},
                                     {"attempts_per_request", r.attempts_per_request},
                                     {"log_rows_during_storm", r.log_rows_during_storm},
                                     {"gap_line", r.gap_line}});
    }
    j["storms"].push_back(storm);
  }
  std::ofstream(dir / "drill-report.json") << j.dump(2) << "\n";

  std::string md = "# holdfast drill\n\n";
  md += fmt::format(
      "{} workers per strategy, {:.0f} s in all. Each storm is counted from its start to the next "
      "storm's start, so recovery is included. *errors*: error pages (any 5xx other than "
      "holdfast's 503); *503*: holdfast's \"busy, retry in N s\" page; *stale*: the last good "
      "schedule with an \"as of\" banner; *served during storm*: requests started during the "
      "storm that got a fresh page within 6 s; *back after*: from the lock's release to the last "
      "answer "
      "that was not a fresh page, until the next storm starts.\n",
      options.workers, result.seconds);
  for (const StormResult& s : result.storms) {
    md += fmt::format("\n## {} lock storm, {:g} s\n\n", kind_name(s.spec.kind), s.spec.seconds);
    md +=
        "| strategy | requests | error pages | 503 | stale | served during storm | back after | "
        "p50 ms | p99 ms | max ms | attempts/request | log rows during storm | gap line |\n";
    md += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (const StrategyResult& r : s.strategies) {
      md += fmt::format(
          "| {} | {} | {} | {} | {} | {:.0f} % | {:.1f} s | {:.0f} | {:.0f} | {:.0f} | {:.2f} | {} "
          "| "
          "{} |\n",
          r.name, r.requests, r.error_pages, r.status_503, r.stale, r.served_during_storm_pct,
          r.back_after_s, r.p50_ms, r.p99_ms, r.max_ms, r.attempts_per_request,
          r.log_rows_during_storm, r.gap_line ? "yes" : "no");
    }
  }
  md += fmt::format("\nPayments sent: {}; applied twice: {}.\n\n![timeline](drill-timeline.svg)\n",
                    result.payments_sent, result.payments_doubled);
  std::ofstream(dir / "drill-report.md") << md;

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
      span.label = fmt::format("{} {:g}s", kind_name(s.spec.kind), s.spec.seconds);
      c.spans.push_back(span);
    }
  }
  charts[0].y.label = "requests/s";
  charts[1].y.label = "errors/s";
  charts[2].y.label = "state";
  charts[2].y.max = 2;
  for (Strategy st : options.strategies) {
    const std::string name(to_string(st));
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
    if (st == Strategy::kHoldfast || st == Strategy::kOriginBreaker)
      charts[2].series.push_back(brk);
  }
  std::ofstream(dir / "drill-timeline.svg") << svg::render(charts);
  if (!fs::exists(dir / "drill-report.json")) {
    return Status(Code::kFailedPrecondition, "could not write the reports in " + dir.string());
  }
  return Status();
}

}  // namespace holdfast::panel
