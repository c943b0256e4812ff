// Child processes of the PostgreSQL drill: the panels (`holdfast panel --pg ...`) and the
// helper scripts. Started with posix_spawn, their output into a file (never a pipe that
// could fill up and stall them), stopped by their own pid: SIGTERM, then SIGKILL.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"

namespace holdfast::panel::drill {

// NAME=value pairs added to (or replacing in) this process's environment.
using EnvVars = std::vector<std::pair<std::string, std::string>>;

class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts argv[0] (a path) with `env` on top of this environment; stdout goes to
  // `output`, stderr to `errors` (empty: `output` too), both created or truncated.
  static Result<ChildProcess> spawn(const std::vector<std::string>& argv, const EnvVars& env,
                                    const std::string& output, const std::string& errors = {});
  ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // stop().
  ~ChildProcess() { stop(); }

  // Waits for the process to exit: its exit status (128 + signal when killed), or
  // DEADLINE_EXCEEDED when it still runs after `timeout` (it is left running).
  Result<int> wait(Duration timeout);
  // SIGTERM, up to `grace` for it to exit, then SIGKILL; reaps it. Idempotent.
  void stop(Duration grace = std::chrono::seconds(5)) noexcept;
  [[nodiscard]] bool running() const noexcept { return pid_ > 0; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// Runs a command to its end (at most `timeout`): its stdout, trimmed; a Status quoting the
// end of its stderr when it fails. Its stdout is kept in `output`, its stderr in
// `output`.err.
Result<std::string> run_command(const std::vector<std::string>& argv, const EnvVars& env,
                                const std::string& output, Duration timeout);

// The file's text; empty when it cannot be read.
std::string read_text(const std::string& path);

// What `holdfast panel` prints when it is ready: "... on http://127.0.0.1:PORT/login ...".
inline constexpr std::string_view kPanelReady = "on http://127.0.0.1:";
// The port a server started as `process` prints after `mark` when it is ready, read from its
// output file `output`; FAILED_PRECONDITION, quoting the output's end, when it exits first or
// has printed none after `timeout`.
Result<int> wait_for_port(ChildProcess& process, const std::string& output, std::string_view mark,
                          Duration timeout);

}  // namespace holdfast::panel::drill
