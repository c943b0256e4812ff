#include "drill_pg_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace holdfast::panel::drill {
namespace {

// This environment with `env` on top, as "NAME=value" strings.
std::vector<std::string> environment_with(const EnvVars& env) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : env) {
      if (entry.starts_with(name + "=")) replaced = true;
    }
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [name, value] : env)
    out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The exit status as one number: the exit code, or 128 + the signal.
int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.pop_back();
  return s;
}

}  // namespace

Result<ChildProcess> ChildProcess::spawn(const std::vector<std::string>& argv, const EnvVars& env,
                                         const std::string& output, const std::string& errors) {
  if (argv.empty()) return Status(Code::kInvalidArgument, "no command to run");
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = environment_with(env);
  std::vector<char*> c_args = c_strings(args);
  std::vector<char*> c_envs = c_strings(envs);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (errors.empty()) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errors.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  // The child starts with no signal blocked (the drill command may block SIGINT/SIGTERM) and
  // with SIGPIPE at its default: holdfast ignores it (main.cpp), which a child would inherit.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t pipe_default;
  sigemptyset(&pipe_default);
  sigaddset(&pipe_default, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &pipe_default);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, c_args[0], &actions, &attr, c_args.data(), c_envs.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  }
  return ChildProcess(pid);
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    stop();
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

Result<int> ChildProcess::wait(Duration timeout) {
  if (pid_ <= 0) return Status(Code::kFailedPrecondition, "no process");
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return exit_status(status);
    }
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return Status(Code::kInternal, fmt::format("waitpid: {}", std::strerror(errno)));
    }
    if (std::chrono::steady_clock::now() >= until) {
      return Status(Code::kDeadlineExceeded, fmt::format("process {} still runs", pid_));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ChildProcess::stop(Duration grace) noexcept {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (wait(grace).ok()) return;
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<int> wait_for_port(ChildProcess& process, const std::string& output, std::string_view mark,
                          Duration timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const std::string text = read_text(output);
    if (const std::size_t at = text.find(mark); at != std::string::npos) {
      return std::atoi(text.c_str() + at + mark.size());
    }
    Result<int> exited = process.wait(std::chrono::milliseconds(100));
    if (exited.ok() || std::chrono::steady_clock::now() > until) {
      return Status(Code::kFailedPrecondition,
                    fmt::format("the process did not start ({}): {}",
                                exited.ok() ? fmt::format("exit status {}", *exited) : "timed out",
                                text.substr(text.size() > 800 ? text.size() - 800 : 0)));
    }
  }
}

Result<std::string> run_command(const std::vector<std::string>& argv, const EnvVars& env,
                                const std::string& output, Duration timeout) {
  Result<ChildProcess> child = ChildProcess::spawn(argv, env, output, output + ".err");
  if (!child.ok()) return child.status();
  Result<int> code = child->wait(timeout);
  if (code.ok() && *code == 0) return trimmed(read_text(output));
  const std::string text = read_text(output + ".err");
  const std::string why =
      code.ok() ? fmt::format("exit status {}", *code) : std::string(code.status().message());
  const std::string tail = text.size() > 600 ? text.substr(text.size() - 600) : text;
  return Status(Code::kFailedPrecondition,
                fmt::format("{} {} failed ({}): {}", argv[0], argv.size() > 1 ? argv[1] : "", why,
                            trimmed(tail)));
}

}  // namespace holdfast::panel::drill
