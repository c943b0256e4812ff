#include "drill_pg_cluster.hpp"

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "drill_pg_silence.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast::panel::drill {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// `url` (".../postgres" as the scripts print it) with database `db`.
std::string with_database(const std::string& url, const std::string& db) {
  const std::size_t slash = url.rfind('/');
  return slash == std::string::npos ? url : url.substr(0, slash + 1) + db;
}

Result<pg::Connection> connect(const std::string& url) {
  pg::ConnectOptions o;
  o.conninfo = url;
  o.application_name = "holdfast-drill";
  o.connect_timeout = seconds(5);
  return pg::Connection::open(o);
}

}  // namespace

std::string state_value(const std::string& state, const std::string& name) {
  const std::string mark = "\n" + name + "='";
  const std::size_t at = ("\n" + state).find(mark);
  if (at == std::string::npos) return {};
  const std::size_t from = at + mark.size() - 1;
  const std::size_t to = state.find('\'', from);
  return to == std::string::npos ? std::string() : state.substr(from, to - from);
}

std::string with_port(const std::string& url, int port) {
  const std::size_t host = url.find("@127.0.0.1:");
  if (host == std::string::npos) return url;
  const std::size_t from = host + std::string_view("@127.0.0.1:").size();
  const std::size_t to = url.find('/', from);
  return url.substr(0, from) + std::to_string(port) +
         (to == std::string::npos ? std::string() : url.substr(to));
}

std::string with_second_host(const std::string& url, int port) {
  const std::size_t host = url.find("@127.0.0.1:");
  if (host == std::string::npos) return url;
  const std::size_t slash = url.find('/', host);
  const std::string extra = fmt::format(",127.0.0.1:{}", port);
  return slash == std::string::npos ? url + extra
                                    : url.substr(0, slash) + extra + url.substr(slash);
}

Result<std::string> find_scripts_dir(const std::string& configured, const std::string& exe) {
  std::vector<std::string> candidates;
  if (!configured.empty()) {
    candidates.push_back(configured);
  } else {
    if (const char* env = std::getenv("HOLDFAST_SCRIPTS_DIR"); env != nullptr && *env != '\0')
      candidates.emplace_back(env);
#ifdef HOLDFAST_DRILL_SOURCE_DIR
    candidates.emplace_back(HOLDFAST_DRILL_SOURCE_DIR "/scripts");
#endif
    // build/<preset>/apps/holdfast/holdfast -> the source tree's scripts/.
    if (!exe.empty()) {
      candidates.push_back((fs::path(exe).parent_path() / ".." / ".." / ".." / "scripts").string());
    }
  }
  std::string tried;
  for (const std::string& dir : candidates) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / "pg-test-server.sh", ec)) {
      return fs::weakly_canonical(fs::path(dir), ec).string();
    }
    tried += (tried.empty() ? "" : ", ") + dir;
  }
  return Status(Code::kNotFound, fmt::format("scripts/pg-test-server.sh not found (tried: {}); set "
                                             "HOLDFAST_SCRIPTS_DIR to the folder that has it",
                                             tried.empty() ? "nothing" : tried));
}

EnvVars PgCluster::server_env() const {
  return {{"HOLDFAST_PG_STATE_DIR", (fs::path(options_.work_dir) / "pg-state").string()},
          {"HOLDFAST_PG_STANDBY", "1"},
          {"HOLDFAST_PG_MAX_CONNECTIONS", std::to_string(options_.max_connections)}};
}

EnvVars PgCluster::bouncer_env() const {
  return {
      {"HOLDFAST_PGBOUNCER_STATE_DIR", (fs::path(options_.work_dir) / "bouncer-state").string()},
      {"HOLDFAST_PGBOUNCER_POOL_SIZE", std::to_string(options_.bouncer_pool_size)},
      {"HOLDFAST_PGBOUNCER_LOGIN_RETRY", options_.bouncer_login_retry},
      {"HOLDFAST_PGBOUNCER_QUERY_WAIT", options_.bouncer_query_wait}};
}

Result<std::string> PgCluster::run(const std::string& script, const std::vector<std::string>& args,
                                   const EnvVars& env) {
  std::vector<std::string> argv = {(fs::path(options_.scripts_dir) / script).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out =
      (fs::path(options_.work_dir) / fmt::format("script-{:02}-{}.out", ++runs_, args.at(0)))
          .string();
  return run_command(argv, env, out, seconds(120));
}

Result<std::unique_ptr<PgCluster>> PgCluster::start(const ClusterOptions& options) {
  std::error_code ec;
  fs::create_directories(options.work_dir, ec);
  if (ec) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot create {}: {}", options.work_dir, ec.message()));
  }
  auto cluster = std::unique_ptr<PgCluster>(new PgCluster(options));
  Result<std::string> primary = cluster->run("pg-test-server.sh", {"start"}, cluster->server_env());
  if (!primary.ok()) return Status(primary.status()).annotate("starting the drill's PostgreSQL");
  cluster->started_ = true;
  cluster->primary_ = *primary;
  Result<std::string> standby =
      cluster->run("pg-test-server.sh", {"standby-url"}, cluster->server_env());
  if (!standby.ok()) return standby.status();
  cluster->standby_ = *standby;
  const std::string state =
      read_text((fs::path(options.work_dir) / "pg-state" / "server.env").string());
  cluster->primary_dir_ = state_value(state, "data_dir");
  cluster->standby_dir_ = state_value(state, "standby_dir");
  if (cluster->primary_dir_.empty() || cluster->standby_dir_.empty()) {
    return Status(Code::kFailedPrecondition,
                  "pg-test-server.sh's state file names no data_dir and standby_dir");
  }
  return cluster;
}

PgCluster::~PgCluster() {
  try {
    for (const std::string& dir : {primary_dir_, standby_dir_}) {
      if (!dir.empty()) continue_server(dir);
    }
    if (!bouncer_.empty()) (void)run("pgbouncer-test.sh", {"stop"}, bouncer_env());
    if (started_) (void)run("pg-test-server.sh", {"stop"}, server_env());
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
  }
}

Status PgCluster::start_bouncer(const std::string& server_url) {
  Result<std::string> url = run("pgbouncer-test.sh", {"start", server_url}, bouncer_env());
  if (!url.ok()) return Status(url.status()).annotate("starting PgBouncer");
  bouncer_ = *url;
  return Status();
}

Status PgCluster::repoint_bouncer(int port) {
  if (bouncer_.empty()) return Status();
  Result<std::string> r =
      run("pgbouncer-test.sh", {"repoint", std::to_string(port)}, bouncer_env());
  if (!r.ok()) return Status(r.status()).annotate("repointing PgBouncer");
  Result<double> reloaded = ask_within(bouncer_admin_url(), "RELOAD", seconds(5));
  return reloaded.ok() ? Status() : Status(reloaded.status()).annotate("PgBouncer's RELOAD");
}

Status PgCluster::create_database(const std::string& name) {
  Result<pg::Connection> conn = connect(primary_);
  if (!conn.ok()) return conn.status();
  // A name of our own ([a-z_]), so quoting it as an identifier is enough.
  if (auto r = conn->query(fmt::format("CREATE DATABASE \"{}\"", name)); !r.ok()) {
    return Status(r.status()).annotate("creating database " + name);
  }
  const auto until = std::chrono::steady_clock::now() + seconds(30);
  for (;;) {
    Result<pg::Connection> on_standby = connect(standby_url(name));
    if (on_standby.ok()) return Status();
    if (std::chrono::steady_clock::now() > until) {
      return Status(on_standby.status()).annotate("database " + name + " on the standby");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status PgCluster::script(const std::string& verb) {
  Result<std::string> r = run("pg-test-server.sh", {verb}, server_env());
  return r.ok() ? Status() : r.status();
}

std::string PgCluster::primary_url(const std::string& db) const {
  return with_database(primary_, db);
}
std::string PgCluster::standby_url(const std::string& db) const {
  return with_database(standby_, db);
}
std::string PgCluster::bouncer_url(const std::string& db) const {
  return with_database(bouncer_, db);
}
int PgCluster::primary_port() const {
  const std::size_t at = primary_.find("@127.0.0.1:");
  return at == std::string::npos ? -1 : std::atoi(primary_.c_str() + at + 11);
}
int PgCluster::standby_port() const {
  const std::size_t at = standby_.find("@127.0.0.1:");
  return at == std::string::npos ? -1 : std::atoi(standby_.c_str() + at + 11);
}

Status PgCluster::promoted_standby() {
  if (Status s = script("promoted"); !s.ok()) return s.annotate("recording the promotion");
  std::swap(primary_, standby_);
  std::swap(primary_dir_, standby_dir_);
  ++changes_;
  return Status();
}

Status PgCluster::rebuild_standby() {
  Result<std::string> url = run("pg-test-server.sh", {"rebuild-standby"}, server_env());
  if (!url.ok()) return Status(url.status()).annotate("rebuilding the old primary as the standby");
  if (*url != standby_) {
    return Status(
        Code::kInternal,
        fmt::format("the rebuilt standby is at {}, the drill expected {}", *url, standby_));
  }
  return Status();
}

}  // namespace holdfast::panel::drill
