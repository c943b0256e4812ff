// The PostgreSQL drill's faults, caused for real on the running cluster as FAULTS.md says
// (kinds and lengths in drill_pg.hpp). One fault hits the cluster, so every strategy's
// database meets it at the same instant; each is followed by a quiet gap.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "drill_pg_run.hpp"
#include "drill_pg_silence.hpp"
#include "holdfast/postgres_connection.hpp"

namespace holdfast::panel::drill {
namespace {

using std::chrono::seconds;

Result<pg::Connection> connect(const std::string& url, const char* application) {
  pg::ConnectOptions o;
  o.conninfo = url;
  o.application_name = application;
  o.connect_timeout = seconds(3);
  return pg::Connection::open(o);
}

// Runs one statement on a connection of its own.
Status run_on(const std::string& url, const char* sql) {
  Result<pg::Connection> conn = connect(url, "holdfast-drill");
  if (!conn.ok()) return conn.status();
  Result<pg::Rows> r = conn->query(sql);
  return r.ok() ? Status() : r.status();
}

// Every client backend of the drill's databases (the panels' and PgBouncer's connections).
constexpr const char* kTerminateDrillBackends =
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> "
    "pg_backend_pid() AND backend_type = 'client backend' AND datname LIKE 'drill\\_%'";

// A fault: begin() causes it, tick() runs every 50 ms while it is held, end() undoes it
// (also after a failed begin(); idempotent). The destructor lets go of what is left.
// A silence fault also says how it proved it was caused (evidence) and how long after
// end() the path it cut answered SELECT 1 again (check_undone(); answered_again_ms; -1:
// not checked).
class Fault {
 public:
  virtual ~Fault() = default;
  virtual Status begin() = 0;
  virtual void tick() {}
  virtual Status end() = 0;
  // After end() (the fault's end is taken between the two): the path the fault cut
  // answers again.
  virtual Status check_undone() { return Status(); }
  [[nodiscard]] const std::string& evidence() const { return evidence_; }
  [[nodiscard]] double answered_again_ms() const { return answered_again_ms_; }
  // A failover's: when the standby became the primary (seconds since the load began);
  // -1 for the others, or when it was not promoted.
  [[nodiscard]] virtual double promoted_s() const { return -1; }

 protected:
  // Proof of silence: `url` must not answer SELECT 1 within `patience`.
  static Status expect_silence(const std::string& url, const char* what, Duration patience) {
    Result<double> r = ask_within(url, "SELECT 1", patience);
    if (r.ok()) {
      return Status(Code::kInternal,
                    fmt::format("{} still answered SELECT 1 ({:.0f} ms)", what, *r));
    }
    if (r.status().code() != Code::kDeadlineExceeded) {
      return Status(r.status()).annotate(fmt::format("{} was to be silent, but", what));
    }
    return Status();
  }
  // After the undoing: `url` answers SELECT 1 again within 10 s, or the fault was not
  // undone.
  Status expect_answer(const std::string& url, const char* what) {
    Result<double> r = wait_for_answer(url, seconds(10));
    if (!r.ok()) {
      return Status(r.status())
          .annotate(fmt::format("{} did not answer within 10 s of the fault's end", what));
    }
    answered_again_ms_ = *r;
    return Status();
  }

  std::string evidence_;
  double answered_again_ms_ = -1;
};

// How long a silence fault's proof waits for an answer that must not come. Below
// PgBouncer's query_wait_timeout in the drill (1 s), which would end a paused query.
constexpr std::chrono::milliseconds kSilenceProof{800};

// hang, standby-hang: the server's postmaster and all its children stopped (SIGSTOP),
// continued (SIGCONT) at the end, by the destructor at the latest.
class HangFault final : public Fault {
 public:
  HangFault(const PgDrill& drill, bool standby, double seconds)
      : seconds_(seconds),
        dir_(standby ? drill.cluster->standby_dir() : drill.cluster->primary_dir()),
        url_(standby ? drill.cluster->standby_url("postgres")
                     : drill.cluster->primary_url("postgres")),
        what_(standby ? "the frozen standby" : "the frozen primary") {}
  Status begin() override {
    // The guard continues the server 10 s after the fault's planned end, if this process
    // could not.
    const auto guard =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds_ + 10.0));
    if (Status s = frozen_.freeze(dir_, guard); !s.ok()) return s;
    if (Status s = expect_silence(url_, what_, kSilenceProof); !s.ok()) return s;
    evidence_ = fmt::format(
        "{} processes stopped (postmaster {} and its children); SELECT 1 unanswered for {} ms",
        frozen_.processes(), frozen_.postmaster(), kSilenceProof.count());
    return Status();
  }
  Status end() override {
    thawed_ = frozen_.processes() > 0;
    frozen_.thaw();
    return Status();
  }
  Status check_undone() override { return thawed_ ? expect_answer(url_, what_) : Status(); }

 private:
  double seconds_;
  std::string dir_, url_;
  const char* what_;
  bool thawed_ = false;
  FrozenServer frozen_;  // its destructor continues what is still stopped
};

// failover, failover-async: the primary frozen as in hang (every process SIGSTOP), the
// standby promoted kPromoteAfter later (pg_promote(), which returns once it takes
// writes), the old primary fenced kFenceAfter after the promotion (SIGKILL to its frozen
// processes: it never answers again, so nothing it still held is confirmed to anyone).
// The cluster then knows the promoted standby as its primary (the audit counts there)
// and has no standby: a failover runs last. PgBouncer, when the drill runs one, is
// repointed at the new primary right after the promotion (RELOAD of its ini). `failover` turns on
// synchronous replication first (ALTER SYSTEM synchronous_standby_names = '*', synchronous_commit =
// on, reload, and waits until the standby is reported sync), so a payment the client was told is
// applied is on the standby before the freeze; `failover-async` leaves replication
// asynchronous, and the report counts what that loses.
class FailoverFault final : public Fault {
 public:
  // At the default length (25 s); a scaled fault scales both.
  static constexpr double kPromoteAfter = 3.0;
  static constexpr double kFenceAfter = 20.0;

  FailoverFault(PgDrill& drill, const DrillRun& run, bool synchronous, double seconds)
      : drill_(drill),
        run_(run),
        synchronous_(synchronous),
        seconds_(seconds),
        promote_after_(kPromoteAfter * seconds / default_fault_seconds("failover")),
        fence_after_(kFenceAfter * seconds / default_fault_seconds("failover")) {}
  Status begin() override {
    old_dir_ = drill_.cluster->primary_dir();
    const std::string primary = drill_.cluster->primary_url("postgres");
    standby_ = drill_.cluster->standby_url("postgres");
    std::string sync = "asynchronous replication";
    if (synchronous_) {
      sync_on_ = true;
      for (const char* sql :
           {"ALTER SYSTEM SET synchronous_standby_names = '*'",
            "ALTER SYSTEM SET synchronous_commit = 'on'", "SELECT pg_reload_conf()"}) {
        if (Status st = run_on(primary, sql); !st.ok()) return st.annotate(sql);
      }
      Result<double> ms = wait_for_sync(primary);
      if (!ms.ok()) return ms.status();
      sync =
          fmt::format("synchronous replication (the standby sync {:.0f} ms after the reload)", *ms);
    }
    const auto guard =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds_ + 10.0));
    if (Status st = frozen_.freeze(old_dir_, guard); !st.ok()) return st;
    frozen_at_ = run_.since();
    if (Status st = expect_silence(primary, "the frozen primary", kSilenceProof); !st.ok())
      return st;
    evidence_ = fmt::format(
        "{}; {} processes of the primary stopped (postmaster {}), SELECT 1 "
        "unanswered for {} ms",
        sync, frozen_.processes(), frozen_.postmaster(), kSilenceProof.count());
    began_ = true;
    return Status();
  }
  void tick() override {
    const double t = run_.since();
    if (!promote_tried_ && frozen_at_ >= 0 && t >= frozen_at_ + promote_after_) promote();
    if (promoted_s_ >= 0 && !fenced_ && t >= promoted_s_ + fence_after_) fence();
  }
  Status end() override {
    if (!promote_tried_ && (!began_ || run_.cancelled())) {
      // begin() failed, or the drill was interrupted before the promotion: nothing failed
      // over, so the primary is continued (not fenced) and replication is asynchronous
      // again.
      frozen_.thaw();
      if (sync_on_) turn_sync_off(drill_.cluster->primary_url("postgres"));
      sync_on_ = false;
      return Status();
    }
    if (!promote_tried_) promote();
    if (promoted_s_ < 0) {  // the promotion failed: the old primary is all there is
      frozen_.thaw();
      if (sync_on_) turn_sync_off(drill_.cluster->primary_url("postgres"));
      sync_on_ = false;
      return promoted_;
    }
    fence();
    return promoted_;
  }
  Status check_undone() override {
    if (!promoted_.ok()) return Status();
    if (Status s = expect_answer(drill_.cluster->primary_url("postgres"), "the new primary");
        !s.ok())
      return s;
    Result<pg::Connection> c = connect(drill_.cluster->primary_url("postgres"), "holdfast-drill");
    if (!c.ok()) return c.status();
    Result<pg::Rows> r = c->query("SELECT pg_is_in_recovery()::int");
    if (!r.ok()) return r.status();
    Result<long long> in_recovery = r->int64(0, 0);
    if (!in_recovery.ok() || *in_recovery != 0)
      return Status(Code::kInternal, "the promoted standby is still in recovery");
    return Status();
  }
  [[nodiscard]] double promoted_s() const override { return promoted_s_; }
  // A frozen primary is fenced once the standby was promoted (two primaries must never
  // both answer), else continued.
  ~FailoverFault() override {
    if (promoted_s_ >= 0) {
      frozen_.fence();
    } else {
      frozen_.thaw();
    }
  }

 private:
  // Until pg_stat_replication reports a sync standby, at most 10 s: the milliseconds.
  static Result<double> wait_for_sync(const std::string& primary) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      Result<pg::Connection> c = connect(primary, "holdfast-drill");
      if (c.ok()) {
        Result<pg::Rows> r =
            c->query("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'");
        if (r.ok() && !r->empty() && r->int64(0, 0).ok() && *r->int64(0, 0) > 0) {
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count();
        }
      }
      if (std::chrono::steady_clock::now() - t0 > seconds(10))
        return Status(Code::kDeadlineExceeded, "no synchronous standby within 10 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  static void turn_sync_off(const std::string& primary) {
    (void)run_on(primary, "ALTER SYSTEM RESET synchronous_standby_names");
    (void)run_on(primary, "ALTER SYSTEM RESET synchronous_commit");
    (void)run_on(primary, "SELECT pg_reload_conf()");
  }
  void promote() {
    promote_tried_ = true;
    const auto t0 = std::chrono::steady_clock::now();
    Result<pg::Connection> c = connect(standby_, "holdfast-drill-promote");
    if (!c.ok()) {
      promoted_ = Status(c.status()).annotate("promoting the standby");
      return;
    }
    Result<pg::Rows> r = c->query("SELECT pg_promote(true, 20)::int");
    if (!r.ok() || r->empty() || !r->int64(0, 0).ok() || *r->int64(0, 0) != 1) {
      promoted_ = r.ok() ? Status(Code::kInternal, "pg_promote() did not promote within 20 s")
                         : Status(r.status()).annotate("pg_promote()");
      return;
    }
    promoted_s_ = run_.since();
    evidence_ += fmt::format(
        "; the standby promoted {:.1f} s after the freeze (pg_promote() took {:.0f} ms)",
        promoted_s_ - frozen_at_,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    drill_.cluster->promoted_standby();
    // PgBouncer is repointed at the new primary, as the orchestrator that promoted it
    // would (its clients cannot go around a pooler that still answers).
    if (drill_.cluster->has_bouncer()) {
      const auto r0 = std::chrono::steady_clock::now();
      if (Status st = drill_.cluster->repoint_bouncer(drill_.cluster->primary_port()); !st.ok()) {
        promoted_ = st;
        return;
      }
      evidence_ += fmt::format(
          "; PgBouncer repointed at it (RELOAD) {:.0f} ms later",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count());
    }
  }
  void fence() {
    if (fenced_) return;
    fenced_ = true;
    const std::size_t killed = frozen_.fence();
    // Its stale pid file names processes that are gone; no cleanup may signal a pid that
    // was given to another process since.
    (void)::unlink((old_dir_ + "/postmaster.pid").c_str());
    evidence_ += fmt::format(
        "; the old primary fenced {:.1f} s after the promotion ({} "
        "processes killed)",
        promoted_s_ >= 0 ? run_.since() - promoted_s_ : -1.0, killed);
  }

  PgDrill& drill_;
  const DrillRun& run_;
  bool synchronous_;
  double seconds_, promote_after_, fence_after_;
  std::string old_dir_, standby_;
  bool sync_on_ = false;
  double frozen_at_ = -1, promoted_s_ = -1;
  bool began_ = false, promote_tried_ = false, fenced_ = false;
  Status promoted_;
  FrozenServer frozen_;
};

// switchover: a planned change of primary through PgBouncer: PAUSE (PgBouncer holds new
// queries once those in flight are done), the primary stopped cleanly (pg_ctl stop -m
// fast: its last WAL reaches the standby), the standby promoted (pg_promote()), PgBouncer
// repointed at it (RELOAD of its ini), RESUME. The old primary stays stopped and the
// cluster has no standby afterwards: a switchover runs last, and not with a failover.
class SwitchoverFault final : public Fault {
 public:
  SwitchoverFault(PgDrill& drill, const DrillRun& run) : drill_(drill), run_(run) {}
  Status begin() override {
    using Clock = std::chrono::steady_clock;
    const auto ms = [](Clock::time_point from) {
      return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
    };
    const auto t0 = Clock::now();
    const std::string admin = drill_.cluster->bouncer_admin_url();
    paused_ = true;  // a PAUSE that times out leaves PgBouncer pausing: RESUME it anyway
    Result<double> paused = ask_within(admin, "PAUSE", seconds(5));
    if (!paused.ok()) return Status(paused.status()).annotate("PgBouncer's PAUSE");
    const auto t1 = Clock::now();
    if (Status st = drill_.cluster->script("down"); !st.ok())
      return st.annotate("stopping the primary");
    down_ = true;
    const double stop_ms = ms(t1);
    const auto t2 = Clock::now();
    Result<pg::Connection> c =
        connect(drill_.cluster->standby_url("postgres"), "holdfast-drill-promote");
    if (!c.ok()) return Status(c.status()).annotate("promoting the standby");
    Result<pg::Rows> r = c->query("SELECT pg_promote(true, 20)::int");
    if (!r.ok() || r->empty() || !r->int64(0, 0).ok() || *r->int64(0, 0) != 1) {
      return r.ok() ? Status(Code::kInternal, "pg_promote() did not promote within 20 s")
                    : Status(r.status()).annotate("pg_promote()");
    }
    promoted_s_ = run_.since();
    const double promote_ms = ms(t2);
    down_ = false;  // the old primary stays down: the standby took its place
    drill_.cluster->promoted_standby();
    const auto t3 = Clock::now();
    if (Status st = drill_.cluster->repoint_bouncer(drill_.cluster->primary_port()); !st.ok())
      return st;
    const double repoint_ms = ms(t3);
    Result<double> resumed = ask_within(admin, "RESUME", seconds(5));
    if (!resumed.ok()) return Status(resumed.status()).annotate("PgBouncer's RESUME");
    paused_ = false;
    evidence_ = fmt::format(
        "PAUSE answered in {:.0f} ms; the primary stopped (pg_ctl stop -m fast) in {:.0f} ms; "
        "the standby promoted in {:.0f} ms; PgBouncer repointed at it (RELOAD) in {:.0f} ms; "
        "RESUME {:.0f} ms after the PAUSE was sent",
        *paused, stop_ms, promote_ms, repoint_ms, ms(t0));
    return Status();
  }
  Status end() override {
    Status s;
    if (down_) {  // the promotion failed: the old primary is all there is
      down_ = false;
      s = drill_.cluster->script("up");
    }
    if (paused_) {
      paused_ = false;
      Result<double> resumed =
          ask_within(drill_.cluster->bouncer_admin_url(), "RESUME", seconds(5));
      if (!resumed.ok() && s.ok()) s = Status(resumed.status()).annotate("PgBouncer's RESUME");
    }
    return s;
  }
  Status check_undone() override {
    if (promoted_s_ < 0) return Status();
    return expect_answer(drill_.cluster->bouncer_url("postgres"),
                         "the new primary through PgBouncer");
  }
  [[nodiscard]] double promoted_s() const override { return promoted_s_; }
  ~SwitchoverFault() override {
    try {
      (void)end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
    }
  }

 private:
  PgDrill& drill_;
  const DrillRun& run_;
  bool paused_ = false, down_ = false;
  double promoted_s_ = -1;
};

// blackhole: the proxy between the panels (and PgBouncer) and the primary forwards
// nothing, connections kept open; the primary itself answers all along.
class BlackholeFault final : public Fault {
 public:
  explicit BlackholeFault(const PgDrill& drill)
      : proxy_(*drill.proxy),
        through_(drill.app_primary_url("postgres")),
        direct_(drill.cluster->primary_url("postgres")) {}
  Status begin() override {
    const TcpProxy::Counters before = proxy_.counters();
    proxy_.set_blackhole(true);
    if (Status s = expect_silence(through_, "the primary through the proxy", kSilenceProof);
        !s.ok())
      return s;
    Result<double> direct = ask_within(direct_, "SELECT 1", seconds(2));
    evidence_ = fmt::format(
        "{} connections held open; SELECT 1 through the proxy unanswered for {} ms, directly "
        "{}",
        before.open, kSilenceProof.count(),
        direct.ok() ? fmt::format("answered in {:.0f} ms", *direct)
                    : "not answered either: " + direct.status().to_string());
    return Status();
  }
  Status end() override {
    proxy_.set_blackhole(false);
    return Status();
  }
  Status check_undone() override {
    return expect_answer(through_, "the primary through the proxy");
  }
  ~BlackholeFault() override { proxy_.set_blackhole(false); }

 private:
  TcpProxy& proxy_;
  std::string through_, direct_;
};

// pooler-pause: PAUSE on PgBouncer's admin console (queries wait inside PgBouncer, until
// its query_wait_timeout), RESUME at the end.
class PoolerPauseFault final : public Fault {
 public:
  explicit PoolerPauseFault(const PgDrill& drill)
      : admin_(drill.cluster->bouncer_admin_url()),
        through_(drill.cluster->bouncer_url("postgres")) {}
  Status begin() override {
    paused_ = true;  // a PAUSE that times out leaves PgBouncer pausing: RESUME it anyway
    Result<double> paused = ask_within(admin_, "PAUSE", seconds(5));
    if (!paused.ok()) return Status(paused.status()).annotate("PgBouncer's PAUSE");
    if (Status s = expect_silence(through_, "the paused PgBouncer", kSilenceProof); !s.ok())
      return s;
    evidence_ = fmt::format(
        "PAUSE answered in {:.0f} ms; SELECT 1 through PgBouncer "
        "unanswered for {} ms",
        *paused, kSilenceProof.count());
    return Status();
  }
  Status end() override {
    if (!paused_) return Status();
    paused_ = false;
    Result<double> resumed = ask_within(admin_, "RESUME", seconds(5));
    if (!resumed.ok()) return Status(resumed.status()).annotate("PgBouncer's RESUME");
    return Status();
  }
  Status check_undone() override { return expect_answer(through_, "PgBouncer"); }
  ~PoolerPauseFault() override {
    if (paused_) (void)ask_within(admin_, "RESUME", seconds(5));
  }

 private:
  std::string admin_, through_;
  bool paused_ = false;
};

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
// start, `up` at the end.
class ServerDownFault final : public Fault {
 public:
  ServerDownFault(PgDrill& drill, std::string down, std::string up)
      : drill_(drill), down_(std::move(down)), up_(std::move(up)) {}
  Status begin() override {
    Status s = drill_.cluster->script(down_);
    if (s.ok()) down_done_ = true;
    return s;
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
  std::string down_, up_;
  bool down_done_ = false;
};

// standby-lag: replay paused on the standby.
class ReplayPauseFault final : public Fault {
 public:
  explicit ReplayPauseFault(const PgDrill& drill) : drill_(drill) {}
  Status begin() override {
    Status s = run_on(drill_.cluster->standby_url("postgres"), "SELECT pg_wal_replay_pause()");
    paused_ = s.ok();
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
  const std::string& f = spec.fault;
  if (f == "failover" || f == "failover-async") {
    return std::make_unique<FailoverFault>(drill, run, f == "failover", spec.seconds);
  }
  if (f == "switchover") return std::make_unique<SwitchoverFault>(drill, run);
  if (f == "write-lock") return std::make_unique<LockFault>(drill, "payments");
  if (f == "read-lock") return std::make_unique<LockFault>(drill, "games");
  if (f == "terminate") return std::make_unique<TerminateFault>(drill);
  if (f == "restart" || f == "stop") return std::make_unique<ServerDownFault>(drill, "down", "up");
  if (f == "exhaust") return std::make_unique<ExhaustFault>(drill);
  if (f == "cpu") return std::make_unique<CpuFault>(drill, spec.seconds);
  if (f == "standby-stop") {
    return std::make_unique<ServerDownFault>(drill, "standby-down", "standby-up");
  }
  if (f == "standby-lag") return std::make_unique<ReplayPauseFault>(drill);
  if (f == "hang") return std::make_unique<HangFault>(drill, false, spec.seconds);
  if (f == "standby-hang") return std::make_unique<HangFault>(drill, true, spec.seconds);
  if (f == "blackhole") return std::make_unique<BlackholeFault>(drill);
  if (f == "pooler-pause") return std::make_unique<PoolerPauseFault>(drill);
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
  if (fault == "standby-stop") return 10;
  // The freeze, the promotion 3 s later, the fence 20 s after it, and a second.
  if (fault == "failover" || fault == "failover-async") return 25;
  // The switchover at its start takes a second or two; then the new primary serves.
  if (fault == "switchover") return 10;
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
