// The ring of confirmed writes and the rules that judge them against a new writer (ADR 0036),
// without a server. The check against real servers: lost_writes_test.cpp.
#include "confirmed_writes.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "holdfast/core/clock.hpp"

namespace holdfast::pg::detail {
namespace {

TimePoint at(int seconds) {
  return TimePoint(std::chrono::seconds(seconds));
}

TEST(PgConfirmedWrites, TheRingKeepsTheLastWritesInOrderWithTheirKeysAndPositions) {
  ConfirmedWrites ring(4);
  EXPECT_TRUE(ring.snapshot().empty());
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(ring.record(0x1000 + i, 2, 7, at(i), "key-" + std::to_string(i)));
  }
  const std::vector<ConfirmedWrite> kept = ring.snapshot();
  ASSERT_EQ(kept.size(), 4u);  // bounded: the two oldest are gone
  for (std::size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].ticket, i + 2);
    EXPECT_EQ(kept[i].kept, "key-" + std::to_string(i + 2));
    EXPECT_TRUE(kept[i].key_whole());
    EXPECT_EQ(kept[i].lsn, 0x1000u + i + 2);
    EXPECT_EQ(kept[i].timeline, 2u);
    EXPECT_EQ(kept[i].host, 7u);
    EXPECT_EQ(kept[i].at, at(static_cast<int>(i) + 2));
  }
  EXPECT_EQ(kept[0].position_for_log(), "2:0/1002");
  EXPECT_EQ(ring.next_ticket(), 6u);
  EXPECT_EQ(ring.dropped(), 0u);
}

TEST(PgConfirmedWrites, AWriteWithoutAKeyIsKeptByItsPositionOnly) {
  ConfirmedWrites ring(2);
  ASSERT_TRUE(ring.record(0x5000, 3, 0, at(1), ""));
  const auto kept = ring.snapshot();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_FALSE(kept[0].keyed());
  EXPECT_EQ(kept[0].hash, 0u);
}

TEST(PgConfirmedWrites, ALongKeyIsKeptByItsFirstBytesCutAtACharacterAndTheHashOfAllOfIt) {
  ConfirmedWrites ring(2);
  // 63 ASCII bytes, then a two-byte character across the 64-byte limit, then more.
  const std::string key = std::string(63, 'a') + "\xc3\xa9" + "tail";
  ASSERT_TRUE(ring.record(1, 1, 0, at(0), key));
  const auto kept = ring.snapshot();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].kept, std::string(63, 'a'));  // not half a character
  EXPECT_EQ(kept[0].key_size, key.size());
  EXPECT_FALSE(kept[0].key_whole());
  EXPECT_EQ(kept[0].hash, key_hash(key));
  EXPECT_NE(key_hash(key), key_hash(key + "x"));
  EXPECT_EQ(kept[0].key_for_log(), std::string(63, 'a') + "...(69 bytes)");
}

TEST(PgConfirmedWrites, ARingOfNothingRecordsNothing) {
  ConfirmedWrites ring(0);
  EXPECT_FALSE(ring.record(1, 1, 0, at(0), "k"));
  EXPECT_TRUE(ring.snapshot().empty());
}

TEST(PgConfirmedWrites, WritersOnManyThreadsAndAReaderNeverSeeATornSlot) {
  // Each write's position, timeline and key say the same number: a torn slot would not.
  ConfirmedWrites ring(64);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const std::uint64_t n = static_cast<std::uint64_t>(t) * 100000 + i;
        ring.record(n, static_cast<std::uint32_t>(n % 1000) + 1, n, at(0), std::to_string(n));
      }
    });
  }
  std::thread reader([&] {
    while (!stop.load()) {
      for (const ConfirmedWrite& w : ring.snapshot()) {
        ASSERT_EQ(w.kept, std::to_string(w.lsn));
        ASSERT_EQ(w.timeline, w.lsn % 1000 + 1);
        ASSERT_EQ(w.host, w.lsn);
        ASSERT_EQ(w.hash, 0u);  // kept whole: no hash needed
      }
    }
  });
  for (auto& w : writers)
    w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(ring.next_ticket(), 80000u);
  EXPECT_EQ(ring.snapshot().size() + ring.dropped() >= 64u, true);
}

ConfirmedWrite write_at(std::uint32_t timeline, std::uint64_t lsn, std::uintptr_t host = 0) {
  ConfirmedWrite w;
  w.timeline = timeline;
  w.lsn = lsn;
  w.host = host;
  return w;
}

TEST(PgConfirmedWritesPresence, OnTheWritersOwnTimelineAWriteIsThereUpToItsPosition) {
  WriterView v;
  v.timeline = 2;
  v.current_lsn = 0x3000;
  EXPECT_EQ(presence_by_position(write_at(2, 0x3000), v), Presence::kThere);
  EXPECT_EQ(presence_by_position(write_at(2, 0x2000), v), Presence::kThere);
  EXPECT_EQ(presence_by_position(write_at(2, 0x3001), v), Presence::kMissing);
}

TEST(PgConfirmedWritesPresence, AWriterOnAnOlderTimelineHoldsNothingOfANewerOne) {
  WriterView v;  // the thawed old leader of a split brain
  v.timeline = 2;
  v.current_lsn = 0x9000000;
  EXPECT_EQ(presence_by_position(write_at(3, 0x10), v), Presence::kMissing);
}

TEST(PgConfirmedWritesPresence, AnEarlierTimelinesWriteIsThereOnlyUpToWhereTheHistoryLeftIt) {
  WriterView v;
  v.timeline = 3;
  v.current_lsn = 0x9000;
  EXPECT_EQ(presence_by_position(write_at(2, 0x4000), v), Presence::kUnverified);  // no history
  v.history = parse_timeline_history(
      "1\t0/3000\tno recovery target specified\n"
      "\n"
      "2\t0/5000A0\tno recovery target specified\n");
  ASSERT_EQ(v.history->size(), 2u);
  EXPECT_EQ(presence_by_position(write_at(2, 0x5000A0), v), Presence::kThere);  // the switch
  EXPECT_EQ(presence_by_position(write_at(2, 0x5000A1), v), Presence::kMissing);
  EXPECT_EQ(presence_by_position(write_at(1, 0x3000), v), Presence::kThere);
  EXPECT_EQ(presence_by_position(write_at(1, 0x3001), v), Presence::kMissing);
}

TEST(PgConfirmedWritesPresence, AHistoryThatNeverPassedThroughTheTimelineHoldsNoneOfIt) {
  // Timeline 4 forked from 2: what timeline 3 wrote is not in it.
  WriterView v;
  v.timeline = 4;
  v.current_lsn = 0x9000;
  v.history = parse_timeline_history("1\t0/3000\tx\n2\t0/6000\tx\n");
  EXPECT_EQ(presence_by_position(write_at(3, 0x6500), v), Presence::kMissing);
}

TEST(PgConfirmedWritesPresence, AWriteOfUnknownPositionCannotBeChecked) {
  WriterView v;
  v.timeline = 2;
  v.current_lsn = 0x3000;
  EXPECT_EQ(presence_by_position(write_at(0, 0x10), v), Presence::kUnverified);
  EXPECT_EQ(presence_by_position(write_at(2, 0), v), Presence::kUnverified);
}

TEST(PgConfirmedWritesPresence, OnlyWritesOfAnotherTimelineOrHostAreInQuestion) {
  WriterView v;
  v.timeline = 2;
  v.host = 9;
  EXPECT_FALSE(written_elsewhere(write_at(2, 1, 9), v));
  EXPECT_TRUE(written_elsewhere(write_at(1, 1, 9), v));
  EXPECT_TRUE(written_elsewhere(write_at(2, 1, 8), v));
}

TEST(PgConfirmedWritesPresence, AHistoryFilesLinesThatCannotBeReadAreSkipped) {
  const auto h = parse_timeline_history("# comment\n  1\t0/3000\tok\nx\t0/1\n2 bad\n3\t1/0\t\n");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], (std::pair<std::uint32_t, std::uint64_t>(1, 0x3000)));
  EXPECT_EQ(h[1], (std::pair<std::uint32_t, std::uint64_t>(3, 0x100000000ULL)));
}

}  // namespace
}  // namespace holdfast::pg::detail
