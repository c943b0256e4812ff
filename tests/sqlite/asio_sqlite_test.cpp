// holdfast::asio::async_run_sqlite against a real lock held by another process: the read
// waits for the lock in timer pauses, so the loop's one thread keeps serving other work, and
// the read is one attempt that succeeds once the lock is gone; a lock that outlasts the busy
// timeout ends the attempt with SQLITE_BUSY for the Shield to decide (FAULTS.md).
#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "holdfast/adapters/asio_sqlite.hpp"
#include "holdfast/sqlite.hpp"
#include "sqlite_faults.hpp"

namespace holdfast::sqlite {
namespace {

using std::chrono::milliseconds;
using testing::Holder;
using testing::LockHolder;
using testing::LockKind;
using testing::RawConnection;
using testing::TempDir;
using Value = Result<std::optional<std::int64_t>>;

class AsioSqlite : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("club.db");
    Result<RawConnection> raw = RawConnection::open(path_);
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    ASSERT_TRUE(raw->exec("PRAGMA journal_mode=DELETE; CREATE TABLE kv(v INTEGER NOT NULL);"
                          "INSERT INTO kv(v) VALUES (10);")
                    .ok());
  }
  Result<ResilientDatabase> open(Shield& shield, Duration busy_timeout) {
    Options options;
    options.path = path_;
    options.journal_mode = JournalMode::kDelete;
    options.busy_timeout = busy_timeout;
    return ResilientDatabase::open(options, shield);
  }

  TempDir dir_;
  std::string path_;
};

// Runs `read` on a one-thread loop beside a ticker every 5 ms; returns its result and the
// ticks the loop served while it waited.
template <class Read>
std::pair<Value, int> read_beside_a_ticker(Read read) {
  ::asio::io_context io;
  std::optional<Value> out;
  int ticks = 0;
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { out = co_await read(io); }, ::asio::detached);
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        ::asio::steady_timer t(io);
        while (!out.has_value()) {
          t.expires_after(milliseconds(5));
          co_await t.async_wait(::asio::use_awaitable);
          ++ticks;
        }
      },
      ::asio::detached);
  io.run();
  return {std::move(*out), ticks};
}

TEST_F(AsioSqlite, ALockWaitIsTimerWaitsAndTheLoopServesMeanwhile) {
  Shield shield("asio-sqlite");
  Result<ResilientDatabase> db = open(shield, std::chrono::seconds(5));
  ASSERT_TRUE(db.ok()) << db.status().to_string();
  ResilientDatabase once = db->one_attempt();
  Result<LockHolder> lock = LockHolder::acquire({.path = path_,
                                                 .kind = LockKind::kBeginExclusive,
                                                 .hold = milliseconds(400),
                                                 .where = Holder::kOtherProcess});
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  RequestContext request;
  holdfast::asio::SqliteRunOptions options;
  options.run.window = &request.window();
  auto call = [&] { return once.query_one<std::int64_t>("SELECT v FROM kv"); };
  auto [value, ticks] = read_beside_a_ticker([&](::asio::io_context& io) {
    return holdfast::asio::async_run_sqlite<Value>(
        io.get_executor(), shield, Operation::read("kv.v"), options, call, ::asio::use_awaitable);
  });
  ASSERT_TRUE(value.ok()) << value.status().to_string();
  EXPECT_EQ(**value, 10);
  // The 400 ms wait for the lock was timer pauses: the one thread ticked all along (a busy
  // handler sleeping in the thread would have held every tick back until the lock went).
  EXPECT_GT(ticks, 20);
  EXPECT_EQ(shield.metrics().snapshot().attempts, 1u) << "the lock wait is within one attempt";
}

TEST_F(AsioSqlite, ALockLongerThanTheBusyTimeoutEndsTheAttemptBusy) {
  Shield::Options so;
  so.reads = RetryPolicy::no_retry();
  Shield shield("asio-sqlite-busy", so);
  Result<ResilientDatabase> db = open(shield, milliseconds(150));
  ASSERT_TRUE(db.ok()) << db.status().to_string();
  ResilientDatabase once = db->one_attempt();
  Result<LockHolder> lock = LockHolder::acquire({.path = path_,
                                                 .kind = LockKind::kBeginExclusive,
                                                 .hold = milliseconds(2000),
                                                 .where = Holder::kOtherProcess});
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  holdfast::asio::SqliteRunOptions options;
  options.busy_timeout = milliseconds(150);
  auto call = [&] { return once.query_one<std::int64_t>("SELECT v FROM kv"); };
  auto [value, ticks] = read_beside_a_ticker([&](::asio::io_context& io) {
    return holdfast::asio::async_run_sqlite<Value>(
        io.get_executor(), shield, Operation::read("kv.v"), options, call, ::asio::use_awaitable);
  });
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().sqlite_code() & 0xff, 5) << value.status().to_string();
  EXPECT_GT(ticks, 5);
}

}  // namespace
}  // namespace holdfast::sqlite
