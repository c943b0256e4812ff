// The HA drill's cluster (`holdfast drill --engine postgres --ha patroni`): one etcd and
// three PostgreSQL 15 nodes under Patroni, started by scripts/patroni-test-cluster.sh in a
// private state folder (FAULTS.md, "Patroni + etcd"). Owning the object owns the servers:
// its destructor continues anything a fault stopped, then stops them all by pid (the
// script) and removes their folder.
//
// Patroni decides who leads, so the drill asks it: leader() and the node's own view
// (WriterWatch, GET /patroni on each node every 100 ms), never a role the drill assumed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drill_pg_process.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"

namespace holdfast::panel::drill {

// One node of the cluster, as the script started it.
struct PatroniNode {
  std::string name;      // n1, n2, n3
  int pg_port = -1;      // its PostgreSQL, on 127.0.0.1
  int rest_port = -1;    // its Patroni's REST API, on 127.0.0.1
  std::string data_dir;  // its PostgreSQL's data folder (postmaster.pid: the fault's target)
};

struct PatroniOptions {
  std::string scripts_dir;  // holds patroni-test-cluster.sh
  std::string work_dir;     // the script's state folder and outputs go below it
  // Patroni's DCS client: "etcd3" (its v3 client, Debian's usual choice) or "etcd" (v2,
  // compare-and-swap on the leader key).
  std::string dcs = "etcd3";
  int max_connections = 100;
};

class PatroniCluster {
 public:
  // Starts etcd and the three nodes and returns once one leads and the others stream. A
  // Status quoting the script when it fails (it stops what it started).
  static Result<std::unique_ptr<PatroniCluster>> start(const PatroniOptions& options);
  // SIGCONT to etcd and to every node's postmaster and children (a fault's SIGSTOP never
  // outlives the drill), then the script's stop. Never throws.
  ~PatroniCluster();
  PatroniCluster(const PatroniCluster&) = delete;
  PatroniCluster& operator=(const PatroniCluster&) = delete;

  [[nodiscard]] const std::vector<PatroniNode>& nodes() const { return nodes_; }
  [[nodiscard]] const std::string& dcs() const { return options_.dcs; }
  // postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/`db`: what the panels get.
  [[nodiscard]] std::string hosts_url(const std::string& db) const;
  // Database `db` on one node.
  [[nodiscard]] static std::string node_url(const PatroniNode& node, const std::string& db);

  // The running leader as GET /cluster (from the first node that answers within 1 s) names
  // it; NOT_FOUND while there is none.
  [[nodiscard]] Result<PatroniNode> leader() const;
  // The synchronous standby as GET /cluster names it; NOT_FOUND while there is none.
  [[nodiscard]] Result<PatroniNode> sync_standby() const;
  // Database `db` on the running leader; the multi-host URL with
  // target_session_attrs=read-write when no node names one.
  [[nodiscard]] std::string writer_url(const std::string& db) const;
  // Waits until one member leads and runs and the two others stream, one of them the
  // synchronous standby (the script's wait-healthy); the Status quotes the members.
  Status wait_healthy(Duration patience);
  // Creates database `db` on the leader (its COMMIT waits for the synchronous standby).
  Status create_database(const std::string& db);

  // etcd: its pid and its client URL (http://127.0.0.1:C).
  [[nodiscard]] pid_t etcd_pid() const { return etcd_pid_; }
  [[nodiscard]] const std::string& etcd_url() const { return etcd_url_; }

  // A request to `node`'s REST API, within `timeout`: the body of a 2xx answer, else a
  // Status with the HTTP status and body. `method` GET, POST or PATCH; `body` JSON.
  Result<std::string> rest(const PatroniNode& node, const std::string& method,
                           const std::string& path, const std::string& body,
                           Duration timeout) const;

 private:
  explicit PatroniCluster(PatroniOptions options) : options_(std::move(options)) {}
  [[nodiscard]] EnvVars env() const;
  Result<std::string> run(const std::vector<std::string>& args, Duration timeout);
  // GET /cluster's members with `role` and state running.
  [[nodiscard]] Result<PatroniNode> member(const std::string& role) const;

  PatroniOptions options_;
  std::vector<PatroniNode> nodes_;
  pid_t etcd_pid_ = -1;
  std::string etcd_url_;
  bool started_ = false;
  int runs_ = 0;  // numbers the script's output files
};

// Each node's own view of its role (GET /patroni: role, state, timeline), asked every
// 100 ms by a thread per node (400 ms to answer, else "unanswered") from construction to
// stop(). Keeps every change, timed in seconds on `since` (the drill's clock).
class WriterWatch {
 public:
  struct Change {
    double t = 0;
    std::string node;
    std::string role;   // master (3.0.2's word for the primary), replica, or empty
    std::string state;  // running, starting, stopped, crashed, unanswered, ...
    long timeline = 0;  // 0 when unknown
  };
  WriterWatch(const PatroniCluster& cluster, std::function<double()> since);
  ~WriterWatch() { stop(); }
  WriterWatch(const WriterWatch&) = delete;
  WriterWatch& operator=(const WriterWatch&) = delete;
  // Ends the polling (joins the threads). Idempotent.
  void stop();
  [[nodiscard]] std::vector<Change> changes() const;
  // The first time at or after `from` that a node other than `old_leader`, or
  // `old_leader` itself on a timeline above `old_timeline`, ran as the primary; -1: none.
  [[nodiscard]] double promoted_at(double from, const std::string& old_leader,
                                   long old_timeline) const;
  // The changes as one line: "n2 master/running tl 3 at 41.20 s; ...".
  [[nodiscard]] std::string summary(double from) const;

 private:
  void poll(const PatroniCluster& cluster, std::size_t node);
  std::function<double()> since_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<Change> changes_;  // guarded by mutex_
  std::vector<std::thread> threads_;
};

// A true primary of `change` (role master or primary, state running).
[[nodiscard]] bool runs_as_primary(const WriterWatch::Change& change);

}  // namespace holdfast::panel::drill
