// The SQLite fault harness: real locks that cause real SQLITE_BUSY (see FAULTS.md), for
// the driver's integration tests, the logger's tests and the drill.
//
//   holdfast::testing::TempDir dir;
//   const std::string path = dir.file("club.db");
//   auto lock = LockHolder::acquire({.path = path, .kind = LockKind::kBeginImmediate,
//                                    .hold = std::chrono::seconds(2)});
//   ASSERT_TRUE(lock.ok()) << lock.status().to_string();
//   // ... writers meet SQLITE_BUSY for 2 s; WAL readers go on ...
//   lock->release();                          // or let the hold time run out
//
// Kinds of lock (the holder is a connection of its own, in this process or in another):
//   kExclusiveLockingMode  PRAGMA locking_mode=EXCLUSIVE, a read, and in rollback-journal
//                          mode an empty exclusive transaction: blocks readers and writers.
//                          In WAL mode it can only be taken while no other connection has
//                          the file open: open the victims after acquire() returns (or call
//                          Database::close_idle_connections() first).
//   kBeginExclusive        BEGIN EXCLUSIVE: in DELETE mode blocks readers and writers; in
//                          WAL mode only writers.
//   kBeginImmediate        BEGIN IMMEDIATE: blocks writers; WAL readers are not blocked.
//   kReadTransaction       BEGIN and a read: in DELETE mode a writer's COMMIT meets
//                          SQLITE_BUSY until it ends.
//
// Also here: LockBursts (a lock held again and again), BackToBackWriter (a thread that
// writes as fast as it can), RawConnection (a plain sqlite3 connection for setting up and
// checking, independent of the code under test) and TempDir.
//
// Time goes through holdfast::Clock::system(). Nothing here throws on a database error:
// failures are Status values.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

struct sqlite3;

namespace holdfast::testing {

enum class LockKind { kExclusiveLockingMode, kBeginExclusive, kBeginImmediate, kReadTransaction };
enum class Holder { kThisProcess, kOtherProcess };

[[nodiscard]] std::string_view to_string(LockKind kind) noexcept;
// "exclusive_locking_mode", "begin_exclusive", "begin_immediate", "read_transaction".
[[nodiscard]] bool parse_lock_kind(std::string_view text, LockKind& out) noexcept;

struct LockSpec {
  std::string path;
  LockKind kind = LockKind::kBeginImmediate;
  // How long to hold the lock once taken; Duration::max() holds it until release().
  Duration hold = Duration::max();
  Holder where = Holder::kThisProcess;
  // How long the holder keeps trying to take the lock (its own busy timeout).
  Duration acquire_timeout = std::chrono::seconds(5);
};

// A lock held by another connection. Move-only; destroying it releases the lock.
class LockHolder {
 public:
  // Takes the lock and returns once it is held, or a Status saying why it could not be
  // taken within spec.acquire_timeout.
  static Result<LockHolder> acquire(LockSpec spec);

  LockHolder(LockHolder&&) noexcept;
  LockHolder& operator=(LockHolder&&) noexcept;
  ~LockHolder();

  // Lets go now (if still held) and returns once the lock is released. Idempotent.
  void release();
  // Blocks until the hold time has run out and the lock is released.
  void wait_released();
  // Holder::kOtherProcess only: kills the holder with SIGKILL, without any clean-up (a hot
  // journal or an un-checkpointed WAL stays behind). Otherwise the same as release().
  void crash();

  [[nodiscard]] bool held() const;
  [[nodiscard]] TimePoint acquired_at() const;
  [[nodiscard]] const LockSpec& spec() const;

  struct Impl;

 private:
  explicit LockHolder(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

// Takes the lock of `spec` for spec.hold, lets go for `gap`, and again, on a thread of its
// own, until stop() or destruction. Bursts that could not take the lock are counted apart.
class LockBursts {
 public:
  LockBursts(LockSpec spec, Duration gap);
  ~LockBursts();
  LockBursts(const LockBursts&) = delete;
  LockBursts& operator=(const LockBursts&) = delete;

  void stop();
  // Blocks until a burst holds the lock, or `timeout` passed; true when one does.
  bool wait_until_held(Duration timeout);
  [[nodiscard]] int bursts() const noexcept { return bursts_.load(); }
  [[nodiscard]] int failed() const noexcept { return failed_.load(); }

 private:
  void loop();
  LockSpec spec_;
  Duration gap_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> held_{false};
  std::atomic<int> bursts_{0};
  std::atomic<int> failed_{0};
  Signal wake_;
  std::thread thread_;
};

// Calls write_once() back to back on a thread of its own until stop() or destruction.
class BackToBackWriter {
 public:
  explicit BackToBackWriter(std::function<Status()> write_once);
  // A connection of its own on `path` committing "BEGIN IMMEDIATE; <sql>; COMMIT" in a
  // loop, waiting for locks with SQLite's own busy handler (busy_timeout): the writer that
  // starves the others in FAULTS.md.
  static std::unique_ptr<BackToBackWriter> raw(std::string path, std::string sql,
                                               Duration busy_timeout = std::chrono::seconds(1));
  ~BackToBackWriter();
  BackToBackWriter(const BackToBackWriter&) = delete;
  BackToBackWriter& operator=(const BackToBackWriter&) = delete;

  void stop();
  // Blocks until `n` writes succeeded or `timeout` passed; true when they did.
  bool wait_for_successes(std::uint64_t n, Duration timeout);
  [[nodiscard]] std::uint64_t successes() const noexcept { return successes_.load(); }
  [[nodiscard]] std::uint64_t failures() const noexcept { return failures_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> successes_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::function<Status()> write_once_;
  std::thread thread_;
};

// A plain sqlite3 connection (not holdfast's): set up files, write from "another
// connection", check results. Not thread-safe.
class RawConnection {
 public:
  static Result<RawConnection> open(const std::string& path,
                                    Duration busy_timeout = std::chrono::seconds(5));
  RawConnection(RawConnection&& other) noexcept;
  RawConnection& operator=(RawConnection&& other) noexcept;
  ~RawConnection();

  // Runs one or more statements; rows are ignored.
  Status exec(std::string_view sql);
  // The first column of the first row.
  Result<std::int64_t> query_int(std::string_view sql);
  [[nodiscard]] sqlite3* handle() const noexcept { return db_; }

 private:
  explicit RawConnection(sqlite3* db) noexcept : db_(db) {}
  sqlite3* db_ = nullptr;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::string file(std::string_view name) const;

 private:
  std::string path_;
};

}  // namespace holdfast::testing
