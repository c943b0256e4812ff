#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "holdfast/log/console.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast {
namespace {

using namespace std::chrono_literals;
using std::chrono::November;
using ::testing::HasSubstr;

const WallTime kStamped =
    std::chrono::sys_days{std::chrono::year{2026} / November / 30} + 11h + 40min + 21s + 123ms;

// A temporary stdio stream whose text the test can read back.
class Capture {
 public:
  Capture() : file_(std::tmpfile()) {}
  ~Capture() {
    if (file_) std::fclose(file_);
  }
  std::FILE* stream() const { return file_; }
  std::string text() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), file_)) > 0)
      out.append(buf, n);
    return out;
  }

 private:
  std::FILE* file_;
};

LogEntry entry(Level level, std::string_view context, std::string_view message,
               std::span<const LogField> fields = {}) {
  return LogEntry{level, context, message, fields, TimePoint{}, kStamped};
}

TEST(ConsoleSink, WritesOneGreppableLineWithTheEntrysTimeAndKeyValues) {
  Capture out;
  ConsoleSink sink(ConsoleSink::Options{out.stream(), Level::kDebug});
  const LogField fields[] = {{"user", 42}, {"note", "two words"}, {"empty", ""}};
  sink.write(entry(Level::kInfo, "payments", "charged", fields));
  EXPECT_EQ(out.text(),
            "2026-11-30T11:40:21.123Z INFO  [payments] charged user=42 note=\"two words\" "
            "empty=\"\"\n");
}

TEST(ConsoleSink, UsesTheSameLayoutAsConsoleWrite) {
  const Level before = console::level();
  console::set_level(Level::kDebug);
  ::testing::internal::CaptureStderr();
  console::write(Level::kWarn, "retry", "schedule.games: attempt 1 failed");
  const std::string theirs = ::testing::internal::GetCapturedStderr();
  console::set_level(before);

  Capture out;
  ConsoleSink sink(ConsoleSink::Options{out.stream(), Level::kDebug});
  sink.write(entry(Level::kWarn, "retry", "schedule.games: attempt 1 failed"));
  const std::string ours = out.text();
  // Everything after the timestamp is identical, and both timestamps are 24 characters.
  ASSERT_GT(theirs.size(), 24u);
  EXPECT_EQ(ours.substr(24), theirs.substr(24));
  EXPECT_EQ(theirs[23], 'Z');
}

TEST(ConsoleSink, EscapesNewlinesSoOneEntryIsOneLine) {
  Capture out;
  ConsoleSink sink(ConsoleSink::Options{out.stream(), Level::kDebug});
  const LogField fields[] = {{"detail", "a \"quoted\"\nvalue\\"}};
  sink.write(entry(Level::kError, "pg", "ERROR: deadlock detected\nDETAIL: waits\r\x01", fields));
  const std::string text = out.text();
  EXPECT_EQ(text,
            "2026-11-30T11:40:21.123Z ERROR [pg] ERROR: deadlock detected\\nDETAIL: waits\\r\\x01 "
            "detail=\"a \\\"quoted\\\"\\nvalue\\\\\"\n");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

TEST(ConsoleSink, WritesAVeryLongLineWhole) {
  Capture out;
  ConsoleSink sink(ConsoleSink::Options{out.stream(), Level::kDebug});
  const std::string message(5000, 'x');
  sink.write(entry(Level::kInfo, "bulk", message));
  const std::string text = out.text();
  EXPECT_EQ(text.size(), 24u + 1 + 5 + 1 + 6 + 1 + 5000 + 1);
  EXPECT_THAT(text, HasSubstr(message + "\n"));
}

TEST(ConsoleSink, FollowsTheConsoleLevelUnlessGivenOne) {
  const Level before = console::level();
  ConsoleSink follows;
  ConsoleSink fixed(ConsoleSink::Options{nullptr, Level::kError});
  console::set_level(Level::kWarn);
  EXPECT_FALSE(follows.accepts(Level::kInfo));
  EXPECT_TRUE(follows.accepts(Level::kWarn));
  console::set_level(Level::kDebug);
  EXPECT_TRUE(follows.accepts(Level::kDebug));
  EXPECT_FALSE(fixed.accepts(Level::kWarn));
  console::set_level(before);
}

TEST(ConsoleSink, FiltersBelowItsLevel) {
  Capture out;
  ConsoleSink sink(ConsoleSink::Options{out.stream(), Level::kWarn});
  sink.write(entry(Level::kInfo, "a", "hidden"));
  sink.write(entry(Level::kWarn, "a", "shown"));
  EXPECT_EQ(out.text(), "2026-11-30T11:40:21.123Z WARN  [a] shown\n");
}

TEST(ConsoleSink, TheLoggersConsoleGetsEveryLevelAtOrAboveTheConsoleLevel) {
  Capture out;
  ManualClock clock;
  FollowingWallClock wall(clock, kStamped);
  Logger log(
      Logger::Options{&clock, &wall, true, ConsoleSink::Options{out.stream(), Level::kDebug}});
  log.debug("retry", "d");
  log.info("a", "i");
  log.warn("a", "w");
  log.error("a", "e");
  const std::string text = out.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_THAT(text, HasSubstr("DEBUG [retry] d\n"));
}

TEST(ConsoleSink, FormatConsoleLineIsTheSameText) {
  const LogField fields[] = {{"k", "v"}};
  std::string line;
  format_console_line(entry(Level::kInfo, "ctx", "msg", fields), line);
  EXPECT_EQ(line, "2026-11-30T11:40:21.123Z INFO  [ctx] msg k=v");
}

}  // namespace
}  // namespace holdfast
