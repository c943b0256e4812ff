// What the PostgreSQL integration tests share: the server's URL, unique names (tests run
// in parallel processes against one server), an admin connection that causes real faults,
// and a private server of its own for a test that must stop and start it.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "holdfast/pg.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast::pgtest {

// The URL of the shared test server (scripts/run-tests.sh exports it), or "".
inline std::string server_url() {
  const char* url = std::getenv("HOLDFAST_TEST_PG_URL");
  return url != nullptr ? std::string(url) : std::string();
}

// The URL of the shared test server's streaming hot standby (HOLDFAST_TEST_PG_STANDBY_URL,
// exported by scripts/run-tests.sh), or "".
inline std::string standby_url() {
  const char* url = std::getenv("HOLDFAST_TEST_PG_STANDBY_URL");
  return url != nullptr ? std::string(url) : std::string();
}

// Skips the test loudly when there is no server.
#define HOLDFAST_REQUIRE_PG_SERVER()                                                     \
  do {                                                                                   \
    if (::holdfast::pgtest::server_url().empty()) {                                      \
      GTEST_SKIP() << "SKIPPED: no PostgreSQL test server (HOLDFAST_TEST_PG_URL is not " \
                      "set). Run `make test` or scripts/run-tests.sh, which start one "  \
                      "with scripts/pg-test-server.sh.";                                 \
    }                                                                                    \
  } while (0)

// Skips the test loudly when there is no server with a hot standby.
#define HOLDFAST_REQUIRE_PG_STANDBY()                                                      \
  do {                                                                                     \
    HOLDFAST_REQUIRE_PG_SERVER();                                                          \
    if (::holdfast::pgtest::standby_url().empty()) {                                       \
      GTEST_SKIP() << "SKIPPED: no PostgreSQL hot standby (HOLDFAST_TEST_PG_STANDBY_URL "  \
                      "is not set). Run `make test` or scripts/run-tests.sh, which start " \
                      "one with HOLDFAST_PG_STANDBY=1 scripts/pg-test-server.sh.";         \
    }                                                                                      \
  } while (0)

// "postgresql://user@127.0.0.1:P/db" -> its "127.0.0.1:P".
inline std::string host_port(const std::string& url) {
  const std::size_t at = url.find('@');
  const std::size_t slash = url.find('/', at);
  return url.substr(at + 1, slash - at - 1);
}

// `first` ("host:port") and then the hosts of `url`, as one multi-host URL.
inline std::string two_hosts(const std::string& first, const std::string& url) {
  const std::size_t at = url.find('@');
  return url.substr(0, at + 1) + first + "," + url.substr(at + 1);
}

// A name no other test process uses: "<prefix>_<pid>_<n>".
inline std::string unique(std::string_view prefix) {
  static std::atomic<int> n{0};
  return std::string(prefix) + "_" + std::to_string(::getpid()) + "_" + std::to_string(++n);
}

// A read of "<rows>/<who answered>" for `table`: who is what the server says,
// pg_is_in_recovery().
inline std::string rows_and_who_sql(const std::string& table) {
  return "SELECT count(*)::text || '/' || CASE WHEN pg_is_in_recovery() THEN "
         "'standby' ELSE 'primary' END FROM " +
         table;
}

// The server URL with `key=value` query parameters added.
inline std::string url_with(const std::string& url, const std::string& params) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + params;
}

// `url` with its user replaced (postgresql://USER@host...).
inline std::string url_as(const std::string& url, const std::string& user) {
  const std::size_t scheme = url.find("://");
  const std::size_t at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos) return url;
  return url.substr(0, scheme + 3) + user + url.substr(at);
}

// An admin connection (superuser) for setting up tables and causing faults.
class Admin {
 public:
  explicit Admin(const std::string& url) {
    auto c = pg::Connection::open(url);
    if (!c.ok()) ADD_FAILURE() << "admin connection: " << c.status().to_string();
    if (c.ok()) conn_ = std::move(*c);
  }

  // Runs one statement; a failure fails the test.
  pg::Rows exec(std::string_view sql, std::initializer_list<pg::Param> params = {}) {
    auto r = conn_.query(sql, params);
    EXPECT_TRUE(r.ok()) << sql << ": " << r.status().to_string();
    return r.ok() ? std::move(*r) : pg::Rows();
  }
  long long count(std::string_view sql, std::initializer_list<pg::Param> params = {}) {
    pg::Rows r = exec(sql, params);
    auto n = r.int64(0, 0);
    return n.ok() ? *n : -1;
  }

  // Terminates every backend whose application_name is `app`; returns how many.
  long long terminate(const std::string& app) {
    return count(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = $1 AND pid <> pg_backend_pid()",
        {app});
  }
  // Backends whose application_name is `app`.
  long long backends(const std::string& app) {
    return count("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", {app});
  }
  // Waits (really) until no backend of `app` is left.
  bool wait_gone(const std::string& app,
                 std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (backends(app) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  pg::Connection& conn() { return conn_; }

 private:
  pg::Connection conn_;
};

// Polls `pred` (really) every 5 ms until it holds or `limit` passes.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What `cmd` (a shell command line) prints on stdout, without the trailing newline; "error"
// when it cannot run or exits non-zero.
inline std::string command_output(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "error";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr)
    out += buf;
  const int rc = ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return rc == 0 ? out : "error";
}

// A throwaway server of the test's own (scripts/pg-test-server.sh with a private state
// folder), for tests that stop and restart it; with a streaming hot standby of its own when
// asked.
class PrivateServer {
 public:
  explicit PrivateServer(int max_connections = 20, bool with_standby = false)
      : with_standby_(with_standby) {
    char dir[] = "/tmp/holdfast-pg-private-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return;
    state_dir_ = dir;
    const std::string out = run("start", max_connections);
    if (out.rfind("postgresql://", 0) == 0) url_ = out;
    if (!url_.empty() && with_standby) {
      const std::string standby = run("standby-url", 0);
      if (standby.rfind("postgresql://", 0) == 0) standby_url_ = standby;
    }
  }
  ~PrivateServer() {
    if (!state_dir_.empty()) {
      run("stop", 0);
      ::rmdir(state_dir_.c_str());
    }
  }
  PrivateServer(const PrivateServer&) = delete;
  PrivateServer& operator=(const PrivateServer&) = delete;

  [[nodiscard]] const std::string& url() const { return url_; }
  // "" unless made with_standby (and it started).
  [[nodiscard]] const std::string& standby_url() const { return standby_url_; }
  // The primary's postmaster (after promoted(): the promoted standby's), from its
  // postmaster.pid; 0 when unknown.
  [[nodiscard]] pid_t postmaster_pid() const { return pid_of("data_dir='"); }
  // The standby's postmaster (after promoted() and rebuild_standby(): the rebuilt one's); 0
  // when unknown.
  [[nodiscard]] pid_t standby_postmaster_pid() const { return pid_of("standby_dir='"); }
  bool down() { return run("down", 0) != "error"; }
  bool up() { return run("up", 0) != "error"; }
  bool standby_down() { return run("standby-down", 0) != "error"; }
  bool standby_up() { return run("standby-up", 0) != "error"; }
  // The caller promoted the standby (pg_promote()) and stopped the primary for good: the
  // roles swap (url() is the promoted standby's, standby_url() the old primary's, to
  // rebuild).
  bool promoted() {
    if (run("promoted", 0) == "error") return false;
    std::swap(url_, standby_url_);
    return true;
  }
  // After promoted(): the old primary's folder becomes a fresh streaming standby of the new
  // primary, on the old primary's port (standby_url()).
  bool rebuild_standby() {
    const std::string out = run("rebuild-standby", 0);
    if (out.rfind("postgresql://", 0) != 0) return false;
    standby_url_ = out;
    return true;
  }

 private:
  // The postmaster of the folder server.env names after `key` ("data_dir='" or
  // "standby_dir='"), from its postmaster.pid.
  [[nodiscard]] pid_t pid_of(const std::string& key) const {
    std::ifstream env(state_dir_ + "/server.env");
    std::string line;
    std::string dir;
    while (std::getline(env, line)) {
      if (line.rfind(key, 0) == 0 && line.size() > key.size() + 1) {
        dir = line.substr(key.size(), line.size() - key.size() - 1);
      }
    }
    if (dir.empty()) return 0;
    std::ifstream pid_file(dir + "/postmaster.pid");
    long pid = 0;
    pid_file >> pid;
    return static_cast<pid_t>(pid);
  }
  std::string run(const char* verb, int max_connections) {
    std::string cmd = "HOLDFAST_PG_STATE_DIR='" + state_dir_ + "'";
    if (max_connections > 0)
      cmd += " HOLDFAST_PG_MAX_CONNECTIONS=" + std::to_string(max_connections);
    if (with_standby_) cmd += " HOLDFAST_PG_STANDBY=1";
    cmd += std::string(" '") + HOLDFAST_PG_TEST_SERVER_SCRIPT + "' " + verb;
    return command_output(cmd);
  }

  bool with_standby_ = false;
  std::string state_dir_;
  std::string url_;
  std::string standby_url_;
};

// A loopback port that completes TCP handshakes (the kernel's backlog) and never says a
// word: a connect to it hangs like one to a frozen server.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(fd_, 64) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() {
    for (const int c : accepted_)
      ::close(c);
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  [[nodiscard]] int port() const { return port_; }
  // Connections made to it so far (the kernel completed them; they stay open and unanswered).
  int tried() {
    for (;;) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK);
      if (c < 0) break;
      accepted_.push_back(c);
    }
    return static_cast<int>(accepted_.size());
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> accepted_;
};

// Freezes a server as a paused VM would (FAULTS.md, "A frozen server"): SIGSTOP to its
// postmaster and every child of it, SIGCONT to all of them in thaw() or the destructor (also
// when the test fails). The kernel still completes TCP connects; nothing ever answers.
class Freeze {
 public:
  explicit Freeze(pid_t postmaster) {
    if (postmaster <= 0) return;
    pids_.push_back(postmaster);
    if (::kill(postmaster, SIGSTOP) != 0) {
      pids_.clear();
      return;
    }
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string text;
      std::getline(stat, text);
      const std::size_t close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(text.substr(close + 2));
      char state = 0;
      long parent = 0;
      rest >> state >> parent;
      if (parent == postmaster) {
        const auto pid = static_cast<pid_t>(std::stol(name));
        if (::kill(pid, SIGSTOP) == 0) pids_.push_back(pid);
      }
    }
  }
  ~Freeze() { thaw(); }
  Freeze(const Freeze&) = delete;
  Freeze& operator=(const Freeze&) = delete;

  [[nodiscard]] bool frozen() const { return !pids_.empty(); }
  // Fences the frozen server for good, as a failover's fencing does: SIGKILL to every
  // process it froze, which then never answers again.
  void kill() {
    for (const pid_t pid : pids_)
      ::kill(pid, SIGKILL);
    pids_.clear();
  }
  void thaw() {
    for (const pid_t pid : pids_)
      ::kill(pid, SIGCONT);
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

// A throwaway PgBouncer of the test's own in transaction mode in front of `server`
// (scripts/pgbouncer-test.sh with a private state folder), stopped by its pid at the end.
class Bouncer {
 public:
  // `query_wait`, `login_retry`: PgBouncer's query_wait_timeout and server_login_retry in
  // seconds ("" for the script's defaults).
  explicit Bouncer(const std::string& server, const std::string& query_wait = "",
                   const std::string& login_retry = "") {
    char dir[] = "/tmp/holdfast-pgbouncer-private-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return;
    state_dir_ = dir;
    std::string env;
    if (!query_wait.empty()) env += "HOLDFAST_PGBOUNCER_QUERY_WAIT='" + query_wait + "' ";
    if (!login_retry.empty()) env += "HOLDFAST_PGBOUNCER_LOGIN_RETRY='" + login_retry + "' ";
    const std::string out =
        run(env + "'" + HOLDFAST_PGBOUNCER_TEST_SCRIPT + "' start '" + server + "'");
    if (out.rfind("postgresql://", 0) == 0) url_ = out;
  }
  ~Bouncer() {
    if (!state_dir_.empty()) {
      run(std::string("'") + HOLDFAST_PGBOUNCER_TEST_SCRIPT + "' stop");
      ::rmdir(state_dir_.c_str());
    }
  }
  Bouncer(const Bouncer&) = delete;
  Bouncer& operator=(const Bouncer&) = delete;

  // "" when it did not start.
  [[nodiscard]] const std::string& url() const { return url_; }

 private:
  // Runs `command` (the script and its arguments) with this PgBouncer's state folder.
  std::string run(const std::string& command) {
    return command_output("HOLDFAST_PGBOUNCER_STATE_DIR='" + state_dir_ + "' " + command);
  }

  std::string state_dir_;
  std::string url_;
};

// Pauses a standby's replay (pg_wal_replay_pause()) until destroyed, also when the test
// fails. `standby` is an Admin on the standby.
class ReplayPause {
 public:
  explicit ReplayPause(Admin& standby) : standby_(standby) {
    standby_.exec("SELECT pg_wal_replay_pause()");
    paused_ = eventually([&] {
      return standby_.exec("SELECT pg_get_wal_replay_pause_state()").text(0, 0) == "paused";
    });
  }
  ~ReplayPause() { resume(); }
  ReplayPause(const ReplayPause&) = delete;
  ReplayPause& operator=(const ReplayPause&) = delete;
  [[nodiscard]] bool paused() const { return paused_; }
  void resume() {
    if (!resumed_) standby_.exec("SELECT pg_wal_replay_resume()");
    resumed_ = true;
  }

 private:
  Admin& standby_;
  bool paused_ = false;
  bool resumed_ = false;
};

// Waits (really) until `standby` has replayed everything `primary` has written so far.
inline bool caught_up(const std::string& primary, const std::string& standby) {
  const std::string lsn =
      std::string(Admin(primary).exec("SELECT pg_current_wal_lsn()::text").text(0, 0));
  return eventually(
      [&] {
        return Admin(standby).count("SELECT (pg_last_wal_replay_lsn() >= $1::pg_lsn)::int",
                                    {lsn}) == 1;
      },
      std::chrono::milliseconds(10000));
}

// The primary's WAL insert position, pg_current_wal_insert_lsn(), as a number.
inline std::uint64_t wal_insert_position(Admin& primary) {
  const std::string text(primary.exec("SELECT pg_current_wal_insert_lsn()::text").text(0, 0));
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) return 0;
  return (std::stoull(text.substr(0, slash), nullptr, 16) << 32) |
         std::stoull(text.substr(slash + 1), nullptr, 16);
}

// The size of a WAL page (8 kB unless the server was built otherwise).
inline std::uint64_t wal_page_size(Admin& primary) {
  return std::stoull(std::string(primary.exec("SHOW wal_block_size").text(0, 0)));
}

// Fills the primary's current WAL page so that the next `bytes` of WAL end exactly at its
// end: a WAL message (pg_logical_emit_message(), which any wal_level takes) sized to the room
// left, after one that measures what such a record adds to its payload. A test then makes
// a write whose WAL is `bytes` long end its last record on the page boundary. false when a
// message landed elsewhere than planned (something else wrote meanwhile): try again.
inline bool fill_wal_page_but(Admin& primary, std::uint64_t bytes) {
  const std::uint64_t page = wal_page_size(primary);
  const auto emit = [&](std::uint64_t payload) {
    primary.exec("SELECT pg_logical_emit_message(false, 'holdfast-test', repeat('x', $1::int))",
                 {pg::Param(std::to_string(payload))});
  };
  const std::uint64_t before = wal_insert_position(primary);
  emit(256);
  const std::uint64_t after = wal_insert_position(primary);
  if (after / page != before / page) return false;  // crossed a page: measure again
  // At least what a message record adds, and less than 8 bytes more (records are 8-aligned).
  const std::uint64_t overhead = after - before - 256;
  const std::uint64_t room = page - after % page;
  if (room < bytes + overhead) {  // no room left for a message: on to the next page
    emit(room + 64);
    return false;
  }
  const std::uint64_t pad = room - bytes;
  emit(pad - overhead);
  return wal_insert_position(primary) == after + pad;
}

// Promotes `standby` and waits (really) until it takes writes.
inline bool promote(const std::string& standby) {
  Admin(standby).exec("SELECT pg_promote()");
  return eventually(
      [&] { return Admin(standby).count("SELECT (NOT pg_is_in_recovery())::int") == 1; },
      std::chrono::milliseconds(10000));
}

// Makes `table`'s inserts sleep 30 s at COMMIT when their transaction set hf.slow_commit =
// 'on' (function `fn`, a deferred constraint trigger), so that a test can terminate the backend
// during its COMMIT, before it committed (FAULTS.md: a COMMIT in doubt).
inline void make_commit_slow(Admin& admin, const std::string& table, const std::string& fn) {
  admin.exec("CREATE FUNCTION " + fn +
             "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
             "IF current_setting('hf.slow_commit', true) = 'on' THEN "
             "PERFORM pg_sleep(30); END IF; RETURN NULL; END $$");
  admin.exec("CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON " + table +
             " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()");
}

// Terminates the backend of application `app` on `url` once it is in COMMIT and waiting for
// `wait_event` ("PgSleep": make_commit_slow()'s; "SyncRep": a synchronous standby that does
// not exist, after the local commit).
inline std::thread kill_during_commit(const std::string& url, const std::string& app,
                                      const std::string& wait_event) {
  return std::thread([url, app, wait_event] {
    Admin killer(url);
    const bool found = eventually(
        [&] {
          return killer.count(
                     "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                     "= $1 AND query = 'COMMIT' AND wait_event = $2",
                     {app, wait_event}) == 1;
        },
        std::chrono::milliseconds(8000));
    EXPECT_TRUE(found) << "the COMMIT never waited for " << wait_event;
    EXPECT_EQ(killer.terminate(app), 1);
  });
}

}  // namespace holdfast::pgtest
