// The HA drill's faults (drill_pg.hpp; FAULTS.md, "Patroni + etcd"), caused on the
// Patroni cluster (drill_pg_patroni.hpp). Each acts on the leader Patroni names at its
// start, proves it was caused, and is undone when the cluster is healthy again (one
// running leader, two streaming standbys, one synchronous). While each runs, a WriterWatch
// records every node's own view of its role: the promotion's time is when a node other
// than the old leader (or the old leader on a newer timeline: Patroni restarted it) first
// ran as the primary, and the evidence lists the changes, a leader taking the cluster
// back after a freeze included.
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drill_pg_fault.hpp"
#include "drill_pg_patroni.hpp"
#include "http_client.hpp"

namespace holdfast::panel::drill::faults {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

// How long a Patroni fault waits for the cluster to be healthy again after its end: a
// demoted leader is rewound (pg_rewind) and restarted, which takes a few seconds here.
constexpr seconds kHealthyWithin{120};

double ms_since(Steady::time_point from) {
  return std::chrono::duration<double, std::milli>(Steady::now() - from).count();
}

// What the Patroni faults share: the leader at the start, the watch, and the settling.
class PatroniFault : public Fault {
 public:
  PatroniFault(PgDrill& drill, const DrillRun& run) : drill_(drill), run_(run) {}
  [[nodiscard]] double promoted_s() const override { return promoted_s_; }
  // Every Patroni fault may change the writer, so each is audited for lost payments.
  [[nodiscard]] bool audits_payments() const override { return true; }
  Status check_undone() override {
    const auto t0 = Steady::now();
    Status healthy = cluster().wait_healthy(kHealthyWithin);
    if (healthy.ok()) {
      Status answered = expect_answer(cluster().writer_url("postgres"), "the new leader");
      if (!answered.ok()) healthy = answered;
    }
    // From the fault's end to a healthy cluster whose leader answers.
    answered_again_ms_ = healthy.ok() ? ms_since(t0) : -1;
    settle();
    return healthy;
  }

 protected:
  PatroniCluster& cluster() const { return *drill_.patroni; }
  // The leader now, and the watch started: call first in begin().
  Status find_leader() {
    began_s_ = run_.since();
    Result<PatroniNode> l = cluster().leader();
    if (!l.ok()) return Status(l.status()).annotate("finding Patroni's leader");
    leader_ = *l;
    watch_ = std::make_unique<WriterWatch>(cluster(), [this] { return run_.since(); });
    // The node's own first answer gives the timeline before the fault.
    const auto until = Steady::now() + seconds(3);
    while (Steady::now() < until) {
      for (const WriterWatch::Change& c : watch_->changes()) {
        if (c.node == leader_.name && c.timeline > 0) {
          timeline_ = c.timeline;
          return Status();
        }
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return Status(Code::kUnavailable,
                  fmt::format("the leader {} did not say its timeline", leader_.name));
  }
  // Stops the watch, takes the promotion's time and adds the changes to the evidence.
  void settle() {
    if (!watch_) return;
    watch_->stop();
    promoted_s_ = watch_->promoted_at(began_s_, leader_.name, timeline_);
    evidence_ += fmt::format("; the nodes' roles (GET /patroni): {}", watch_->summary(began_s_));
    watch_.reset();
  }

  PgDrill& drill_;
  const DrillRun& run_;
  PatroniNode leader_;
  long timeline_ = 0;
  double began_s_ = -1, promoted_s_ = -1;
  std::unique_ptr<WriterWatch> watch_;
};

// The postmaster's pid from the first line of its postmaster.pid; -1 when absent.
pid_t postmaster_of(const std::string& data_dir) {
  std::ifstream in(data_dir + "/postmaster.pid");
  long pid = -1;
  if (!(in >> pid) || pid <= 1) return -1;
  return static_cast<pid_t>(pid);
}

// Whether `pid` is gone or a zombie (killed, not yet reaped by its Patroni).
bool dead(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return true;
  const std::size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

// Whether every thread of `pid` is stopped (state T in /proc/PID/task/*/stat).
bool all_threads_stopped(pid_t pid) {
  std::error_code ec;
  bool any = false;
  for (const auto& task :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream in(task.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) continue;
    const char state = line[close + 2];
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return any;
}

// patroni-kill: kill -9 of the leader's postmaster. Patroni notices within loop_wait and
// starts it again on the same node (it still holds the leader key), after crash recovery
// on a new timeline.
class PatroniKillFault final : public PatroniFault {
 public:
  using PatroniFault::PatroniFault;
  Status begin() override {
    if (Status s = find_leader(); !s.ok()) return s;
    const pid_t pm = postmaster_of(leader_.data_dir);
    if (pm < 0) return Status(Code::kFailedPrecondition, "the leader has no postmaster.pid");
    const auto t0 = Steady::now();
    if (::kill(pm, SIGKILL) != 0) {
      return Status(Code::kFailedPrecondition,
                    fmt::format("kill -9 {}: {}", pm, std::strerror(errno)));
    }
    while (!dead(pm)) {
      if (Steady::now() - t0 > seconds(2)) {
        return Status(Code::kInternal, fmt::format("the postmaster {} outlived kill -9", pm));
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
    evidence_ = fmt::format(
        "the leader {} (port {}, timeline {}): its postmaster (pid {}) killed with SIGKILL, "
        "gone in {:.0f} ms",
        leader_.name, leader_.pg_port, timeline_, pm, ms_since(t0));
    return Status();
  }
  Status end() override { return Status(); }
};

// patroni-freeze: the leader's postmaster and every child of it stopped with SIGSTOP for
// the fault's length, then continued (FrozenServer: also on failure, and by its guard
// 10 s after the planned end should the drill die). Patroni on that node still runs, but
// its loop waits on the frozen server, so the leader key expires (ttl) and a standby is
// promoted. When the old leader thaws, Patroni 3.0.2's etcd v3 client lets it write the
// leader key back (FAULTS.md, "Known loss"); the watch shows it.
class PatroniFreezeFault final : public PatroniFault {
 public:
  PatroniFreezeFault(PgDrill& drill, const DrillRun& run, double seconds)
      : PatroniFault(drill, run), seconds_(seconds) {}
  Status begin() override {
    if (Status s = find_leader(); !s.ok()) return s;
    const auto guard =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds_ + 10.0));
    if (Status s = frozen_.freeze(leader_.data_dir, guard); !s.ok())
      return s.annotate("freezing the leader");
    const std::string url = PatroniCluster::node_url(leader_, "postgres");
    if (Status s = expect_silence(url, "the frozen leader", kSilenceProof); !s.ok()) return s;
    evidence_ = fmt::format(
        "the leader {} (port {}, timeline {}): {} processes stopped (SIGSTOP), postmaster {}; "
        "SELECT 1 unanswered for {} ms",
        leader_.name, leader_.pg_port, timeline_, frozen_.processes(), frozen_.postmaster(),
        kSilenceProof.count());
    return Status();
  }
  Status end() override {
    frozen_.thaw();
    return Status();
  }

 private:
  double seconds_;
  FrozenServer frozen_;
};

// patroni-switchover: POST /switchover on the leader's REST API, to the synchronous
// standby (what `patronictl switchover --force` does); Patroni answers once it is done.
class PatroniSwitchoverFault final : public PatroniFault {
 public:
  using PatroniFault::PatroniFault;
  Status begin() override {
    if (Status s = find_leader(); !s.ok()) return s;
    Result<PatroniNode> to = cluster().sync_standby();
    if (!to.ok()) return Status(to.status()).annotate("finding the synchronous standby");
    const auto t0 = Steady::now();
    Result<std::string> r = cluster().rest(
        leader_, "POST", "/switchover",
        fmt::format(R"({{"leader": "{}", "candidate": "{}"}})", leader_.name, to->name),
        seconds(60));
    if (!r.ok()) return Status(r.status()).annotate("the switchover");
    std::string said = *r;
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r'))
      said.pop_back();
    evidence_ = fmt::format(
        "POST /switchover from the leader {} (port {}) to {} (port {}) answered in {:.0f} ms: "
        "{}",
        leader_.name, leader_.pg_port, to->name, to->pg_port, ms_since(t0), said);
    return Status();
  }
  Status end() override { return Status(); }
};

// dcs-down, dcs-down-failsafe: etcd stopped with SIGSTOP for the fault's length (a frozen
// DCS: Patroni's calls time out after retry_timeout), then continued; a guard continues
// it 10 s after the planned end should the drill die. Without failsafe_mode the leader
// cannot renew its key and demotes itself: no writer until etcd is back and a leader is
// elected again. dcs-down-failsafe first sets failsafe_mode on (PATCH /config) and waits
// until every member has it and the leader's failsafe topology (its GET /config and GET
// /failsafe), so the leader keeps leading while every member answers its POST /failsafe;
// it is set off again at the end.
class DcsDownFault final : public PatroniFault {
 public:
  DcsDownFault(PgDrill& drill, const DrillRun& run, bool failsafe, double seconds)
      : PatroniFault(drill, run), failsafe_(failsafe), seconds_(seconds) {}
  Status begin() override {
    if (Status s = find_leader(); !s.ok()) return s;
    if (failsafe_) {
      failsafe_set_ = true;
      if (Status s = set_failsafe(true); !s.ok()) return s;
      const auto until = Steady::now() + seconds(20);
      while (!every_member_in_failsafe_mode()) {
        if (Steady::now() > until) {
          return Status(Code::kDeadlineExceeded,
                        "failsafe_mode set, but not every member had it and the failsafe "
                        "topology (GET /config, GET /failsafe) within 20 s");
        }
        std::this_thread::sleep_for(milliseconds(200));
      }
    }
    const pid_t etcd = cluster().etcd_pid();
    const double guard_s = seconds_ + 10.0;
    Result<ChildProcess> guard = ChildProcess::spawn(
        {"/bin/sh", "-c",
         fmt::format("trap 'kill $s 2>/dev/null; exit 0' TERM; sleep {:.1f} & s=$!; wait $s; "
                     "kill -CONT {} 2>/dev/null; exit 0",
                     guard_s, etcd)},
        {}, "/dev/null");
    if (!guard.ok()) return Status(guard.status()).annotate("the etcd freeze's guard");
    guard_ = std::move(*guard);
    if (::kill(etcd, SIGSTOP) != 0) {
      return Status(Code::kFailedPrecondition,
                    fmt::format("kill -STOP {} (etcd): {}", etcd, std::strerror(errno)));
    }
    stopped_ = true;
    // SIGSTOP reaches each of etcd's threads in turn: until all are stopped, one may
    // still answer.
    const auto t0 = Steady::now();
    while (!all_threads_stopped(etcd)) {
      if (Steady::now() - t0 > seconds(2)) {
        return Status(Code::kDeadlineExceeded, fmt::format("etcd ({}) did not stop", etcd));
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    http_client::Client http("127.0.0.1", port_of(cluster().etcd_url()));
    http.set_connection_timeout(kSilenceProof);
    http.set_read_timeout(kSilenceProof);
    if (auto r = http.Get("/health"); r) {
      return Status(Code::kInternal, fmt::format("the stopped etcd answered /health: {}", r->body));
    }
    evidence_ = fmt::format(
        "etcd (pid {}, {}) stopped with SIGSTOP{}; GET /health unanswered for {} ms; the "
        "leader was {} (port {}, timeline {})",
        etcd, cluster().etcd_url(),
        failsafe_ ? ", failsafe_mode on (every member's GET /config and GET /failsafe said so)"
                  : "",
        kSilenceProof.count(), leader_.name, leader_.pg_port, timeline_);
    return Status();
  }
  Status end() override {
    Status s;
    if (stopped_) {
      stopped_ = false;
      (void)::kill(cluster().etcd_pid(), SIGCONT);
      guard_.stop();
    }
    return s;
  }
  Status check_undone() override {
    Status s = PatroniFault::check_undone();
    if (failsafe_set_) {
      failsafe_set_ = false;
      Status off = set_failsafe(false);
      if (s.ok()) s = off;
    }
    return s;
  }
  ~DcsDownFault() override {
    if (stopped_) (void)::kill(cluster().etcd_pid(), SIGCONT);
  }

 private:
  static int port_of(const std::string& url) { return std::atoi(url.c_str() + url.rfind(':') + 1); }
  // Whether every member's own view of the cluster (GET /config, GET /failsafe: its cached
  // copy of the DCS) has failsafe_mode on and the leader's failsafe topology. A member
  // that has not read them before etcd stops refuses the leader's POST /failsafe, and
  // the leader demotes itself as if failsafe mode were off.
  [[nodiscard]] bool every_member_in_failsafe_mode() const {
    for (const PatroniNode& n : cluster().nodes()) {
      Result<std::string> config = cluster().rest(n, "GET", "/config", "", seconds(1));
      if (!config.ok()) return false;
      const nlohmann::json j = nlohmann::json::parse(*config, nullptr, false);
      if (!j.is_object() || !j.value("failsafe_mode", false)) return false;
      if (!cluster().rest(n, "GET", "/failsafe", "", seconds(1)).ok()) return false;
    }
    return true;
  }
  Status set_failsafe(bool on) {
    Result<std::string> r = cluster().rest(
        leader_, "PATCH", "/config", fmt::format(R"({{"failsafe_mode": {}}})", on), seconds(10));
    return r.ok() ? Status() : Status(r.status()).annotate("setting failsafe_mode");
  }
  bool failsafe_;
  double seconds_;
  bool stopped_ = false, failsafe_set_ = false;
  ChildProcess guard_;
};

}  // namespace

std::unique_ptr<Fault> make_patroni_fault(const StormSpec& spec, PgDrill& drill,
                                          const DrillRun& run) {
  const std::string& f = spec.fault;
  if (f == "patroni-kill") return std::make_unique<PatroniKillFault>(drill, run);
  if (f == "patroni-freeze") return std::make_unique<PatroniFreezeFault>(drill, run, spec.seconds);
  if (f == "patroni-switchover") return std::make_unique<PatroniSwitchoverFault>(drill, run);
  if (f == "dcs-down") return std::make_unique<DcsDownFault>(drill, run, false, spec.seconds);
  if (f == "dcs-down-failsafe")
    return std::make_unique<DcsDownFault>(drill, run, true, spec.seconds);
  return nullptr;
}

}  // namespace holdfast::panel::drill::faults
