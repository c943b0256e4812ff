// The PostgreSQL drill's throwaway cluster: a primary and a streaming hot standby made by
// scripts/pg-test-server.sh (HOLDFAST_PG_STANDBY=1) in a private state folder, and on
// demand a PgBouncer in transaction mode (scripts/pgbouncer-test.sh) in front of the
// primary. Owning the object owns the servers: its destructor stops them and the scripts
// remove their folders, whatever happened in between.
//
// Roles, not servers: primary_*() and standby_*() name the primary and the standby of the
// moment. A change of primary (promoted_standby(), then rebuild_standby()) swaps them here
// and in the script's state file, whose verbs act by role too, so every later fault finds
// the new primary and the rebuilt standby. The two servers keep their ports throughout.
#pragma once

#include <memory>
#include <string>

#include "drill_pg_process.hpp"
#include "holdfast/core/result.hpp"

namespace holdfast::panel::drill {

struct ClusterOptions {
  std::string scripts_dir;  // holds pg-test-server.sh and pgbouncer-test.sh
  std::string work_dir;     // the scripts' state folders and outputs go below it
  int max_connections = 100;
  int bouncer_pool_size = 12;  // PgBouncer's server connections per database
  // PgBouncer's server_login_retry in seconds: after a failed login to the server it
  // refuses clients this long before it tries again, so a server back from a restart is
  // reached only that late (PgBouncer's default is 15 s).
  std::string bouncer_login_retry = "0.25";
  // PgBouncer's query_wait_timeout in seconds: how long it holds a query that no server
  // connection takes before it refuses the client (its default is 120 s). Neither the
  // server's statement_timeout nor a cancel reaches a query PgBouncer holds, so without
  // this a payment queued while the server is away waits out its whole window.
  std::string bouncer_query_wait = "1";
};

class PgCluster {
 public:
  // Starts the primary and the standby. A Status quoting the script when it fails (it
  // removes what it started).
  static Result<std::unique_ptr<PgCluster>> start(const ClusterOptions& options);
  // Continues the servers' processes (a hang fault's SIGSTOP must never outlive the
  // drill), stops PgBouncer and both servers and removes their folders. Never throws.
  ~PgCluster();
  PgCluster(const PgCluster&) = delete;
  PgCluster& operator=(const PgCluster&) = delete;

  // Starts PgBouncer in front of the primary, which it reaches at `server_url` (the
  // drill's proxy). Its admin console takes the primary's user (admin_users).
  Status start_bouncer(const std::string& server_url);
  // Points PgBouncer at the server on 127.0.0.1:`port` (pgbouncer-test.sh repoint) and
  // makes it use it (RELOAD on the admin console): a failover's new primary. Nothing to
  // do without PgBouncer.
  Status repoint_bouncer(int port);
  [[nodiscard]] bool has_bouncer() const { return !bouncer_.empty(); }
  // Creates database `name` on the primary and waits (up to 30 s) until the standby
  // answers on it.
  Status create_database(const std::string& name);

  // pg-test-server.sh's down, up, standby-down, standby-up: on the primary or the
  // standby of the moment.
  Status script(const std::string& verb);

  // After a change of primary (the standby promoted, the old primary stopped or fenced:
  // the script refuses while it runs or while the standby is still in recovery): the
  // standby is the primary from now on, and the old primary, not running, takes the
  // standby's place. URLs, ports and folders follow, here and in the script's state.
  Status promoted_standby();
  // After promoted_standby(): the old primary's folder replaced by a fresh
  // `pg_basebackup -R` from the new primary and started, on its old port, as the new
  // primary's streaming standby (pg-test-server.sh rebuild-standby). Returns once it runs;
  // whether it streams yet is the caller's to wait for. The changes of primary so far
  // count the rebuilds.
  Status rebuild_standby();
  [[nodiscard]] int changes_of_primary() const { return changes_; }

  // URLs of database `db` on the primary, the standby and through PgBouncer; the
  // primary's and the standby's change with promoted_standby().
  [[nodiscard]] std::string primary_url(const std::string& db) const;
  [[nodiscard]] std::string standby_url(const std::string& db) const;
  [[nodiscard]] std::string bouncer_url(const std::string& db) const;
  // PgBouncer's admin console (database `pgbouncer`): PAUSE, RESUME, SHOW.
  [[nodiscard]] std::string bouncer_admin_url() const { return bouncer_url("pgbouncer"); }
  [[nodiscard]] int primary_port() const;
  [[nodiscard]] int standby_port() const;
  // The servers' data folders (pg-test-server.sh's state file), for FrozenServer.
  [[nodiscard]] const std::string& primary_dir() const { return primary_dir_; }
  [[nodiscard]] const std::string& standby_dir() const { return standby_dir_; }

 private:
  explicit PgCluster(ClusterOptions options) : options_(std::move(options)) {}
  [[nodiscard]] EnvVars server_env() const;
  [[nodiscard]] EnvVars bouncer_env() const;
  Result<std::string> run(const std::string& script, const std::vector<std::string>& args,
                          const EnvVars& env);

  ClusterOptions options_;
  std::string primary_;  // URLs as the scripts print them (database postgres)
  std::string standby_;
  std::string bouncer_;
  std::string primary_dir_, standby_dir_;
  bool started_ = false;
  int changes_ = 0;
  int runs_ = 0;  // numbers the scripts' output files
};

// `url` (postgresql://USER@127.0.0.1:PORT/DB, as the scripts print it) with another port.
std::string with_port(const std::string& url, int port);
// NAME='value' from a test script's state file (pg-test-server.sh, patroni-test-cluster.sh);
// empty when absent.
std::string state_value(const std::string& state, const std::string& name);

// `url` (one host, as the scripts print it) with a second host, 127.0.0.1:`port`, after
// the first: a libpq multi-host URL.
std::string with_second_host(const std::string& url, int port);

// The folder holding pg-test-server.sh: `configured` when not empty, else
// $HOLDFAST_SCRIPTS_DIR, the source tree's scripts/ and ../../../scripts next to `exe`,
// the first that has it. NOT_FOUND naming what was tried.
Result<std::string> find_scripts_dir(const std::string& configured, const std::string& exe);

}  // namespace holdfast::panel::drill
