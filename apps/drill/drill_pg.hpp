// holdfast drill --engine postgres: the scale-out drill on a real PostgreSQL primary and
// hot standby, with real faults.
//
// The drill starts its own throwaway cluster (scripts/pg-test-server.sh with a standby, in
// a private state folder; removed afterwards, also on failure). Every strategy gets its own
// database of that cluster and runs as N `holdfast panel --pg` processes, under the SQLite
// drill's load model (drill_load.cpp): each worker sends each request to the next process
// (process_for(), drill_run.hpp), as a round-robin balancer would. holdfast reads from the standby
// (read-your-writes by LSN); `holdfast+pgbouncer` is holdfast through a PgBouncer in transaction
// mode that the drill also starts. At the same instants, every strategy meets each fault (kinds
// below), with quiet gaps between them. Attempts are the panels' own counters (GET /metrics);
// payments are audited by key in each database afterwards.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "drill.hpp"
#include "holdfast/core/result.hpp"

namespace holdfast::panel {

// The faults, in the order they run by default:
//   write-lock    ACCESS EXCLUSIVE on payments, held in an open transaction, 10 s
//   read-lock     ACCESS EXCLUSIVE on games, 10 s
//   terminate     every client backend terminated every 2 s, for 10 s
//   restart       the primary restarted (pg_ctl stop -m fast, then start)
//   stop          the primary stopped for 15 s
//   exhaust       the primary's slots taken until it says 53300, the panels' backends
//                 terminated and their slots taken too, four given back for all panels to
//                 compete for, 20 s
//   cpu           CPU-burning backends (two per core) for 20 s: a capacity drop
//   standby-stop  the standby stopped for 10 s
//   standby-lag   replay paused on the standby (pg_wal_replay_pause()) for 15 s
//   standby-slow  the drill's proxy in front of the standby passes on every answer of the
//                 standby 300 ms late, for 10 s: slow, not silent (connections stay open).
//                 Proved caused (SELECT 1 through the proxy takes at least 300 ms) and
//                 undone (it answers in less again)
// Silence (DESIGN.md section 10; FAULTS.md, "Silence and failover"): nothing fails, nothing
// answers. Each proves it was caused (SELECT 1 on the path it cuts gets no answer within
// 800 ms) and undone (that path answers again within 10 s of its end), else the drill fails.
//   hang          the primary frozen: its postmaster and every child of it stopped with
//                 SIGSTOP for 10 s, then SIGCONT (by pid; also when the drill fails or is
//                 interrupted, and the cluster's cleanup continues both servers again; a
//                 guard process continues them 10 s after the fault's planned end should
//                 the drill die without cleaning up)
//   blackhole     the drill's TCP proxy between the panels (and PgBouncer) and the primary
//                 (drill_pg_proxy.hpp) forwards nothing either way for 10 s, connections
//                 kept open and new ones accepted; the primary itself answers all along
//   standby-hang  the standby frozen like the primary in hang, 10 s
//   pooler-pause  PAUSE on PgBouncer's admin console for 10 s, then RESUME (queries wait in
//                 PgBouncer until its query_wait_timeout, 1 s in the drill); needs the
//                 holdfast+pgbouncer strategy, and touches no other strategy
// A change of primary. Each ends with the old primary rebuilt as the new primary's
// streaming standby (a fresh pg_basebackup -R into its folder, started on its old port;
// the fault ends once it streams), so the cluster is a pair again with the roles swapped,
// and every later fault acts on the new primary and the new standby. Any may follow
// another, in any number. `failover` is last in the default list all the same: the
// baselines know one host, the primary as started, so after a failover they reach the
// rebuilt standby and refuse every payment (25006) in every later fault:
//   failover      synchronous replication turned on (ALTER SYSTEM
//                 synchronous_standby_names = '*', synchronous_commit = on, reload; waits
//                 until the standby is sync), the primary frozen as in hang, the standby
//                 promoted 3 s later (pg_promote()), PgBouncer repointed at it (RELOAD),
//                 the old primary fenced 20 s after the promotion (SIGKILL to its frozen
//                 processes), then rebuilt; once it streams, synchronous replication is
//                 turned on on the new primary until the rebuilt standby is sync, then off
//                 again; 25 s and the rebuild. The holdfast strategies' panels have both
//                 servers in --pg (each through its proxy), the primary first, and both in
//                 --pg-replica with target_session_attrs=standby; the baselines only the
//                 primary as started.
//   failover-async  the same with asynchronous replication (not in the default list)
//   switchover    through PgBouncer: PAUSE, the primary stopped cleanly (pg_ctl stop -m
//                 fast), the standby promoted, PgBouncer repointed (RELOAD), RESUME; then
//                 10 s on the new primary, and the rebuild. Needs holdfast+pgbouncer; not
//                 in the default list
// Their entries have promoted_s, and per strategy first_payment_after_promotion_s
// and confirmed_payments_lost (drill.hpp's StrategyResult).
//
// The report's figures per fault and strategy (drill.hpp's StrategyResult) include
// `unanswered` (requests that got no HTTP answer: the connection closed or reset, or no
// byte for the load client's 30 s), `fast_answers_pct` (of the requests started from the
// fault's start + 1 s to its end, the share answered within 100 ms with anything but an
// error page: fresh, stale or 503; 0 when no request started in that window at all, the
// workers all still waiting) and `max_ms` (the longest wait from sending a request to its
// answer, or to giving up on it). Each silence fault's entry also carries `evidence` and
// `answered_again_ms` (drill.hpp's StormResult).
//
// The HA drill (PgDrillOptions::ha "patroni"; FAULTS.md, "Patroni + etcd") runs on one etcd
// and three PostgreSQL nodes under Patroni (scripts/patroni-test-cluster.sh: synchronous
// mode, ttl 10 / loop_wait 2 / retry_timeout 5) instead of the primary and standby. The
// holdfast panels get the multi-host URL of the three nodes directly (no proxies, no
// PgBouncer, no --pg-replica); the baselines know one host and cannot follow a change of
// leader, so only `holdfast` runs. Its faults, each acting on the leader Patroni names at
// its start and undone when the cluster is healthy again (one running leader, two
// streaming standbys, one synchronous; up to 120 s, a rewind included):
//   patroni-kill        kill -9 of the leader's postmaster (Patroni starts it again on the
//                       same node after crash recovery, on a new timeline), 10 s
//   patroni-freeze      the leader's postmaster and children SIGSTOPped for 30 s, as in
//                       hang (continued by pid, also on failure; a guard 10 s after)
//   patroni-switchover  POST /switchover on the leader's REST API to the synchronous
//                       standby, then 10 s
//   dcs-down            etcd SIGSTOPped for 20 s (a guard continues it 10 s after)
//   dcs-down-failsafe   the same with failsafe_mode turned on first (PATCH /config; off
//                       again at the end)
// Every one of them is audited: promoted_s is when a node other than the old leader (or
// the old leader on a newer timeline) first ran as the primary by its own REST API
// (GET /patroni, asked every 100 ms); first_payment_after_promotion_s follows from it, and
// confirmed_payments_lost counts the payments confirmed from the fault's start to the next
// fault's whose key the leader lacks at the drill's end.
[[nodiscard]] const std::vector<std::string>& all_pg_faults();
// The HA drill's faults, in their default order.
[[nodiscard]] const std::vector<std::string>& all_patroni_faults();

struct PgDrillOptions {
  // Workers (per strategy, spread over its processes), warm-up, gap, pacing, seed, out_dir
  // and progress as in the SQLite drill; `strategies` and `storms` are not used.
  DrillOptions base;
  // none, naive, backoff, origin-breaker, holdfast, holdfast+pgbouncer.
  std::vector<std::string> strategies = {"none", "holdfast", "holdfast+pgbouncer"};
  std::vector<std::string> faults = all_pg_faults();
  int processes = 3;  // panel processes per strategy
  // "" (the drill's own primary and standby) or "patroni" (the HA drill, above). With
  // "patroni", empty `faults` and `strategies` mean all_patroni_faults() and holdfast.
  std::string ha;
  // The HA drill: Patroni's etcd client, "etcd3" (v3) or "etcd" (v2).
  std::string patroni_dcs = "etcd3";
  // Every fault's length is multiplied by this (a short drill for tests).
  double fault_scale = 1.0;
  // The holdfast executable the panels run as (`holdfast panel --pg ...`). REQUIRES: set.
  std::string holdfast_exe;
  // Holds pg-test-server.sh, pgbouncer-test.sh and patroni-test-cluster.sh. Empty:
  // $HOLDFAST_SCRIPTS_DIR, then the source tree's scripts/ (compiled in), then ../../../scripts
  // from the executable.
  std::string scripts_dir;
  // When set and it turns true (a signal watcher sets it on Ctrl-C), the drill undoes the
  // fault it is in, stops the load, the panels and the cluster, and returns CANCELLED.
  const std::atomic<bool>* cancel = nullptr;
};

// Runs the drill. A Status when the cluster, a panel process or a fault could not be
// started; the cluster, PgBouncer and every panel process are stopped in any case.
Result<DrillResult> run_drill_pg(
    const PgDrillOptions& given,
    const std::function<void(double, double, const std::string&)>& progress = {});

}  // namespace holdfast::panel
