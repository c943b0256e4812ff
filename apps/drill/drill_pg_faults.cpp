// The PostgreSQL drill's faults, caused for real on the running cluster as FAULTS.md says
// (kinds and lengths in drill_pg.hpp). One fault hits the cluster, so every strategy's
// database meets it at the same instant; each is followed by a quiet gap.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "drill_pg_fault.hpp"

namespace holdfast::panel::drill {
namespace {

using faults::connect;
using faults::expect_role;
using faults::Fault;
using faults::kTerminateDrillBackends;
using faults::make_silence_fault;
using faults::run_on;
using std::chrono::seconds;

// write-lock, read-lock: ACCESS EXCLUSIVE on `table` of every database, held in an open
// transaction (the standby replays the lock too).
class LockFault final : public Fault {
 public:
  LockFault(const PgDrill& drill, std::string table) : drill_(drill), table_(std::move(table)) {}
  Status begin() override {
    for (const std::string& db : drill_.databases) {
      Result<pg::Connection> c = connect(drill_.cluster->primary_url(db), "holdfast-drill-lock");
      if (!c.ok()) return c.status();
      for (const std::string& sql : {std::string("SET lock_timeout = '5s'"), std::string("BEGIN"),
                                     "LOCK TABLE " + table_ + " IN ACCESS EXCLUSIVE MODE"}) {
        if (auto r = c->query(sql); !r.ok()) return Status(r.status()).annotate(sql + " on " + db);
      }
      holders_.push_back(std::move(*c));
    }
    return Status();
  }
  Status end() override {
    holders_.clear();  // closing the connection ends the transaction and its lock
    return Status();
  }

 private:
  const PgDrill& drill_;
  std::string table_;
  std::vector<pg::Connection> holders_;
};

// terminate: every client backend of the drill's databases terminated, on the primary and
// the standby, every 2 s.
class TerminateFault final : public Fault {
 public:
  explicit TerminateFault(const PgDrill& drill) : drill_(drill) {}
  Status begin() override {
    last_ = std::chrono::steady_clock::now();
    return terminate();
  }
  void tick() override {
    if (std::chrono::steady_clock::now() - last_ < seconds(2)) return;
    last_ = std::chrono::steady_clock::now();
    (void)terminate();
  }
  Status end() override { return Status(); }

 private:
  Status terminate() {
    (void)run_on(drill_.cluster->standby_url("postgres"), kTerminateDrillBackends);
    return run_on(drill_.cluster->primary_url("postgres"), kTerminateDrillBackends);
  }
  const PgDrill& drill_;
  std::chrono::steady_clock::time_point last_;
};

// stop, restart, standby-stop: pg-test-server.sh's `down` (pg_ctl stop -m fast) at the
// start, `up` at the end; or its standby-down and standby-up. The script acts on the
// primary or the standby of the moment, as the drill does (PgCluster).
class ServerDownFault final : public Fault {
 public:
  ServerDownFault(PgDrill& drill, bool standby)
      : drill_(drill),
        standby_(standby),
        down_(standby ? "standby-down" : "down"),
        up_(standby ? "standby-up" : "up") {}
  Status begin() override {
    const char* role = standby_ ? "standby" : "primary";
    const int port = standby_ ? drill_.cluster->standby_port() : drill_.cluster->primary_port();
    const std::string url = standby_ ? drill_.cluster->standby_url("postgres")
                                     : drill_.cluster->primary_url("postgres");
    if (Status s = expect_role(url, standby_, standby_ ? "the standby" : "the primary"); !s.ok())
      return s;
    Status s = drill_.cluster->script(down_);
    if (!s.ok()) return s;
    down_done_ = true;
    evidence_ = fmt::format(
        "the {} (port {}) stopped (pg_ctl stop -m fast), started again at the end", role, port);
    return Status();
  }
  Status end() override {
    if (!down_done_) return Status();
    down_done_ = false;
    return drill_.cluster->script(up_);
  }
  ~ServerDownFault() override {
    try {
      (void)end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
    }
  }

 private:
  PgDrill& drill_;
  bool standby_;
  std::string down_, up_;
  bool down_done_ = false;
};

// standby-lag: replay paused on the standby.
class ReplayPauseFault final : public Fault {
 public:
  explicit ReplayPauseFault(const PgDrill& drill) : drill_(drill) {}
  Status begin() override {
    // On a primary pg_wal_replay_pause() fails ("recovery is not in progress").
    Status s = run_on(drill_.cluster->standby_url("postgres"), "SELECT pg_wal_replay_pause()");
    paused_ = s.ok();
    if (paused_) {
      evidence_ =
          fmt::format("replay paused on the standby (port {})", drill_.cluster->standby_port());
    }
    return s;
  }
  Status end() override {
    if (!paused_) return Status();
    paused_ = false;
    return run_on(drill_.cluster->standby_url("postgres"), "SELECT pg_wal_replay_resume()");
  }
  ~ReplayPauseFault() override {
    try {
      (void)end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
    }
  }

 private:
  const PgDrill& drill_;
  bool paused_ = false;
};

// standby-slow: the proxy in front of the standby passes on everything the standby sends
// kStandbyAnswerDelay late; connections stay open and the standby answers all along: slow,
// not silent (FAULTS.md, "A slow copy"). Proved caused by SELECT 1 through the proxy
// answering no sooner than the delay (a new connection: a few round trips, each delayed),
// and undone by its answering in less than the delay again.
constexpr std::chrono::milliseconds kStandbyAnswerDelay{300};

class StandbySlowFault final : public Fault {
 public:
  explicit StandbySlowFault(const PgDrill& drill)
      : proxy_(drill.proxy_of(drill.cluster->standby_port())),
        port_(drill.cluster->standby_port()),
        direct_(drill.cluster->standby_url("postgres")),
        through_(with_port(direct_, proxy_.port())) {}
  Status begin() override {
    if (Status s = expect_role(direct_, true, "the standby"); !s.ok()) return s;
    Result<double> before = ask_within(through_, "SELECT 1", seconds(2));
    if (!before.ok()) return Status(before.status()).annotate("the standby through its proxy");
    proxy_.set_answer_delay(kStandbyAnswerDelay);
    Result<double> during = ask_within(through_, "SELECT 1", seconds(5));
    if (!during.ok()) {
      return Status(during.status()).annotate("the slowed standby was to answer, but");
    }
    if (*during < static_cast<double>(kStandbyAnswerDelay.count())) {
      return Status(Code::kInternal,
                    fmt::format("the standby through its proxy answered SELECT 1 in {:.0f} ms: "
                                "not slowed",
                                *during));
    }
    evidence_ = fmt::format(
        "the proxy in front of the standby (port {}) passes its answers on {} ms late: SELECT 1 "
        "on a new connection through it took {:.0f} ms before, {:.0f} ms at the start",
        port_, kStandbyAnswerDelay.count(), *before, *during);
    return Status();
  }
  Status end() override {
    proxy_.set_answer_delay(std::chrono::milliseconds(0));
    return Status();
  }
  Status check_undone() override {
    if (Status s = expect_answer(through_, "the standby through its proxy"); !s.ok()) return s;
    Result<double> after = ask_within(through_, "SELECT 1", seconds(2));
    if (!after.ok()) return Status(after.status()).annotate("the standby through its proxy");
    if (*after >= static_cast<double>(kStandbyAnswerDelay.count())) {
      return Status(Code::kInternal,
                    fmt::format("the standby through its proxy still took {:.0f} ms after the "
                                "fault's end",
                                *after));
    }
    evidence_ += fmt::format(", {:.0f} ms after its end", *after);
    return Status();
  }
  ~StandbySlowFault() override { proxy_.set_answer_delay(std::chrono::milliseconds(0)); }

 private:
  TcpProxy& proxy_;
  int port_;
  std::string direct_, through_;
};

// exhaust: the primary's connection slots taken until the server refuses one (53300), the
// drill's panels' backends (every strategy's database; PgBouncer's too) terminated and the
// slots they free taken as well, then kLeftForPanels given back. From then on, every
// 250 ms: when the panels hold more than kLeftForPanels (a reconnect won the race for a
// slot), the extra ones are terminated, idle ones first, and their slots taken again; when
// they hold fewer, slots are given back. So for the fault's length all panels of all
// strategies compete for kLeftForPanels connections on the primary, and a panel that
// has none gets 53300 when it connects. The standby is left alone.
class ExhaustFault final : public Fault {
 public:
  explicit ExhaustFault(const PgDrill& drill) : url_(drill.cluster->primary_url("postgres")) {}
  Status begin() override {
    Result<pg::Connection> control = connect(url_, "holdfast-drill-exhaust");
    if (!control.ok()) return control.status();
    control_.emplace(std::move(*control));
    take_slots(std::chrono::milliseconds(0));
    if (hogs_.empty()) return Status(Code::kFailedPrecondition, "could not take any connection");
    if (Result<pg::Rows> r = control_->query(kTerminateDrillBackends); !r.ok()) return r.status();
    take_slots(kRace);
    balance();
    return Status();
  }
  void tick() override {
    if (!control_ || std::chrono::steady_clock::now() - last_ < std::chrono::milliseconds(250))
      return;
    balance();
  }
  Status end() override {
    hogs_.clear();
    control_.reset();
    return Status();
  }

 private:
  static constexpr int kLeftForPanels = 4;
  static constexpr std::chrono::milliseconds kRace{200};

  // The panels' backends on the primary; -1 when they cannot be counted.
  std::int64_t panel_backends() {
    Result<pg::Rows> r = control_->query(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND "
        "datname LIKE 'drill\\_%'");
    if (!r.ok() || r->empty()) return -1;
    Result<long long> n = r->int64(0, 0);
    return n.ok() ? static_cast<std::int64_t>(*n) : -1;
  }
  // Terminates `n` of the panels' backends, idle ones first.
  void terminate(std::int64_t n) {
    (void)control_->query(fmt::format(
        "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity WHERE "
        "backend_type = 'client backend' AND datname LIKE 'drill\\_%' ORDER BY state = 'idle' "
        "DESC, random() LIMIT {}) t",
        n));
  }
  // Keeps the panels at kLeftForPanels connections and free slots together.
  void balance() {
    last_ = std::chrono::steady_clock::now();
    std::int64_t held = panel_backends();
    if (held < 0) return;
    if (held > kLeftForPanels) {
      terminate(held - kLeftForPanels);
      take_slots(kRace);
      held = panel_backends();
    }
    for (std::int64_t i = std::max<std::int64_t>(held, 0); i < kLeftForPanels && !hogs_.empty();
         ++i)
      hogs_.pop_back();
  }
  // Opens connections from four threads until the server refuses one; for `race` after
  // that, keeps trying (terminated backends free their slots within a few milliseconds,
  // and the panels reconnect at once).
  void take_slots(std::chrono::milliseconds race) {
    const auto until = std::chrono::steady_clock::now() + race;
    std::mutex mutex;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 2000; ++i) {
          Result<pg::Connection> c = connect(url_, "holdfast-drill-exhaust");
          if (c.ok()) {
            std::lock_guard<std::mutex> lock(mutex);
            hogs_.push_back(std::move(*c));
            continue;
          }
          if (std::chrono::steady_clock::now() >= until) return;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
    }
    for (std::thread& t : threads)
      t.join();
  }

  std::string url_;
  std::optional<pg::Connection> control_;
  std::vector<pg::Connection> hogs_;
  std::chrono::steady_clock::time_point last_;
};

// cpu: two CPU-burning backends per core (a cross join that never finishes), each ended by
// its statement_timeout or cancelled at the end.
class CpuFault final : public Fault {
 public:
  CpuFault(const PgDrill& drill, double seconds) : drill_(drill), seconds_(seconds) {}
  Status begin() override {
    const unsigned n = std::max(2u, 2 * std::thread::hardware_concurrency());
    const std::string url = drill_.cluster->primary_url("postgres");
    for (unsigned i = 0; i < n; ++i) {
      burners_.emplace_back([url, this] {
        Result<pg::Connection> c = connect(url, "holdfast-drill-cpu");
        if (!c.ok()) return;
        (void)c->set_statement_timeout(
            std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds_ + 2.0)));
        (void)c->query("SELECT count(*) FROM pg_class a, pg_class b, pg_class c, pg_class d");
      });
    }
    return Status();
  }
  Status end() override {
    if (burners_.empty()) return Status();
    (void)run_on(drill_.cluster->primary_url("postgres"),
                 "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE "
                 "application_name = 'holdfast-drill-cpu'");
    for (auto& t : burners_)
      t.join();
    burners_.clear();
    return Status();
  }
  ~CpuFault() override {
    try {
      (void)end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
    }
  }

 private:
  const PgDrill& drill_;
  double seconds_;
  std::vector<std::thread> burners_;
};

std::unique_ptr<Fault> make_fault(const StormSpec& spec, PgDrill& drill, const DrillRun& run) {
  if (std::unique_ptr<Fault> ha = faults::make_patroni_fault(spec, drill, run)) return ha;
  if (std::unique_ptr<Fault> silence = make_silence_fault(spec, drill, run)) return silence;
  const std::string& f = spec.fault;
  if (f == "write-lock") return std::make_unique<LockFault>(drill, "payments");
  if (f == "read-lock") return std::make_unique<LockFault>(drill, "games");
  if (f == "terminate") return std::make_unique<TerminateFault>(drill);
  if (f == "restart" || f == "stop") return std::make_unique<ServerDownFault>(drill, false);
  if (f == "exhaust") return std::make_unique<ExhaustFault>(drill);
  if (f == "cpu") return std::make_unique<CpuFault>(drill, spec.seconds);
  if (f == "standby-stop") return std::make_unique<ServerDownFault>(drill, true);
  if (f == "standby-lag") return std::make_unique<ReplayPauseFault>(drill);
  if (f == "standby-slow") return std::make_unique<StandbySlowFault>(drill);
  return nullptr;
}

std::string wall_now() {
  return std::string(utc_stamp(WallClock::system().now()).view());
}

// One fault: caused, held for spec.seconds, undone, then the gap.
Result<StormResult> run_fault(DrillRun& run, PgDrill& drill, const StormSpec& spec, Pacer& pacer) {
  const std::string what = fmt::format("{}, {:g} s", spec.fault, spec.seconds);
  std::unique_ptr<Fault> fault = make_fault(spec, drill, run);
  if (!fault) return Status(Code::kInvalidArgument, "unknown fault " + spec.fault);
  StormResult sr;
  sr.spec = spec;
  sr.start_s = run.since();
  const std::string wall_start = wall_now();
  pacer.report(what);
  Status began = fault->begin();
  if (!began.ok()) {
    (void)fault->end();
    run.stop_load();
    return began.annotate(what);
  }
  pacer.wait_until(sr.start_s + spec.seconds, what, [&] { fault->tick(); });
  Status ended = fault->end();
  sr.end_s = run.since();
  if (ended.ok()) ended = fault->check_undone();
  sr.evidence = fault->evidence();
  sr.answered_again_ms = fault->answered_again_ms();
  sr.promoted_s = fault->promoted_s();
  sr.audit_payments = fault->audits_payments();
  if (!ended.ok()) {
    run.stop_load();
    return ended.annotate(what + ": undoing it");
  }
  run.storm_wall.push_back({wall_start, wall_now()});
  if (!run.cancelled()) pacer.wait_until(sr.end_s + run.options.gap_s, what + " - recovery");
  return sr;
}

}  // namespace

double default_fault_seconds(const std::string& fault) {
  if (fault == "write-lock" || fault == "read-lock" || fault == "terminate") return 10;
  if (fault == "restart") return 0;
  if (fault == "stop" || fault == "standby-lag") return 15;
  if (fault == "exhaust" || fault == "cpu") return 20;
  if (fault == "standby-stop" || fault == "standby-slow") return 10;
  // The freeze, the promotion 3 s later, the fence 20 s after it, and two seconds for the
  // old primary's rebuild (about 0.5-1.5 s on the drill's small cluster), which may run
  // past the end: the fault ends once the rebuilt standby streams.
  if (fault == "failover" || fault == "failover-async") return 25;
  // The switchover at its start takes a second or two; then the new primary serves; the
  // rebuild of the old primary comes after these 10 s.
  if (fault == "switchover") return 10;
  // Patroni (--ha patroni): the kill is restarted by Patroni within a few seconds; the
  // freeze is 30 s (a standby is promoted after about ttl); etcd is away 20 s.
  if (fault == "patroni-kill" || fault == "patroni-switchover") return 10;
  if (fault == "patroni-freeze") return 30;
  if (fault == "dcs-down" || fault == "dcs-down-failsafe") return 20;
  if (fault == "hang" || fault == "blackhole" || fault == "standby-hang" || fault == "pooler-pause")
    return 10;
  return -1;
}

Status run_pg_faults(DrillRun& run, PgDrill& drill, const std::vector<StormSpec>& faults,
                     const Progress& progress, DrillResult& result) {
  Pacer pacer(run, faults, progress);
  pacer.wait_until(run.options.warmup_s, "warm-up");
  for (const StormSpec& spec : faults) {
    if (run.cancelled()) return Status();
    Result<StormResult> sr = run_fault(run, drill, spec, pacer);
    if (!sr.ok()) return sr.status();
    result.storms.push_back(*sr);
  }
  return Status();
}

}  // namespace holdfast::panel::drill
