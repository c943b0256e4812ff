#include "sqlite_faults.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "holdfast/core/classify.hpp"

extern char** environ;

namespace holdfast::testing {
namespace {

using std::chrono::milliseconds;

// Far enough to mean "until released", near enough not to overflow a clock's arithmetic.
constexpr Duration kForever = std::chrono::hours(24 * 365);

long long to_ms(Duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

Status sqlite_error(sqlite3* db, int rc, std::string_view what) {
  std::string m(what);
  m += ": ";
  m += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return sqlite_status(db != nullptr ? sqlite3_extended_errcode(db) : rc, m);
}

Status exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status();
  std::string m = std::string(sql) + ": " + (err != nullptr ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  return sqlite_status(sqlite3_extended_errcode(db), m);
}

std::string journal_mode(sqlite3* db) {
  sqlite3_stmt* st = nullptr;
  std::string mode;
  if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* t = sqlite3_column_text(st, 0);
    if (t != nullptr) mode = reinterpret_cast<const char*>(t);
  }
  sqlite3_finalize(st);
  return mode;
}

// Takes the lock of `kind` on `db` (a fresh connection of the holder's own).
Status take_lock(sqlite3* db, LockKind kind) {
  switch (kind) {
    case LockKind::kExclusiveLockingMode: {
      if (Status s = exec(db, "PRAGMA locking_mode=EXCLUSIVE"); !s.ok()) return s;
      // The first read takes the lock and, in exclusive locking mode, keeps it.
      if (Status s = exec(db, "SELECT count(*) FROM sqlite_schema"); !s.ok()) return s;
      // In rollback-journal mode a read keeps only a shared lock: an (empty) exclusive
      // transaction makes it exclusive, and exclusive locking mode keeps it so.
      if (journal_mode(db) != "wal") return exec(db, "BEGIN EXCLUSIVE; COMMIT");
      return Status();
    }
    case LockKind::kBeginExclusive:
      return exec(db, "BEGIN EXCLUSIVE");
    case LockKind::kBeginImmediate:
      return exec(db, "BEGIN IMMEDIATE");
    case LockKind::kReadTransaction:
      return exec(db, "BEGIN; SELECT count(*) FROM sqlite_schema");
  }
  return Status(Code::kInvalidArgument, "unknown lock kind");
}

}  // namespace

std::string_view to_string(LockKind kind) noexcept {
  switch (kind) {
    case LockKind::kExclusiveLockingMode:
      return "exclusive_locking_mode";
    case LockKind::kBeginExclusive:
      return "begin_exclusive";
    case LockKind::kBeginImmediate:
      return "begin_immediate";
    case LockKind::kReadTransaction:
      return "read_transaction";
  }
  return "?";
}

bool parse_lock_kind(std::string_view text, LockKind& out) noexcept {
  for (LockKind k : {LockKind::kExclusiveLockingMode, LockKind::kBeginExclusive,
                     LockKind::kBeginImmediate, LockKind::kReadTransaction}) {
    if (text == to_string(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

// --- LockHolder ----------------------------------------------------------------------

struct LockHolder::Impl {
  LockSpec spec;
  TimePoint acquired_at{};

  // Holder::kThisProcess: a thread with the holding connection.
  std::thread thread;
  std::mutex mutex;
  std::condition_variable changed;
  bool held = false;
  bool finished = false;
  Status failure;
  Signal release_now;

  // Holder::kOtherProcess: the holdfast_lock_holder child and its pipes.
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;

  ~Impl() { release(); }

  void hold_here() {
    sqlite3* db = nullptr;
    Status s;
    int rc =
        sqlite3_open_v2(spec.path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, nullptr);
    if (rc != SQLITE_OK) {
      s = sqlite_error(db, rc, "lock holder cannot open '" + spec.path + "'");
    } else {
      sqlite3_extended_result_codes(db, 1);
      sqlite3_busy_timeout(db, static_cast<int>(to_ms(spec.acquire_timeout)));
      s = take_lock(db, spec.kind);
      if (!s.ok()) {
        s.annotate("lock holder could not take the " + std::string(to_string(spec.kind)) +
                   " lock on '" + spec.path + "'" +
                   (spec.kind == LockKind::kExclusiveLockingMode
                        ? " (in WAL mode no other connection may have the file open)"
                        : ""));
      }
    }
    Clock& clock = Clock::system();
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (s.ok()) {
        held = true;
        acquired_at = clock.now();
      } else {
        failure = s;
        finished = true;
      }
    }
    changed.notify_all();
    if (s.ok()) {
      const TimePoint until =
          spec.hold >= kForever ? acquired_at + kForever : acquired_at + spec.hold;
      const std::uint64_t seen = 0;  // release_now starts at generation 0
      clock.sleep_until(until, &release_now, seen);
      if (sqlite3_get_autocommit(db) == 0) (void)exec(db, "ROLLBACK");
    }
    sqlite3_close_v2(db);  // in exclusive locking mode, closing is what lets go
    {
      std::lock_guard<std::mutex> lock(mutex);
      held = false;
      finished = true;
    }
    changed.notify_all();
  }

  Status start_here() {
    thread = std::thread([this] { hold_here(); });
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return held || finished; });
    if (!held) {
      lock.unlock();
      thread.join();
      return failure.ok() ? Status(Code::kInternal, "lock holder ended early") : failure;
    }
    return Status();
  }

  Status start_process() {
    const char* exe = std::getenv("HOLDFAST_LOCK_HOLDER");
    const std::string program = exe != nullptr ? exe : HOLDFAST_LOCK_HOLDER_EXE;
    const long long hold_ms = spec.hold >= kForever ? -1 : to_ms(spec.hold);
    std::vector<std::string> args = {program,
                                     "--db",
                                     spec.path,
                                     "--kind",
                                     std::string(to_string(spec.kind)),
                                     "--hold-ms",
                                     std::to_string(hold_ms),
                                     "--acquire-timeout-ms",
                                     std::to_string(to_ms(spec.acquire_timeout))};
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);

    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return Status(Code::kInternal, "pipe failed");
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      return Status(Code::kInternal, "pipe failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_child = in[1];
    from_child = out[0];
    if (rc != 0) {
      pid = -1;
      return Status(Code::kFailedPrecondition, "cannot start " + program);
    }
    // The child answers "held" or "error <message>" on one line.
    std::string line;
    const TimePoint give_up =
        Clock::system().now() + spec.acquire_timeout + std::chrono::seconds(10);
    while (line.find('\n') == std::string::npos) {
      const Duration left = give_up - Clock::system().now();
      if (left <= Duration::zero()) break;
      pollfd p{from_child, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(to_ms(left))) <= 0) break;
      char buf[256];
      const ssize_t n = read(from_child, buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    if (line.rfind("held", 0) == 0) {
      acquired_at = Clock::system().now();
      held = true;
      return Status();
    }
    release();
    if (line.rfind("error ", 0) == 0) {
      const std::size_t end = line.find('\n');
      return Status(Code::kUnavailable, line.substr(6, end - 6));
    }
    return Status(Code::kInternal, "holdfast_lock_holder gave no answer: '" + line + "'");
  }

  void release() {
    if (thread.joinable()) {
      release_now.notify_all();
      thread.join();
    }
    if (pid > 0) {
      if (to_child >= 0) close(to_child);  // end of input: the child lets go and exits
      to_child = -1;
      int status = 0;
      waitpid(pid, &status, 0);
      pid = -1;
    }
    if (from_child >= 0) close(from_child);
    from_child = -1;
    held = false;
  }

  void wait_released() {
    if (thread.joinable()) {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return finished; });
      lock.unlock();
      thread.join();
    }
    if (pid > 0) {
      int status = 0;
      waitpid(pid, &status, 0);
      pid = -1;
      release();
    }
    held = false;
  }

  void crash() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
      pid = -1;
    }
    release();
  }

  bool is_held() {
    if (thread.joinable()) {
      std::lock_guard<std::mutex> lock(mutex);
      return held;
    }
    if (pid > 0) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        held = false;
      }
    }
    return pid > 0 && held;
  }
};

Result<LockHolder> LockHolder::acquire(LockSpec spec) {
  auto impl = std::make_unique<Impl>();
  impl->spec = std::move(spec);
  const Status s =
      impl->spec.where == Holder::kThisProcess ? impl->start_here() : impl->start_process();
  if (!s.ok()) return s;
  return LockHolder(std::move(impl));
}

LockHolder::LockHolder(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
LockHolder::LockHolder(LockHolder&&) noexcept = default;
LockHolder& LockHolder::operator=(LockHolder&&) noexcept = default;
LockHolder::~LockHolder() = default;

void LockHolder::release() {
  if (impl_) impl_->release();
}
void LockHolder::wait_released() {
  if (impl_) impl_->wait_released();
}
void LockHolder::crash() {
  if (impl_) impl_->crash();
}
bool LockHolder::held() const {
  return impl_ && impl_->is_held();
}
TimePoint LockHolder::acquired_at() const {
  return impl_ ? impl_->acquired_at : TimePoint{};
}
const LockSpec& LockHolder::spec() const {
  return impl_->spec;
}

// --- LockBursts ----------------------------------------------------------------------

LockBursts::LockBursts(LockSpec spec, Duration gap)
    : spec_(std::move(spec)), gap_(gap), thread_([this] { loop(); }) {}

LockBursts::~LockBursts() {
  stop();
}

void LockBursts::stop() {
  stop_.store(true);
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LockBursts::loop() {
  Clock& clock = Clock::system();
  while (!stop_.load()) {
    const std::uint64_t seen = wake_.generation();
    Result<LockHolder> lock = LockHolder::acquire(spec_);
    if (lock.ok()) {
      held_.store(true);
      // Hold for spec.hold, but let go at once when stopped.
      clock.sleep_until(lock->acquired_at() + spec_.hold, &wake_, seen);
      lock->release();
      held_.store(false);
      bursts_.fetch_add(1);
    } else {
      failed_.fetch_add(1);
    }
    if (stop_.load()) break;
    clock.sleep_until(clock.now() + gap_, &wake_, seen);
  }
}

bool LockBursts::wait_until_held(Duration timeout) {
  Clock& clock = Clock::system();
  const TimePoint until = clock.now() + timeout;
  while (!held_.load()) {
    if (clock.now() >= until) return false;
    clock.sleep_for(milliseconds(1));
  }
  return true;
}

// --- BackToBackWriter ----------------------------------------------------------------

BackToBackWriter::BackToBackWriter(std::function<Status()> write_once)
    : write_once_(std::move(write_once)), thread_([this] {
        while (!stop_.load(std::memory_order_relaxed)) {
          if (write_once_().ok()) {
            successes_.fetch_add(1);
          } else {
            failures_.fetch_add(1);
          }
        }
      }) {}

std::unique_ptr<BackToBackWriter> BackToBackWriter::raw(std::string path, std::string sql,
                                                        Duration busy_timeout) {
  struct Conn {
    sqlite3* db = nullptr;
    ~Conn() { sqlite3_close_v2(db); }
  };
  auto conn = std::make_shared<Conn>();
  const std::string script = "BEGIN IMMEDIATE; " + sql + "; COMMIT";
  return std::make_unique<BackToBackWriter>([conn, path, script, busy_timeout]() -> Status {
    if (conn->db == nullptr) {
      const int rc = sqlite3_open_v2(path.c_str(), &conn->db, SQLITE_OPEN_READWRITE, nullptr);
      if (rc != SQLITE_OK) {
        Status s = sqlite_error(conn->db, rc, "back-to-back writer cannot open '" + path + "'");
        sqlite3_close_v2(conn->db);
        conn->db = nullptr;
        return s;
      }
      sqlite3_extended_result_codes(conn->db, 1);
      sqlite3_busy_timeout(conn->db, static_cast<int>(to_ms(busy_timeout)));
    }
    Status s = exec(conn->db, script.c_str());
    if (!s.ok() && sqlite3_get_autocommit(conn->db) == 0) (void)exec(conn->db, "ROLLBACK");
    return s;
  });
}

BackToBackWriter::~BackToBackWriter() {
  stop();
}

void BackToBackWriter::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

bool BackToBackWriter::wait_for_successes(std::uint64_t n, Duration timeout) {
  Clock& clock = Clock::system();
  const TimePoint until = clock.now() + timeout;
  while (successes_.load() < n) {
    if (clock.now() >= until) return false;
    clock.sleep_for(milliseconds(1));
  }
  return true;
}

// --- RawConnection -------------------------------------------------------------------

Result<RawConnection> RawConnection::open(const std::string& path, Duration busy_timeout) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) {
    Status s = sqlite_error(db, rc, "cannot open '" + path + "'");
    sqlite3_close_v2(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, static_cast<int>(to_ms(busy_timeout)));
  return RawConnection(db);
}

RawConnection::RawConnection(RawConnection&& other) noexcept : db_(other.db_) {
  other.db_ = nullptr;
}

RawConnection& RawConnection::operator=(RawConnection&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = other.db_;
    other.db_ = nullptr;
  }
  return *this;
}

RawConnection::~RawConnection() {
  sqlite3_close_v2(db_);
}

Status RawConnection::exec(std::string_view sql) {
  return testing::exec(db_, std::string(sql).c_str());
}

Result<std::int64_t> RawConnection::query_int(std::string_view sql) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &st, nullptr);
  if (rc != SQLITE_OK) return sqlite_error(db_, rc, std::string(sql));
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    Status s = rc == SQLITE_DONE ? Status(Code::kNotFound, std::string(sql) + ": no row")
                                 : sqlite_error(db_, rc, std::string(sql));
    sqlite3_finalize(st);
    return s;
  }
  const std::int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

// --- TempDir -------------------------------------------------------------------------

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/holdfast-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("TempDir: mkdtemp failed for " + pattern);
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::file(std::string_view name) const {
  return path_ + "/" + std::string(name);
}

}  // namespace holdfast::testing
