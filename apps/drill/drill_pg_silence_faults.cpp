// The PostgreSQL drill's faults in which nothing fails and nothing answers (hang,
// standby-hang, blackhole, pooler-pause), and the changes of primary (failover,
// failover-async, switchover); FAULTS.md, "Silence and failover".
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include "drill_pg_fault.hpp"

namespace holdfast::panel::drill::faults {
namespace {

using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

double ms_since(Steady::time_point from) {
  return std::chrono::duration<double, std::milli>(Steady::now() - from).count();
}

// The application_name the standby's WAL receiver reports (pg-test-server.sh starts every
// standby, a rebuilt one too, with cluster_name=holdfast_standby).
constexpr const char* kStandbyName = "holdfast_standby";

// Until `sql` (a count) on `primary` says more than 0, at most `patience`: the
// milliseconds, or `what` did not happen.
Result<double> wait_for_count(const std::string& primary, const std::string& sql, Duration patience,
                              const char* what) {
  const auto t0 = Steady::now();
  for (;;) {
    Result<pg::Connection> c = connect(primary, "holdfast-drill");
    if (c.ok()) {
      Result<pg::Rows> r = c->query(sql);
      if (r.ok() && !r->empty() && r->int64(0, 0).ok() && *r->int64(0, 0) > 0) return ms_since(t0);
    }
    if (Steady::now() - t0 > patience) {
      return Status(
          Code::kDeadlineExceeded,
          fmt::format("{} within {:.0f} s", what, std::chrono::duration<double>(patience).count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Until pg_stat_replication on `primary` reports a sync standby, at most 10 s.
Result<double> wait_for_sync(const std::string& primary) {
  return wait_for_count(primary,
                        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                        seconds(10), "no synchronous standby");
}

// Synchronous replication on `primary`: ALTER SYSTEM (postgresql.auto.conf, which is not
// replicated: each server has its own) and a reload.
Status turn_sync_on(const std::string& primary) {
  for (const char* sql :
       {"ALTER SYSTEM SET synchronous_standby_names = '*'",
        "ALTER SYSTEM SET synchronous_commit = 'on'", "SELECT pg_reload_conf()"}) {
    if (Status st = run_on(primary, sql); !st.ok()) return st.annotate(sql);
  }
  return Status();
}

// Back to the cluster's settings (postgresql.conf: asynchronous).
void turn_sync_off(const std::string& primary) {
  (void)run_on(primary, "ALTER SYSTEM RESET synchronous_standby_names");
  (void)run_on(primary, "ALTER SYSTEM RESET synchronous_commit");
  (void)run_on(primary, "SELECT pg_reload_conf()");
}

// After a change of primary (the roles swapped, the old primary not running): the old
// primary rebuilt as the new primary's standby (pg-test-server.sh rebuild-standby: a fresh
// pg_basebackup -R into its folder, started on its old port), then waited for (up to 30 s)
// until the new primary's pg_stat_replication shows it streaming. With `sync`, synchronous
// replication is then turned on on the new primary until the standby is reported sync,
// and off again, as the cluster runs between faults: the pair can confirm a commit on two
// servers again. The text for the fault's evidence.
Result<std::string> rebuild_old_primary(PgDrill& drill, bool sync) {
  const auto t0 = Steady::now();
  if (Status st = drill.cluster->rebuild_standby(); !st.ok()) return st;
  const double rebuild_ms = ms_since(t0);
  const std::string primary = drill.cluster->primary_url("postgres");
  Result<double> streaming = wait_for_count(
      primary,
      fmt::format("SELECT count(*) FROM pg_stat_replication WHERE application_name = '{}' AND "
                  "state = 'streaming'",
                  kStandbyName),
      seconds(30), "the rebuilt standby did not stream");
  if (!streaming.ok()) return streaming.status();
  if (Status st = expect_role(drill.cluster->standby_url("postgres"), true, "the rebuilt standby");
      !st.ok())
    return st;
  std::string evidence = fmt::format(
      "; the old primary rebuilt as the standby (port {}) of the new primary (port {}) in "
      "{:.0f} ms (pg_basebackup -R, then started), streaming {:.0f} ms later",
      drill.cluster->standby_port(), drill.cluster->primary_port(), rebuild_ms, *streaming);
  if (sync) {
    Status on = turn_sync_on(primary);
    Result<double> ms = on.ok() ? wait_for_sync(primary) : Result<double>(on);
    turn_sync_off(primary);
    if (!ms.ok()) return Status(ms.status()).annotate("the rebuilt standby as a sync standby");
    evidence += fmt::format(
        ", sync {:.0f} ms after synchronous replication was turned on (then off again)", *ms);
  }
  return evidence;
}

// hang, standby-hang: the server's postmaster and all its children stopped (SIGSTOP),
// continued (SIGCONT) at the end, by the destructor at the latest.
class HangFault final : public Fault {
 public:
  HangFault(const PgDrill& drill, bool standby, double seconds)
      : seconds_(seconds),
        standby_(standby),
        port_(standby ? drill.cluster->standby_port() : drill.cluster->primary_port()),
        dir_(standby ? drill.cluster->standby_dir() : drill.cluster->primary_dir()),
        url_(standby ? drill.cluster->standby_url("postgres")
                     : drill.cluster->primary_url("postgres")),
        what_(standby ? "the frozen standby" : "the frozen primary") {}
  Status begin() override {
    if (Status s = expect_role(url_, standby_, standby_ ? "the standby" : "the primary"); !s.ok())
      return s;
    // The guard continues the server 10 s after the fault's planned end, if this process
    // could not.
    const auto guard =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds_ + 10.0));
    if (Status s = frozen_.freeze(dir_, guard); !s.ok()) return s;
    if (Status s = expect_silence(url_, what_, kSilenceProof); !s.ok()) return s;
    evidence_ = fmt::format(
        "the {} (port {}): {} processes stopped (postmaster {} and its children); SELECT 1 "
        "unanswered for {} ms",
        standby_ ? "standby" : "primary", port_, frozen_.processes(), frozen_.postmaster(),
        kSilenceProof.count());
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
  bool standby_;
  int port_;
  std::string dir_, url_;
  const char* what_;
  bool thawed_ = false;
  FrozenServer frozen_;  // its destructor continues what is still stopped
};

// failover, failover-async: the primary frozen as in hang (every process SIGSTOP), the
// standby promoted kPromoteAfter later (pg_promote(), which returns once it takes
// writes), the old primary fenced kFenceAfter after the promotion (SIGKILL to its frozen
// processes: it never answers again, so nothing it still held is confirmed to anyone),
// then rebuilt as the new primary's streaming standby (rebuild_old_primary()); the fault
// ends once it streams. From the promotion on, the cluster knows the promoted standby as
// its primary (the audit counts there) and the old primary as its standby, so every later
// fault acts on the new roles. PgBouncer, when the drill runs one, is repointed at the new
// primary's proxy right after the promotion (RELOAD of its ini). `failover` turns on
// synchronous replication first (ALTER SYSTEM synchronous_standby_names = '*',
// synchronous_commit = on, reload, and waits until the standby is reported sync), so a
// payment the client was told is applied is on the standby before the freeze, and checks
// the rebuilt standby becomes sync too; `failover-async` leaves replication asynchronous,
// and the report counts what that loses.
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
    old_port_ = drill_.cluster->primary_port();
    new_port_ = drill_.cluster->standby_port();
    const std::string primary = drill_.cluster->primary_url("postgres");
    standby_ = drill_.cluster->standby_url("postgres");
    if (Status st = expect_role(primary, false, "the primary"); !st.ok()) return st;
    if (Status st = expect_role(standby_, true, "the standby"); !st.ok()) return st;
    std::string sync = "asynchronous replication";
    if (synchronous_) {
      sync_on_ = true;
      if (Status st = turn_sync_on(primary); !st.ok()) return st;
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
        "{}; {} processes of the primary (port {}) stopped (postmaster {}), SELECT 1 "
        "unanswered for {} ms",
        sync, frozen_.processes(), old_port_, frozen_.postmaster(), kSilenceProof.count());
    began_ = true;
    return Status();
  }
  void tick() override {
    const double t = run_.since();
    if (!promote_tried_ && frozen_at_ >= 0 && t >= frozen_at_ + promote_after_) promote();
    if (promoted_s_ >= 0 && !fenced_ && t >= promoted_s_ + fence_after_) fence();
    if (fenced_ && promoted_.ok() && !rebuild_tried_ && !run_.cancelled()) rebuild();
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
    if (!promoted_.ok() || run_.cancelled()) return promoted_;
    if (!rebuild_tried_) rebuild();
    return rebuilt_;
  }
  Status check_undone() override {
    if (promoted_s_ < 0 || !promoted_.ok()) return Status();
    if (Status s = expect_answer(drill_.cluster->primary_url("postgres"), "the new primary");
        !s.ok())
      return s;
    if (Status s = expect_role(drill_.cluster->primary_url("postgres"), false, "the new primary");
        !s.ok())
      return s;
    if (!rebuild_tried_) return Status();  // interrupted: no standby was rebuilt
    return expect_role(drill_.cluster->standby_url("postgres"), true, "the rebuilt standby");
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
  void promote() {
    promote_tried_ = true;
    const auto t0 = Steady::now();
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
        "; the standby (port {}) promoted {:.1f} s after the freeze (pg_promote() took {:.0f} "
        "ms)",
        new_port_, promoted_s_ - frozen_at_, ms_since(t0));
    // PgBouncer is repointed at the new primary (through its proxy) first, as the
    // orchestrator that promoted it would (its clients cannot go around a pooler that still
    // answers); then the roles are swapped (a script run of some 30 ms).
    if (drill_.cluster->has_bouncer()) {
      const auto r0 = Steady::now();
      if (Status st = drill_.cluster->repoint_bouncer(drill_.proxy_of(new_port_).port());
          !st.ok()) {
        promoted_ = st;
      } else {
        evidence_ +=
            fmt::format("; PgBouncer repointed at it (RELOAD) {:.0f} ms later", ms_since(r0));
      }
    }
    if (Status st = drill_.cluster->promoted_standby(); !st.ok() && promoted_.ok()) promoted_ = st;
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
  // After the fence (the old primary's processes are gone): rebuilt as the standby.
  void rebuild() {
    rebuild_tried_ = true;
    Result<std::string> e = rebuild_old_primary(drill_, synchronous_);
    if (!e.ok()) {
      rebuilt_ = e.status();
      return;
    }
    evidence_ += *e;
  }

  PgDrill& drill_;
  const DrillRun& run_;
  bool synchronous_;
  double seconds_, promote_after_, fence_after_;
  std::string old_dir_, standby_;
  int old_port_ = -1, new_port_ = -1;
  bool sync_on_ = false;
  double frozen_at_ = -1, promoted_s_ = -1;
  bool began_ = false, promote_tried_ = false, fenced_ = false, rebuild_tried_ = false;
  Status promoted_, rebuilt_;
  FrozenServer frozen_;
};

// switchover: a planned change of primary through PgBouncer: PAUSE (PgBouncer holds new
// queries once those in flight are done), the primary stopped cleanly (pg_ctl stop -m
// fast: its last WAL reaches the standby), the standby promoted (pg_promote()), PgBouncer
// repointed at it (RELOAD of its ini), RESUME. At the end the old primary is rebuilt as
// the new primary's streaming standby, as after a failover (rebuild_old_primary()).
class SwitchoverFault final : public Fault {
 public:
  SwitchoverFault(PgDrill& drill, const DrillRun& run) : drill_(drill), run_(run) {}
  Status begin() override {
    const int new_port = drill_.cluster->standby_port();
    if (Status st = expect_role(drill_.cluster->primary_url("postgres"), false, "the primary");
        !st.ok())
      return st;
    if (Status st = expect_role(drill_.cluster->standby_url("postgres"), true, "the standby");
        !st.ok())
      return st;
    const auto t0 = Steady::now();
    const std::string admin = drill_.cluster->bouncer_admin_url();
    paused_ = true;  // a PAUSE that times out leaves PgBouncer pausing: RESUME it anyway
    Result<double> paused = ask_within(admin, "PAUSE", seconds(5));
    if (!paused.ok()) return Status(paused.status()).annotate("PgBouncer's PAUSE");
    const auto t1 = Steady::now();
    const int old_port = drill_.cluster->primary_port();
    if (Status st = drill_.cluster->script("down"); !st.ok())
      return st.annotate("stopping the primary");
    down_ = true;
    const double stop_ms = ms_since(t1);
    const auto t2 = Steady::now();
    Result<pg::Connection> c =
        connect(drill_.cluster->standby_url("postgres"), "holdfast-drill-promote");
    if (!c.ok()) return Status(c.status()).annotate("promoting the standby");
    Result<pg::Rows> r = c->query("SELECT pg_promote(true, 20)::int");
    if (!r.ok() || r->empty() || !r->int64(0, 0).ok() || *r->int64(0, 0) != 1) {
      return r.ok() ? Status(Code::kInternal, "pg_promote() did not promote within 20 s")
                    : Status(r.status()).annotate("pg_promote()");
    }
    promoted_s_ = run_.since();
    const double promote_ms = ms_since(t2);
    down_ = false;  // the old primary stays down until the rebuild: the standby took its place
    const auto t3 = Steady::now();
    if (Status st = drill_.cluster->repoint_bouncer(drill_.proxy_of(new_port).port()); !st.ok())
      return st;
    const double repoint_ms = ms_since(t3);
    Result<double> resumed = ask_within(admin, "RESUME", seconds(5));
    if (!resumed.ok()) return Status(resumed.status()).annotate("PgBouncer's RESUME");
    paused_ = false;
    const double resume_ms = ms_since(t0);
    if (Status st = drill_.cluster->promoted_standby(); !st.ok()) return st;
    swapped_ = true;
    evidence_ = fmt::format(
        "PAUSE answered in {:.0f} ms; the primary (port {}) stopped (pg_ctl stop -m fast) in "
        "{:.0f} ms; the standby (port {}) promoted in {:.0f} ms; PgBouncer repointed at it "
        "(RELOAD) in {:.0f} ms; RESUME {:.0f} ms after the PAUSE was sent",
        *paused, old_port, stop_ms, new_port, promote_ms, repoint_ms, resume_ms);
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
    if (swapped_ && !rebuild_tried_ && !run_.cancelled()) {
      rebuild_tried_ = true;
      Result<std::string> e = rebuild_old_primary(drill_, false);
      if (e.ok()) {
        evidence_ += *e;
      } else if (s.ok()) {
        s = e.status();
      }
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
  bool paused_ = false, down_ = false, swapped_ = false, rebuild_tried_ = false;
  double promoted_s_ = -1;
};

// blackhole: the proxy between the panels (and PgBouncer) and the primary of the moment
// forwards nothing, connections kept open; the primary itself answers all along.
class BlackholeFault final : public Fault {
 public:
  explicit BlackholeFault(const PgDrill& drill)
      : proxy_(drill.primary_proxy()),
        port_(drill.cluster->primary_port()),
        through_(drill.app_primary_url("postgres")),
        direct_(drill.cluster->primary_url("postgres")) {}
  Status begin() override {
    if (Status s = expect_role(direct_, false, "the primary"); !s.ok()) return s;
    const TcpProxy::Counters before = proxy_.counters();
    proxy_.set_blackhole(true);
    if (Status s = expect_silence(through_, "the primary through the proxy", kSilenceProof);
        !s.ok())
      return s;
    Result<double> direct = ask_within(direct_, "SELECT 1", seconds(2));
    evidence_ = fmt::format(
        "the proxy in front of the primary (port {}): {} connections held open; SELECT 1 "
        "through the proxy unanswered for {} ms, directly {}",
        port_, before.open, kSilenceProof.count(),
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
  int port_;
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

}  // namespace

std::unique_ptr<Fault> make_silence_fault(const StormSpec& spec, PgDrill& drill,
                                          const DrillRun& run) {
  const std::string& f = spec.fault;
  if (f == "failover" || f == "failover-async") {
    return std::make_unique<FailoverFault>(drill, run, f == "failover", spec.seconds);
  }
  if (f == "switchover") return std::make_unique<SwitchoverFault>(drill, run);
  if (f == "hang") return std::make_unique<HangFault>(drill, false, spec.seconds);
  if (f == "standby-hang") return std::make_unique<HangFault>(drill, true, spec.seconds);
  if (f == "blackhole") return std::make_unique<BlackholeFault>(drill);
  if (f == "pooler-pause") return std::make_unique<PoolerPauseFault>(drill);
  return nullptr;
}

}  // namespace holdfast::panel::drill::faults
