// The drill's load, identical for every strategy: K virtual workers per panel that sign in,
// load the schedule page and now and then pay (with an Idempotency-Key); a cron-like batch
// writer per database; and a sampler of attempts, calls and breaker state per strategy.
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "drill_run.hpp"
#include "holdfast/core/random.hpp"
#include "http_client.hpp"

namespace holdfast::panel::drill {
namespace {

std::string demo_email(int i) {
  static const char* first[] = {"Ada",   "Bartek", "Chi",  "Dorota", "Emil",  "Fang",
                                "Gosia", "Huong",  "Igor", "Jana",   "Khanh", "Lena"};
  static const char* last[] = {"Nowak", "Tran", "Kowalska", "Nguyen", "Smith"};
  const int n = i % 60;
  return fmt::format("{}.{}@club.example", first[n / 5], last[n % 5]);
}

// The cookies a browser sends back: the session's and, on PostgreSQL, hf_wal (where the
// client's last write is), as every answer's Set-Cookie left them.
class CookieJar {
 public:
  void take(const http_client::Response& r) {
    for (auto [it, end] = r.headers.equal_range("Set-Cookie"); it != end; ++it) {
      const std::string& set = it->second;
      const std::size_t eq = set.find('=');
      if (eq == std::string::npos) continue;
      const std::size_t semi = set.find(';');
      const std::string name = set.substr(0, eq);
      const std::string value =
          set.substr(eq + 1, semi == std::string::npos ? semi : semi - eq - 1);
      if (value.empty() || set.find("Max-Age=0") != std::string::npos) {
        cookies_.erase(name);
      } else {
        cookies_[name] = value;
      }
    }
  }
  [[nodiscard]] bool has(const std::string& name) const { return cookies_.contains(name); }
  // The Cookie header's value.
  [[nodiscard]] std::string header() const {
    std::string out;
    for (const auto& [name, value] : cookies_) {
      if (!out.empty()) out += "; ";
      out += name + "=" + value;
    }
    return out;
  }

 private:
  std::map<std::string, std::string> cookies_;
};

// Signs in as demo user `w`: up to 50 tries, 100 ms apart. Returns the CSRF token; the jar
// has no session cookie when all failed or the load stopped.
std::string sign_in(http_client::Client& http, int w, const std::atomic<bool>& stop,
                    CookieJar& jar) {
  for (int tries = 0; tries < 50 && !stop; ++tries) {
    http_client::Params form{{"email", demo_email(w)}, {"password", "demo"}};
    if (auto r = http.Post("/login", form); r && r->status == 303) {
      jar.take(*r);
      if (jar.has("session")) return r->get_header_value("X-CSRF-Token");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return {};
}

// The UTC date now, "YYYY-MM-DD": the day whose schedule a worker asks for, and whose count
// of payments its payments join (the panel stamps them in UTC).
std::string utc_day() {
  return std::string(utc_stamp(WallClock::system().now()).view().substr(0, 10));
}

// Whether a worker's pages count its own payments. A day's payments only grow, so once a
// payment is confirmed every fresh page of that day must count at least one more than the
// last fresh page loaded before it was first sent. At midnight UTC the count starts again
// on the new day's page, and a payment sent before and confirmed after is not checked.
class OwnWrites {
 public:
  void paying(const std::string& day) {
    day_of_pay_ = day;
    floor_before_pay_ = day == day_ ? seen_ : -1;
  }
  void paid(const std::string& day) {
    must_see_ = floor_before_pay_ >= 0 && day == day_of_pay_ ? floor_before_pay_ + 1 : -1;
  }
  // Reads the count on `day`'s page; true when it misses the payment confirmed last
  // (checked on the first fresh page after it only).
  bool missed(const std::string& page, const std::string& day) {
    if (day != day_) {
      day_ = day;
      seen_ = -1;
      if (day != day_of_pay_) must_see_ = -1;
    }
    const std::int64_t count = payments_on(page);
    if (count < 0) return false;
    seen_ = std::max(seen_, count);
    const bool miss = must_see_ >= 0 && count < must_see_;
    must_see_ = -1;
    return miss;
  }

 private:
  // "today's payments: N" of the schedule page; -1 when absent.
  static std::int64_t payments_on(const std::string& page) {
    static constexpr std::string_view kLabel = "today's payments: ";
    const std::size_t at = page.find(kLabel);
    if (at == std::string::npos) return -1;
    return std::strtoll(page.c_str() + at + kLabel.size(), nullptr, 10);
  }

  std::string day_;         // the day of the pages seen_ counts
  std::string day_of_pay_;  // the day the payment being made was first sent
  std::int64_t seen_ = -1;
  std::int64_t floor_before_pay_ = -1;
  std::int64_t must_see_ = -1;
};

// Worker `w` of `inst`: signs in, then loads the schedule until the load stops; every
// pay_every-th request pays instead, and a payment not yet confirmed is repeated with its
// key. Its records join inst.records at the end.
void work(DrillRun& run, Instance& inst, int w) {
  const DrillOptions& options = run.options;
  std::vector<std::unique_ptr<http_client::Client>> clients;  // one per panel process
  for (int p = 0; p < inst.processes(); ++p) {
    auto& http =
        clients.emplace_back(std::make_unique<http_client::Client>("127.0.0.1", inst.port_of(p)));
    // A request without a byte of answer for kNoAnswerAfter is given up and recorded as
    // unanswered (status 0), never dropped.
    http->set_read_timeout(kNoAnswerAfter);
    http->set_connection_timeout(kNoAnswerAfter);
    http->set_keep_alive(true);
  }
  CookieJar jar;
  const std::string csrf =
      sign_in(*clients[static_cast<std::size_t>(inst.process_for(w, 0))], w, run.stop, jar);
  std::int64_t n = 0;
  std::string pending_key;
  OwnWrites own;
  std::vector<Record> mine;
  std::vector<Instance::Confirmed> confirmed;
  // The same pacing for worker w of every strategy: identical load.
  Random pace(options.seed * 7919 + static_cast<std::uint64_t>(w));
  while (!run.stop) {
    ++n;
    const double start = run.since();
    const bool pay = options.pay_every > 0 && n % options.pay_every == 0;
    const int process = inst.process_for(w, n);
    const std::string day = utc_day();
    http_client::Client& http = *clients[static_cast<std::size_t>(process)];
    http_client::Result r;
    if (pay) {
      if (pending_key.empty()) {
        pending_key = fmt::format("{}-{}-{}", inst.name, w, n);
        inst.payments_sent++;
        own.paying(day);
      }
      http_client::Headers h{
          {"Cookie", jar.header()}, {"X-CSRF-Token", csrf}, {"Idempotency-Key", pending_key}};
      r = http.Post("/payments", h,
                    http_client::Params{{"amount_cents", "1250"}, {"method", "card"}});
      if (r && (r->status == 200 || r->status == 201)) {
        confirmed.push_back({pending_key, run.since()});
        pending_key.clear();
        own.paid(day);
      }
    } else {
      r = http.Get("/dashboard/schedule?date=" + day, {{"Cookie", jar.header()}});
    }
    if (r) jar.take(*r);
    const double latency = (run.since() - start) * 1000.0;
    const int status = r ? r->status : 0;
    const bool stale = r && r->has_header("X-Holdfast-Stale");
    const bool missed = !pay && r && r->status == 200 && !stale && own.missed(r->body, day);
    if (missed) inst.stale_reads++;
    mine.push_back({start, latency, status, stale, missed, process, pay});
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(options.think_ms * pace.uniform(0.5, 1.5)));
  }
  std::lock_guard<std::mutex> lock(inst.mutex);
  inst.records.insert(inst.records.end(), mine.begin(), mine.end());
  inst.confirmed_keys.insert(inst.confirmed_keys.end(), confirmed.begin(), confirmed.end());
}

// A cron-like batch writer: a short write transaction every 2 s, connecting each time.
void write_batches(const DrillRun& run, const Instance& inst) {
  int i = 0;
  while (!run.stop) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(inst.path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
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
    for (int k = 0; k < 20 && !run.stop; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The sampler of one strategy: attempts, calls and breaker state every 100 ms (panel
// processes, read over HTTP) or 250 ms (a panel in this process).
void sample(DrillRun& run, Instance& inst) {
  const auto every = std::chrono::milliseconds(inst.probe ? 100 : 250);
  while (!run.stop) {
    const auto next = DrillRun::Steady::now() + every;
    const double t = run.since();
    Sample s;
    if (inst.probe) {
      s = inst.probe();
    } else {
      s.attempts = inst.store->attempts();
      s.calls = inst.store->calls();
      s.breaker = inst.breaker_state();
      s.open = {s.breaker == 2 ? std::uint8_t{Sample::kReadsOpen | Sample::kWritesOpen}
                               : std::uint8_t{0}};
    }
    s.t = t;
    {
      std::lock_guard<std::mutex> lock(inst.mutex);
      inst.samples.push_back(std::move(s));
    }
    std::this_thread::sleep_until(next);
  }
}

}  // namespace

void start_load(DrillRun& run) {
  run.t0 = DrillRun::Steady::now();
  for (auto& inst : run.instances) {
    Instance* raw = inst.get();
    for (int w = 0; w < run.options.workers; ++w) {
      run.threads.emplace_back([&run, raw, w] { work(run, *raw, w); });
    }
    if (!raw->path.empty()) run.threads.emplace_back([&run, raw] { write_batches(run, *raw); });
  }
  for (auto& inst : run.instances) {
    Instance* raw = inst.get();
    run.threads.emplace_back([&run, raw] { sample(run, *raw); });
  }
}

}  // namespace holdfast::panel::drill
