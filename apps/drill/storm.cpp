#include "storm.hpp"

#include <sqlite3.h>

#include <thread>

#include "holdfast/core/classify.hpp"

namespace holdfast::panel {

LockStorm::LockStorm(std::string path, StormKind kind, std::function<void()> release)
    : path_(std::move(path)), kind_(kind), release_(std::move(release)) {}

LockStorm::~LockStorm() {
  end();
}

Status LockStorm::begin(Duration patience) {
  if (db_ != nullptr) return Status();
  const TimePoint give_up = Clock::system().now() + patience;
  int last_rc = SQLITE_OK;
  std::string last_message;
  while (Clock::system().now() < give_up) {
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
    if (rc == SQLITE_OK) {
      sqlite3_extended_result_codes(db, 1);
      if (kind_ == StormKind::kWrite) {
        sqlite3_busy_timeout(db, 100);
        rc = sqlite3_exec(db,
                          "BEGIN IMMEDIATE; CREATE TABLE IF NOT EXISTS drill_batch(id INTEGER "
                          "PRIMARY KEY, note TEXT); INSERT INTO drill_batch(note) VALUES "
                          "('a batch job holding the write lock');",
                          nullptr, nullptr, nullptr);
      } else {
        if (release_) release_();
        sqlite3_busy_timeout(db, 0);
        rc = sqlite3_exec(db,
                          "PRAGMA locking_mode=EXCLUSIVE; BEGIN IMMEDIATE; CREATE TABLE IF NOT "
                          "EXISTS drill_batch(id INTEGER PRIMARY KEY, note TEXT); INSERT INTO "
                          "drill_batch(note) VALUES ('exclusive locking mode'); COMMIT; "
                          "SELECT count(*) FROM drill_batch;",
                          nullptr, nullptr, nullptr);
      }
      if (rc == SQLITE_OK) {
        db_ = db;
        return Status();
      }
      last_rc = sqlite3_extended_errcode(db);
      last_message = sqlite3_errmsg(db);
    }
    sqlite3_close_v2(db);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return sqlite_status(last_rc == SQLITE_OK ? SQLITE_BUSY : last_rc,
                       "could not start the lock storm on " + path_ + ": " + last_message);
}

void LockStorm::end() noexcept {
  if (db_ == nullptr) return;
  if (kind_ == StormKind::kWrite) sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close_v2(db_);
  db_ = nullptr;
}

}  // namespace holdfast::panel
