// Real SQLite lock storms for the drill, caused the way FAULTS.md says, on a live file.
//
//   write storm: a batch job holds the write lock (BEGIN IMMEDIATE, an INSERT, then it waits).
//                Writes, session refreshes and log INSERTs wait; WAL readers don't.
//   read storm:  a process takes the file in exclusive locking mode (PRAGMA
//                locking_mode=EXCLUSIVE and a write), which blocks readers too. It can only
//                get that lock while no other connection has the file open, so the storm
//                asks the application to close its idle connections (`release`) until it
//                has the lock — as a maintenance tool run against a live database does
//                when the app recycles its pool; from then on every (re)opening reader
//                meets SQLITE_BUSY until the storm ends.
#pragma once

#include <functional>
#include <string>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/status.hpp"

struct sqlite3;

namespace holdfast::panel {

enum class StormKind { kWrite, kRead };

class LockStorm {
 public:
  // `release` closes the application's idle connections (read storms only).
  LockStorm(std::string path, StormKind kind, std::function<void()> release = {});
  ~LockStorm();
  LockStorm(const LockStorm&) = delete;
  LockStorm& operator=(const LockStorm&) = delete;

  // Takes the lock, trying for at most `patience`. A Status when it could not.
  Status begin(Duration patience = std::chrono::seconds(3));
  // Lets go of the lock (closes the holder's connection). Idempotent.
  void end() noexcept;
  [[nodiscard]] bool held() const noexcept { return db_ != nullptr; }

 private:
  std::string path_;
  StormKind kind_;
  std::function<void()> release_;
  sqlite3* db_ = nullptr;
};

}  // namespace holdfast::panel
