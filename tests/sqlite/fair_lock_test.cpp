// The writer's queue: first come, first served, waits end at their deadline, and nobody
// barges past a waiter. On virtual time (ManualClock), so nothing sleeps for real.
#include "fair_lock.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

namespace holdfast::sqlite::detail {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;

void wait_until_queued(const FairLock& lock, std::size_t n) {
  while (lock.queued() < n)
    std::this_thread::yield();
}

TEST(FairLock, UncontendedLockAndUnlockNeedNoWait) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  FairLock lock(clock);
  EXPECT_TRUE(lock.lock_until(clock.now()));
  EXPECT_FALSE(lock.try_lock());
  lock.unlock();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
  EXPECT_EQ(clock.total_slept(), Duration::zero());
}

TEST(FairLock, WaitersAreServedInTheOrderTheyArrived) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  FairLock lock(clock);
  ASSERT_TRUE(lock.try_lock());
  std::mutex m;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      ASSERT_TRUE(lock.lock_until(clock.now() + hours(1)));
      {
        std::lock_guard<std::mutex> g(m);
        order.push_back(i);
      }
      lock.unlock();
    });
    wait_until_queued(lock, static_cast<std::size_t>(i) + 1);
  }
  lock.unlock();
  for (auto& t : waiters)
    t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(FairLock, UnlockHandsTheLockToTheOldestWaiterSoANewcomerCannotBargeIn) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  FairLock lock(clock);
  ASSERT_TRUE(lock.try_lock());
  std::thread waiter([&] {
    ASSERT_TRUE(lock.lock_until(clock.now() + hours(1)));
    lock.unlock();
  });
  wait_until_queued(lock, 1);
  lock.unlock();
  // The waiter owns it now, whether or not it has woken up yet.
  EXPECT_FALSE(lock.try_lock());
  waiter.join();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(FairLock, AWaitEndsAtItsDeadlineAndLeavesTheQueue) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  FairLock lock(clock);
  ASSERT_TRUE(lock.try_lock());
  bool got = true;
  const TimePoint deadline = clock.now() + milliseconds(100);
  std::thread waiter([&] { got = lock.lock_until(deadline); });
  clock.wait_for_sleepers(1);
  clock.advance(milliseconds(100));
  waiter.join();
  EXPECT_FALSE(got);
  EXPECT_EQ(lock.queued(), 0u);
  lock.unlock();
  // Not handed to the waiter that gave up: it is free.
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(FairLock, AWaiterThatGaveUpIsSkippedAndTheNextInLineIsServed) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  FairLock lock(clock);
  ASSERT_TRUE(lock.try_lock());
  bool first = true;
  bool second = false;
  std::thread impatient([&] { first = lock.lock_until(clock.now() + milliseconds(50)); });
  wait_until_queued(lock, 1);
  std::thread patient([&] {
    second = lock.lock_until(clock.now() + hours(1));
    if (second) lock.unlock();
  });
  wait_until_queued(lock, 2);
  clock.wait_for_sleepers(2);
  clock.advance(milliseconds(50));
  impatient.join();
  EXPECT_FALSE(first);
  lock.unlock();
  patient.join();
  EXPECT_TRUE(second);
}

}  // namespace
}  // namespace holdfast::sqlite::detail
