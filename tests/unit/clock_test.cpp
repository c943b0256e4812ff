#include "holdfast/core/clock.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ManualClock, SleepAdvancesVirtualTimeAtOnce) {
  ManualClock clock;
  const TimePoint start = clock.now();
  clock.sleep_for(seconds(3));
  EXPECT_EQ(clock.now() - start, seconds(3));
  EXPECT_EQ(clock.total_slept(), seconds(3));
  clock.advance(milliseconds(5));
  EXPECT_EQ(clock.now() - start, seconds(3) + milliseconds(5));
  EXPECT_FALSE(clock.sleep_until(start));  // the past: returns at once
}

TEST(ManualClock, SeveralSleepingThreadsAreWokenInDeadlineOrderAtTheirDeadlines) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  const TimePoint start = clock.now();
  std::mutex m;
  std::vector<std::pair<int, Duration>> woke;
  std::vector<std::thread> threads;
  for (int ms : {30, 10, 20, 10}) {
    threads.emplace_back([&, ms] {
      clock.sleep_for(milliseconds(ms));
      std::lock_guard<std::mutex> lock(m);
      woke.emplace_back(ms, clock.now() - start);
    });
    clock.wait_for_sleepers(threads.size());
  }
  const auto wait_for_woken = [&](std::size_t n) {
    for (;;) {
      std::lock_guard<std::mutex> lock(m);
      if (woke.size() >= n) return;
    }
  };
  EXPECT_TRUE(clock.advance_to_next_sleeper());  // releases both 10 ms sleepers only
  wait_for_woken(2);
  EXPECT_EQ(clock.sleepers(), 2u);
  EXPECT_TRUE(clock.advance_to_next_sleeper());
  wait_for_woken(3);
  EXPECT_TRUE(clock.advance_to_next_sleeper());
  wait_for_woken(4);
  for (auto& t : threads)
    t.join();
  const std::vector<std::pair<int, Duration>> expected = {{10, milliseconds(10)},
                                                          {10, milliseconds(10)},
                                                          {20, milliseconds(20)},
                                                          {30, milliseconds(30)}};
  EXPECT_EQ(woke, expected);
  EXPECT_EQ(clock.now() - start, milliseconds(30));
}

TEST(ManualClock, AdvanceToNextSleeperJumpsToItsDeadline) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  const TimePoint start = clock.now();
  std::thread t([&] { clock.sleep_for(seconds(7)); });
  clock.wait_for_sleepers(1);
  EXPECT_TRUE(clock.advance_to_next_sleeper());
  t.join();
  EXPECT_EQ(clock.now() - start, seconds(7));
  EXPECT_FALSE(clock.advance_to_next_sleeper());
}

TEST(ManualClock, ASignalWakesASleeperBeforeItsDeadline) {
  ManualClock clock(ManualClock::Mode::kBlocking);
  Signal signal;
  bool woken_early = false;
  std::thread t([&] {
    const std::uint64_t seen = signal.generation();
    woken_early = clock.sleep_until(clock.now() + seconds(30), &signal, seen);
  });
  clock.wait_for_sleepers(1);
  const TimePoint before = clock.now();
  signal.notify_all();
  t.join();
  EXPECT_TRUE(woken_early);
  EXPECT_EQ(clock.now(), before);  // virtual time did not move
}

TEST(SystemClock, IsMonotonicAndASignalAlreadyGivenReturnsAtOnce) {
  Clock& clock = Clock::system();
  const TimePoint a = clock.now();
  const TimePoint b = clock.now();
  EXPECT_LE(a, b);
  Signal signal;
  const std::uint64_t seen = signal.generation();
  signal.notify_all();
  EXPECT_TRUE(clock.sleep_until(clock.now() + seconds(60), &signal, seen));
}

}  // namespace
}  // namespace holdfast
