#include "drill_pg_silence.hpp"

#include <dirent.h>
#include <libpq-fe.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>

namespace holdfast::panel::drill {
namespace {

using Steady = std::chrono::steady_clock;

// The postmaster's pid: the first line of data_dir/postmaster.pid; -1 when absent.
pid_t postmaster_of(const std::string& data_dir) {
  std::ifstream in(data_dir + "/postmaster.pid");
  long pid = -1;
  if (!(in >> pid) || pid <= 1) return -1;
  return static_cast<pid_t>(pid);
}

// Process `pid`'s state letter and parent from /proc/PID/stat; state 0 when it is gone.
// The command name (field 2) may hold spaces and parentheses: the fields after it start
// after its last ')'.
struct ProcStat {
  char state = 0;
  pid_t parent = -1;
};
ProcStat proc_stat(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return {};
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos || close + 4 >= line.size()) return {};
  ProcStat s;
  s.state = line[close + 2];
  s.parent = static_cast<pid_t>(std::strtol(line.c_str() + close + 4, nullptr, 10));
  return s;
}

// The children of `parent` (what `pgrep -P parent` lists), from /proc.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 1) continue;
    if (proc_stat(static_cast<pid_t>(pid)).parent == parent) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

// Waits (up to `patience`) until every process of `pids` is stopped or gone; the ones
// still running.
std::vector<pid_t> wait_stopped(const std::vector<pid_t>& pids, Duration patience) {
  const auto until = Steady::now() + patience;
  for (;;) {
    std::vector<pid_t> running;
    for (pid_t p : pids) {
      const char state = proc_stat(p).state;
      if (state != 0 && state != 'T' && state != 't' && state != 'Z' && state != 'X')
        running.push_back(p);
    }
    if (running.empty() || Steady::now() >= until) return running;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

double ms_since(Steady::time_point from) {
  return std::chrono::duration<double, std::milli>(Steady::now() - from).count();
}

struct PgConnFree {
  void operator()(PGconn* c) const { PQfinish(c); }
};

// Waits until the socket of `conn` is ready for `events` or `until` passes: false then.
bool ready(PGconn* conn, short events, Steady::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Steady::now());
    if (left.count() <= 0) return false;
    pollfd p{PQsocket(conn), events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let libpq report the error
  }
}

// A shell that sends SIGCONT to `pids` after `after`, unless it is stopped first
// (SIGTERM: it ends its sleep too, leaving nothing behind).
Result<ChildProcess> start_guard(const std::vector<pid_t>& pids, Duration after) {
  std::string list;
  for (pid_t p : pids)
    list += fmt::format(" {}", p);
  const double seconds = std::chrono::duration<double>(after).count();
  const std::string script = fmt::format(
      "trap 'kill $s 2>/dev/null; exit 0' TERM; sleep {:.1f} & s=$!; wait $s; kill -CONT{} "
      "2>/dev/null; exit 0",
      seconds, list);
  return ChildProcess::spawn({"/bin/sh", "-c", script}, {}, "/dev/null");
}

}  // namespace

Status FrozenServer::freeze(const std::string& data_dir, Duration guard_after) {
  thaw();
  const pid_t pm = postmaster_of(data_dir);
  if (pm < 0) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("no postmaster.pid in {}: the server is not running", data_dir));
  }
  postmaster_ = pm;
  if (::kill(pm, SIGSTOP) != 0) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("kill -STOP {}: {}", pm, std::strerror(errno)));
  }
  stopped_.push_back(pm);
  // Stopped, it forks no more: its children listed from now on are all there will be.
  if (!wait_stopped({pm}, std::chrono::seconds(2)).empty()) {
    thaw();
    return Status(Code::kDeadlineExceeded, fmt::format("the postmaster {} did not stop", pm));
  }
  for (pid_t child : children_of(pm)) {
    if (::kill(child, SIGSTOP) == 0) stopped_.push_back(child);
  }
  // The guard first: were this process to die now, the server would stay frozen.
  Result<ChildProcess> guard = start_guard(stopped_, guard_after);
  if (!guard.ok()) {
    thaw();
    return Status(guard.status()).annotate("the freeze's guard");
  }
  guard_ = std::move(*guard);
  if (const std::vector<pid_t> running = wait_stopped(stopped_, std::chrono::seconds(2));
      !running.empty()) {
    thaw();
    return Status(Code::kDeadlineExceeded,
                  fmt::format("{} of the server's processes did not stop", running.size()));
  }
  return Status();
}

void FrozenServer::thaw() noexcept {
  if (stopped_.empty()) return;
  try {
    for (pid_t p : stopped_)
      (void)::kill(p, SIGCONT);
    // A child that was forked just before the postmaster stopped, or one it forked since.
    for (pid_t p : children_of(postmaster_))
      (void)::kill(p, SIGCONT);
  } catch (...) {  // NOLINT(bugprone-empty-catch): thawing never throws
  }
  stopped_.clear();
  guard_.stop();
}

std::size_t FrozenServer::fence() noexcept {
  if (stopped_.empty()) return 0;
  std::size_t killed = 0;
  try {
    std::vector<pid_t> all = stopped_;
    for (pid_t p : children_of(postmaster_)) {
      if (std::find(all.begin(), all.end(), p) == all.end()) all.push_back(p);
    }
    for (pid_t p : all) {
      if (::kill(p, SIGKILL) == 0) ++killed;
    }
    // Gone (or zombies until their parent reaps them): state 0, Z or X.
    const auto until = Steady::now() + std::chrono::seconds(2);
    for (;;) {
      bool alive = false;
      for (pid_t p : all) {
        const char state = proc_stat(p).state;
        alive = alive || (state != 0 && state != 'Z' && state != 'X');
      }
      if (!alive || Steady::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): fencing never throws
  }
  stopped_.clear();
  guard_.stop();
  return killed;
}

void continue_server(const std::string& data_dir) noexcept {
  try {
    const pid_t pm = postmaster_of(data_dir);
    if (pm < 0) return;
    (void)::kill(pm, SIGCONT);
    for (pid_t p : children_of(pm))
      (void)::kill(p, SIGCONT);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a cleanup path never throws
  }
}

Result<double> ask_within(const std::string& url, const std::string& sql, Duration deadline) {
  const auto t0 = Steady::now();
  const auto until = t0 + deadline;
  const char* keys[] = {"dbname", "application_name", nullptr};
  const char* values[] = {url.c_str(), "holdfast-drill-probe", nullptr};
  std::unique_ptr<PGconn, PgConnFree> conn(PQconnectStartParams(keys, values, 1));
  if (!conn || PQstatus(conn.get()) == CONNECTION_BAD) {
    return Status(
        Code::kUnavailable,
        fmt::format("connecting: {}", conn ? PQerrorMessage(conn.get()) : "out of memory"));
  }
  const auto silent = [&](const char* stage) {
    return Status(Code::kDeadlineExceeded,
                  fmt::format("no answer within {:.0f} ms ({})",
                              std::chrono::duration<double, std::milli>(deadline).count(), stage));
  };
  for (PostgresPollingStatusType s = PGRES_POLLING_WRITING; s != PGRES_POLLING_OK;) {
    if (s == PGRES_POLLING_FAILED) {
      return Status(Code::kUnavailable, fmt::format("connecting: {}", PQerrorMessage(conn.get())));
    }
    if (!ready(conn.get(), s == PGRES_POLLING_READING ? POLLIN : POLLOUT, until))
      return silent("connecting");
    s = PQconnectPoll(conn.get());
  }
  if (PQsetnonblocking(conn.get(), 1) != 0 || PQsendQuery(conn.get(), sql.c_str()) == 0) {
    return Status(Code::kUnavailable, fmt::format("sending: {}", PQerrorMessage(conn.get())));
  }
  while (PQflush(conn.get()) == 1) {
    if (!ready(conn.get(), POLLOUT, until)) return silent("sending");
  }
  Status answer;
  for (;;) {
    while (PQisBusy(conn.get()) != 0) {
      if (!ready(conn.get(), POLLIN, until)) return silent("waiting for the answer");
      if (PQconsumeInput(conn.get()) == 0) {
        return Status(Code::kUnavailable, fmt::format("reading: {}", PQerrorMessage(conn.get())));
      }
    }
    PGresult* r = PQgetResult(conn.get());
    if (r == nullptr) break;
    const ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK && answer.ok()) {
      answer =
          Status(Code::kFailedPrecondition, fmt::format("{}: {}", sql, PQresultErrorMessage(r)));
    }
    PQclear(r);
  }
  if (!answer.ok()) return answer;
  return ms_since(t0);
}

Result<double> wait_for_answer(const std::string& url, Duration patience) {
  const auto t0 = Steady::now();
  for (;;) {
    Result<double> r = ask_within(url, "SELECT 1", std::chrono::seconds(1));
    if (r.ok()) return ms_since(t0);
    if (Steady::now() - t0 >= patience) return r.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace holdfast::panel::drill
