#include "drill_pg_patroni.hpp"

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drill_pg_cluster.hpp"
#include "drill_pg_silence.hpp"
#include "holdfast/pg/connection.hpp"
#include "http_client.hpp"

namespace holdfast::panel::drill {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

}  // namespace

EnvVars PatroniCluster::env() const {
  return {{"HOLDFAST_PATRONI_STATE_DIR", (fs::path(options_.work_dir) / "patroni-state").string()},
          {"HOLDFAST_PATRONI_DCS", options_.dcs},
          {"HOLDFAST_PG_MAX_CONNECTIONS", std::to_string(options_.max_connections)}};
}

Result<std::string> PatroniCluster::run(const std::vector<std::string>& args, Duration timeout) {
  std::vector<std::string> argv = {
      (fs::path(options_.scripts_dir) / "patroni-test-cluster.sh").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out =
      (fs::path(options_.work_dir) / fmt::format("patroni-{:02}-{}.out", ++runs_, args.at(0)))
          .string();
  return run_command(argv, env(), out, timeout);
}

Result<std::unique_ptr<PatroniCluster>> PatroniCluster::start(const PatroniOptions& options) {
  if (options.dcs != "etcd3" && options.dcs != "etcd") {
    return Status(Code::kInvalidArgument,
                  fmt::format("Patroni's DCS client is etcd3 or etcd (v2), not '{}'", options.dcs));
  }
  std::error_code ec;
  fs::create_directories(options.work_dir, ec);
  if (ec) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot create {}: {}", options.work_dir, ec.message()));
  }
  auto cluster = std::unique_ptr<PatroniCluster>(new PatroniCluster(options));
  Result<std::string> out = cluster->run({"start"}, seconds(420));
  if (!out.ok()) return Status(out.status()).annotate("starting the Patroni cluster");
  cluster->started_ = true;
  const std::string state =
      read_text((fs::path(options.work_dir) / "patroni-state" / "cluster.env").string());
  const std::string root = state_value(state, "root");
  std::istringstream lines(*out);
  std::string url;
  std::getline(lines, url);
  PatroniNode node;
  while (lines >> node.name >> node.pg_port >> node.rest_port) {
    node.data_dir = (fs::path(root) / node.name / "data").string();
    cluster->nodes_.push_back(node);
  }
  const pid_t etcd = static_cast<pid_t>(std::atol(read_text(root + "/etcd.pid").c_str()));
  if (root.empty() || cluster->nodes_.size() != 3 || etcd <= 1) {
    return Status(Code::kInternal,
                  fmt::format("patroni-test-cluster.sh printed no three nodes: {}", *out));
  }
  cluster->etcd_pid_ = etcd;
  cluster->etcd_url_ = "http://127.0.0.1:" + state_value(state, "etcd_client");
  return cluster;
}

PatroniCluster::~PatroniCluster() {
  try {
    if (etcd_pid_ > 1) (void)::kill(etcd_pid_, SIGCONT);
    for (const PatroniNode& n : nodes_)
      continue_server(n.data_dir);
    if (started_) (void)run({"stop"}, seconds(90));
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
  }
}

std::string PatroniCluster::hosts_url(const std::string& db) const {
  std::string hosts;
  for (const PatroniNode& n : nodes_)
    hosts += fmt::format("{}127.0.0.1:{}", hosts.empty() ? "" : ",", n.pg_port);
  return fmt::format("postgresql://postgres@{}/{}", hosts, db);
}

std::string PatroniCluster::node_url(const PatroniNode& node, const std::string& db) {
  return fmt::format("postgresql://postgres@127.0.0.1:{}/{}", node.pg_port, db);
}

Result<std::string> PatroniCluster::rest(const PatroniNode& node, const std::string& method,
                                         const std::string& path, const std::string& body,
                                         Duration timeout) const {
  http_client::Client http("127.0.0.1", node.rest_port);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout);
  http.set_connection_timeout(us);
  http.set_read_timeout(us);
  http.set_write_timeout(us);
  http_client::Result r;
  if (method == "GET") {
    r = http.Get(path);
  } else if (method == "POST") {
    r = http.Post(path, body, "application/json");
  } else if (method == "PATCH") {
    // The drill's client has no PATCH; curl has.
    const double s = std::chrono::duration<double>(timeout).count();
    Result<std::string> out = run_command(
        {"/usr/bin/curl", "-s", "-f", "-m", fmt::format("{:.1f}", s), "-X", "PATCH", "-H",
         "Content-Type: application/json", "-d", body,
         fmt::format("http://127.0.0.1:{}{}", node.rest_port, path)},
        {}, (fs::path(options_.work_dir) / "patroni-patch.out").string(), timeout + seconds(2));
    if (!out.ok())
      return Status(out.status()).annotate(fmt::format("PATCH {} on {}", path, node.name));
    return *out;
  } else {
    return Status(Code::kInvalidArgument, "unknown method " + method);
  }
  if (!r) {
    return Status(Code::kUnavailable, fmt::format("{} {} on {}: {}", method, path, node.name,
                                                  http_client::to_string(r.error())));
  }
  if (r->status < 200 || r->status > 299) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("{} {} on {}: HTTP {}: {}", method, path, node.name, r->status,
                              r->body.substr(0, 300)));
  }
  return r->body;
}

Result<PatroniNode> PatroniCluster::member(const std::string& role) const {
  Status last(Code::kUnavailable, "no node's REST API answered GET /cluster");
  for (const PatroniNode& n : nodes_) {
    Result<std::string> body = rest(n, "GET", "/cluster", "", seconds(1));
    if (!body.ok()) {
      last = body.status();
      continue;
    }
    const json j = json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.contains("members")) continue;
    for (const json& m : j["members"]) {
      if (m.value("role", "") != role || m.value("state", "") != "running") continue;
      const std::string name = m.value("name", "");
      for (const PatroniNode& node : nodes_) {
        if (node.name == name) return node;
      }
    }
    return Status(Code::kNotFound, fmt::format("no running {} in {}", role, body->substr(0, 400)));
  }
  return last;
}

Result<PatroniNode> PatroniCluster::leader() const {
  return member("leader");
}
Result<PatroniNode> PatroniCluster::sync_standby() const {
  return member("sync_standby");
}

std::string PatroniCluster::writer_url(const std::string& db) const {
  Result<PatroniNode> l = leader();
  return l.ok() ? node_url(*l, db) : hosts_url(db) + "?target_session_attrs=read-write";
}

Status PatroniCluster::wait_healthy(Duration patience) {
  const long s =
      std::max<long>(1, static_cast<long>(std::chrono::duration_cast<seconds>(patience).count()));
  Result<std::string> r = run({"wait-healthy", std::to_string(s)}, patience + seconds(15));
  return r.ok() ? Status() : Status(r.status()).annotate("the Patroni cluster");
}

Status PatroniCluster::create_database(const std::string& db) {
  pg::ConnectOptions o;
  o.conninfo = writer_url("postgres");
  o.application_name = "holdfast-drill";
  o.connect_timeout = seconds(5);
  Result<pg::Connection> conn = pg::Connection::open(o);
  if (!conn.ok()) return Status(conn.status()).annotate("connecting to the Patroni leader");
  // A name of our own ([a-z_]), so quoting it as an identifier is enough.
  if (auto r = conn->query(fmt::format("CREATE DATABASE \"{}\"", db)); !r.ok()) {
    return Status(r.status()).annotate("creating database " + db);
  }
  return Status();
}

bool runs_as_primary(const WriterWatch::Change& change) {
  return (change.role == "master" || change.role == "primary") && change.state == "running";
}

WriterWatch::WriterWatch(const PatroniCluster& cluster, std::function<double()> since)
    : since_(std::move(since)) {
  for (std::size_t i = 0; i < cluster.nodes().size(); ++i)
    threads_.emplace_back([this, &cluster, i] { poll(cluster, i); });
}

void WriterWatch::stop() {
  stop_ = true;
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WriterWatch::poll(const PatroniCluster& cluster, std::size_t node) {
  const PatroniNode& n = cluster.nodes()[node];
  Change last;
  bool first = true;
  while (!stop_) {
    const auto next = std::chrono::steady_clock::now() + milliseconds(100);
    Change c;
    c.node = n.name;
    c.t = since_();
    http_client::Client http("127.0.0.1", n.rest_port);
    http.set_connection_timeout(milliseconds(400));
    http.set_read_timeout(milliseconds(400));
    // Patroni answers 503 when its PostgreSQL is not running: the body still says why.
    const http_client::Result r = http.Get("/patroni");
    const std::string text = r ? r->body : std::string();
    const json j = json::parse(text, nullptr, false);
    if (j.is_object()) {
      c.role = j.value("role", "");
      c.state = j.value("state", "");
      c.timeline = j.value("timeline", 0L);
    } else {
      c.state = "unanswered";
    }
    if (first || c.role != last.role || c.state != last.state || c.timeline != last.timeline) {
      std::lock_guard<std::mutex> lock(mutex_);
      changes_.push_back(c);
      last = c;
      first = false;
    }
    std::this_thread::sleep_until(next);
  }
}

std::vector<WriterWatch::Change> WriterWatch::changes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return changes_;
}

double WriterWatch::promoted_at(double from, const std::string& old_leader,
                                long old_timeline) const {
  for (const Change& c : changes()) {
    if (c.t < from || !runs_as_primary(c)) continue;
    if (c.node != old_leader || c.timeline > old_timeline) return c.t;
  }
  return -1;
}

std::string WriterWatch::summary(double from) const {
  std::string out;
  for (const Change& c : changes()) {
    if (c.t < from) continue;
    out += fmt::format("{}{} {}/{}{} at {:.2f} s", out.empty() ? "" : "; ", c.node,
                       c.role.empty() ? "-" : c.role, c.state,
                       c.timeline > 0 ? fmt::format(" tl {}", c.timeline) : std::string(), c.t);
  }
  return out;
}

}  // namespace holdfast::panel::drill
