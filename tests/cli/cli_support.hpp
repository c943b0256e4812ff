// What the holdfast tool's tests share: running the tool as a user does, a fresh folder, and
// a panel started as a child process.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace cli_test {

namespace fs = std::filesystem;

struct CommandRun {
  int exit_status = -1;
  std::string err;
};

// Runs `holdfast <args>` with a 60 s limit (`limit`: killed then); stdout is discarded.
inline CommandRun holdfast(const std::string& args, const std::string& limit = "60") {
  const fs::path err =
      fs::temp_directory_path() / ("holdfast-cli-" + std::to_string(::getpid()) + ".err");
  const std::string cmd = "timeout -s KILL " + limit + " " + std::string(HOLDFAST_BIN) + " " +
                          args + " >/dev/null 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  CommandRun r;
  r.exit_status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  r.err = text.str();
  fs::remove(err);
  return r;
}

// An empty folder of this test's own in the temporary folder (its name says which test).
inline fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("holdfast-cli-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void expect_refused(const std::string& args, const std::string& mention) {
  const CommandRun r = holdfast(args);
  EXPECT_EQ(r.exit_status, 2) << "holdfast " << args << "\n" << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << "holdfast " << args << "\n" << r.err;
  // One line.
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Runs `cmd` in a shell and returns its standard output, trimmed.
inline std::string shell_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p) != nullptr)
      out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

// A `holdfast panel --db DB --port 0` started as a child, its stdout (and, with
// `with_stderr`, its stderr) on a pipe this process reads; SIGPIPE at its default, as a
// shell starts it; TMPDIR set when `tmpdir` is given.
struct PanelChild {
  pid_t pid = -1;
  int out = -1;  // the pipe's reading end
};
inline PanelChild start_panel(const std::string& db, bool with_stderr,
                              const std::string& tmpdir = "") {
  int out[2];
  if (::pipe(out) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(out[1], STDOUT_FILENO);
    if (with_stderr) ::dup2(out[1], STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    if (!tmpdir.empty()) ::setenv("TMPDIR", tmpdir.c_str(), 1);
    ::execl(HOLDFAST_BIN, HOLDFAST_BIN, "panel", "--db", db.c_str(), "--port", "0",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  return {pid, out[0]};
}

// What `fd` gives until `done(text so far)` or its end.
inline std::string read_until(int fd, const std::function<bool(const std::string&)>& done) {
  std::string printed;
  char chunk[512];
  while (!done(printed)) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n <= 0) break;
    printed.append(chunk, static_cast<std::size_t>(n));
  }
  return printed;
}

}  // namespace cli_test
