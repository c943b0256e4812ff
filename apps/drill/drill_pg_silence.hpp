// The PostgreSQL drill's tools for silent servers (FAULTS.md, "Silence and failover"):
// freezing a server's processes with SIGSTOP, and asking a server a question with a
// deadline, which is how the drill proves a silence fault was caused and undone.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "drill_pg_process.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"

namespace holdfast::panel::drill {

// A frozen PostgreSQL server: its postmaster and every child of it (the backends, the
// walsender or walreceiver, the background workers) stopped with SIGSTOP, as a paused VM
// would be. TCP connects still complete (the kernel's backlog), nothing answers.
// Owning it owns the freeze: thaw() or the destructor sends SIGCONT to all of them. In
// case this process dies without unwinding (SIGKILL, a crash), a guard process started
// with the freeze continues them all after `guard_after` on its own; thaw() stops it.
class FrozenServer {
 public:
  FrozenServer() = default;
  ~FrozenServer() { thaw(); }
  FrozenServer(const FrozenServer&) = delete;
  FrozenServer& operator=(const FrozenServer&) = delete;

  // Stops the postmaster of `data_dir` (its pid from postmaster.pid) first, so it forks no
  // new child, then every child `pgrep -P` would list, and waits (up to 2 s) until each is
  // seen stopped (state T in /proc). On failure everything stopped so far is continued.
  Status freeze(const std::string& data_dir, Duration guard_after);
  // SIGCONT to every process frozen, and to every child the postmaster has now.
  // Idempotent; never throws.
  void thaw() noexcept;
  // Fences the frozen server for good: SIGKILL to every process frozen and every child
  // the postmaster has now (a stopped process dies of SIGKILL without running again, so
  // it never answers another query), waits (up to 2 s) until they are gone, and stops
  // the guard. Afterwards there is nothing left to thaw. The processes killed.
  std::size_t fence() noexcept;
  [[nodiscard]] std::size_t processes() const noexcept { return stopped_.size(); }
  [[nodiscard]] pid_t postmaster() const noexcept { return postmaster_; }

 private:
  pid_t postmaster_ = -1;
  std::vector<pid_t> stopped_;
  ChildProcess guard_;
};

// SIGCONT to the postmaster of `data_dir` and its children, whoever stopped them: a
// safety net for cleanup paths. Never throws.
void continue_server(const std::string& data_dir) noexcept;

// Connects to `url` and sends `sql` as a simple query (so it also works on PgBouncer's
// admin console), all within `deadline`, never blocking past it. The time until the
// answer in milliseconds; DEADLINE_EXCEEDED when nothing answered in time (a silent
// server); another Status when the server answered with an error or refused.
Result<double> ask_within(const std::string& url, const std::string& sql, Duration deadline);

// Asks `url` `SELECT 1` (each try within 1 s) until it answers, at most `patience`: the
// milliseconds from the call to the answer, or the last try's Status.
Result<double> wait_for_answer(const std::string& url, Duration patience);

}  // namespace holdfast::panel::drill
