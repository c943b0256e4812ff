// ResilientDatabase::one_attempt(): the view an asynchronous retry loop
// (holdfast::asio::async_run) runs its attempts on. One attempt, no Shield, the Fault of
// each error kept so that the caller's loop can decide; against a real lock (FAULTS.md).
#include <gtest/gtest.h>

#include <string>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/sqlite.hpp"
#include "sqlite_faults.hpp"

namespace holdfast::sqlite {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::LockHolder;
using testing::LockKind;
using testing::RawConnection;
using testing::TempDir;

TEST(OneAttempt, ALockedReadFailsOnceAsRetryableWithoutTheShieldAndTheNextAttemptSucceeds) {
  TempDir dir;
  const std::string path = dir.file("club.db");
  {
    Result<RawConnection> raw = RawConnection::open(path);
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    ASSERT_TRUE(raw->exec("PRAGMA journal_mode=DELETE; CREATE TABLE kv(v INTEGER NOT NULL);"
                          "INSERT INTO kv(v) VALUES (10);")
                    .ok());
  }
  Shield shield("one-attempt");
  Options options;
  options.path = path;
  options.journal_mode = JournalMode::kDelete;
  options.busy_timeout = milliseconds(100);
  Result<ResilientDatabase> opened = ResilientDatabase::open(options, shield);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ResilientDatabase once = opened->one_attempt();
  EXPECT_EQ(&once.database(), &opened->database()) << "the same connections";
  EXPECT_EQ(once.shield(), nullptr);
  EXPECT_EQ(once.policy().max_attempts(), 1);

  Result<LockHolder> lock = LockHolder::acquire(
      {.path = path, .kind = LockKind::kBeginExclusive, .hold = milliseconds(600)});
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  RequestScope request(seconds(4));
  Result<std::optional<std::int64_t>> locked = once.query_one<std::int64_t>("SELECT v FROM kv");
  ASSERT_FALSE(locked.ok()) << "one attempt of 100 ms cannot outlast a 600 ms lock";
  EXPECT_EQ(locked.status().sqlite_code() & 0xff, 5);
  EXPECT_TRUE(locked.status().fault().transient()) << "the caller's loop may retry it";
  EXPECT_EQ(locked.status().stop_reason(), StopReason::kNone)
      << "no loop gave up on it: a StopReason would be final for the caller's (ADR 0001)";
  EXPECT_EQ(shield.metrics().snapshot().attempts, 0u) << "the caller's loop counts attempts";
  lock->wait_released();
  Result<std::optional<std::int64_t>> freed = once.query_one<std::int64_t>("SELECT v FROM kv");
  ASSERT_TRUE(freed.ok()) << freed.status().to_string();
  EXPECT_EQ(**freed, 10);
}

}  // namespace
}  // namespace holdfast::sqlite
