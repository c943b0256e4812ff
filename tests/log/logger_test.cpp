#include "holdfast/log/logger.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace holdfast {
namespace {

using namespace std::chrono_literals;
using std::chrono::November;
using ::testing::ElementsAre;

const WallTime kStamped =
    std::chrono::sys_days{std::chrono::year{2026} / November / 30} + 11h + 40min + 21s + 123ms;

// Keeps a copy of every entry it is given.
class RecordingSink final : public Sink {
 public:
  struct Copy {
    Level level;
    std::string context;
    std::string message;
    std::vector<std::pair<std::string, std::string>> fields;
    TimePoint time;
    WallTime created_at;
  };
  explicit RecordingSink(Level min = Level::kDebug) : min_(min) {}
  bool accepts(Level level) const noexcept override { return level >= min_; }
  void write(const LogEntry& e) override {
    Copy c{e.level, std::string(e.context), std::string(e.message), {}, e.time, e.created_at};
    for (const LogField& f : e.fields)
      c.fields.emplace_back(f.key(), f.value());
    entries.push_back(std::move(c));
  }
  std::vector<Copy> entries;

 private:
  Level min_;
};

class ThrowingSink final : public Sink {
 public:
  bool accepts(Level) const noexcept override { return true; }
  void write(const LogEntry&) override { throw std::runtime_error("sink is broken"); }
};

TEST(UtcStamp, IsIso8601UtcWithMillisecondsAndZ) {
  EXPECT_EQ(utc_stamp(kStamped).view(), "2026-11-30T11:40:21.123Z");
  EXPECT_EQ(utc_stamp(WallTime{}).view(), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(utc_stamp(kStamped + 38min + 38s + 877ms).view(), "2026-11-30T12:19:00.000Z");
}

TEST(UtcStamp, TextOrderIsTimeOrder) {
  const WallTime times[] = {WallTime{},
                            kStamped - 1ms,
                            kStamped,
                            kStamped + 1ms,
                            kStamped + std::chrono::days(40),
                            kStamped + std::chrono::days(400)};
  for (std::size_t i = 1; i < std::size(times); ++i) {
    EXPECT_LT(utc_stamp(times[i - 1]).view(), utc_stamp(times[i]).view());
  }
}

TEST(FollowingWallClock, MovesWithTheClock) {
  ManualClock clock;
  FollowingWallClock wall(clock, kStamped);
  EXPECT_EQ(wall.now(), kStamped);
  clock.advance(2500ms);
  EXPECT_EQ(wall.now(), kStamped + 2500ms);
}

TEST(LogField, FormatsNumbersAndBoolsWithoutTheCallersText) {
  EXPECT_EQ(LogField("n", 42).value(), "42");
  EXPECT_EQ(LogField("n", -7).value(), "-7");
  EXPECT_EQ(LogField("n", 18446744073709551615ull).value(), "18446744073709551615");
  EXPECT_EQ(LogField("n", 0.25).value(), "0.25");
  EXPECT_EQ(LogField("b", true).value(), "true");
  EXPECT_EQ(LogField("s", "text").value(), "text");
  const LogField original("n", 123456);
  const LogField copy = original;  // the copy must not point into the original
  EXPECT_EQ(copy.value(), "123456");
}

TEST(Logger, GivesEverySinkTheEntryWithTimesFromItsClocks) {
  ManualClock clock;
  FollowingWallClock wall(clock, kStamped);
  auto a = std::make_shared<RecordingSink>();
  auto b = std::make_shared<RecordingSink>();
  Logger log(Logger::Options{&clock, &wall, false, {}});
  log.add_sink(a).add_sink(b);
  clock.advance(1s);
  log.warn("payments", "slow", {{"ms", 1200}});
  ASSERT_EQ(a->entries.size(), 1u);
  ASSERT_EQ(b->entries.size(), 1u);
  const auto& e = a->entries[0];
  EXPECT_EQ(e.level, Level::kWarn);
  EXPECT_EQ(e.context, "payments");
  EXPECT_EQ(e.message, "slow");
  EXPECT_THAT(e.fields, ElementsAre(std::pair<std::string, std::string>("ms", "1200")));
  EXPECT_EQ(e.time, ManualClock::kStart + 1s);
  EXPECT_EQ(e.created_at, kStamped + 1s);
}

TEST(Logger, SkipsSinksThatDoNotAcceptTheLevel) {
  auto warn_only = std::make_shared<RecordingSink>(Level::kWarn);
  Logger log(Logger::Options{nullptr, nullptr, false, {}});
  log.add_sink(warn_only);
  EXPECT_FALSE(log.enabled(Level::kInfo));
  EXPECT_TRUE(log.enabled(Level::kError));
  log.info("a", "no");
  log.error("a", "yes");
  ASSERT_EQ(warn_only->entries.size(), 1u);
  EXPECT_EQ(warn_only->entries[0].message, "yes");
}

TEST(Logger, NeverThrowsWhenASinkThrowsAndTheOtherSinksStillGetTheEntry) {
  auto after = std::make_shared<RecordingSink>();
  Logger log(Logger::Options{nullptr, nullptr, false, {}});
  log.add_sink(std::make_shared<ThrowingSink>()).add_sink(after);
  EXPECT_NO_THROW(log.error("a", "one"));
  EXPECT_NO_THROW(log.info("a", "two"));
  EXPECT_EQ(log.sink_failures(), 2u);
  EXPECT_EQ(after->entries.size(), 2u);
}

TEST(Logger, ANullSinkIsAConfigurationError) {
  Logger log(Logger::Options{nullptr, nullptr, false, {}});
  EXPECT_THROW(log.add_sink(nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace holdfast
