// holdfast_lock_holder: holds a SQLite lock from another process (the fault harness's
// Holder::kOtherProcess).
//
//   holdfast_lock_holder --db FILE --kind begin_immediate [--hold-ms N] [--acquire-timeout-ms M]
//
// Prints "held" once the lock is taken (or "error <message>" and exits 1), then holds it
// until N ms have passed (N < 0: forever) or its standard input ends, whichever comes
// first; then lets go, prints "released" and exits 0. Killed with SIGKILL, it leaves the
// file as a crashed process would.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sqlite_faults.hpp"

namespace {

int usage() {
  std::fputs(
      "usage: holdfast_lock_holder --db FILE --kind "
      "exclusive_locking_mode|begin_exclusive|begin_immediate|read_transaction "
      "[--hold-ms N] [--acquire-timeout-ms M]\n",
      stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using holdfast::testing::LockHolder;
  using holdfast::testing::LockSpec;
  LockSpec spec;
  long long hold_ms = -1;
  bool have_kind = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--db") {
      spec.path = value;
    } else if (flag == "--kind") {
      have_kind = holdfast::testing::parse_lock_kind(value, spec.kind);
      if (!have_kind) return usage();
    } else if (flag == "--hold-ms") {
      hold_ms = std::atoll(value);
    } else if (flag == "--acquire-timeout-ms") {
      spec.acquire_timeout = std::chrono::milliseconds(std::atoll(value));
    } else {
      return usage();
    }
  }
  if (spec.path.empty() || !have_kind || argc % 2 == 0) return usage();
  // This process holds the lock itself; its parent decides when it ends via stdin.
  spec.where = holdfast::testing::Holder::kThisProcess;
  spec.hold = holdfast::Duration::max();

  holdfast::Result<LockHolder> lock = LockHolder::acquire(spec);
  if (!lock.ok()) {
    std::printf("error %s\n", lock.status().to_string().c_str());
    std::fflush(stdout);
    return 1;
  }
  std::printf("held\n");
  std::fflush(stdout);

  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int timeout = -1;
    if (hold_ms >= 0) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
      if (spent >= hold_ms) break;
      timeout = static_cast<int>(hold_ms - spent);
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = poll(&p, 1, timeout);
    if (n == 0) continue;  // re-check the hold time
    if (n < 0) break;
    char buf[64];
    if (read(STDIN_FILENO, buf, sizeof buf) <= 0) break;  // end of input: let go
  }
  lock->release();
  std::printf("released\n");
  std::fflush(stdout);
  return 0;
}
