#include "holdfast/log/spdlog_sink.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "fake_log_store.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/log/database_sink.hpp"

namespace holdfast {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using testing_log::FakeLogStore;

std::vector<std::string> messages(const std::vector<LogRecord>& rows) {
  std::vector<std::string> out;
  for (const LogRecord& r : rows)
    out.push_back(r.message);
  return out;
}

struct Fixture {
  ManualClock clock;
  FakeLogStore store;
  std::shared_ptr<DatabaseSink> db;
  std::shared_ptr<spdlog::logger> logger;
  Fixture() {
    DatabaseSink::Options o;
    o.clock = &clock;
    o.linger = std::chrono::hours(1);
    db = std::make_shared<DatabaseSink>(store, o);
    logger =
        std::make_shared<spdlog::logger>("payments", std::make_shared<SpdlogSinkMt>(db, clock));
    logger->set_level(spdlog::level::trace);
  }
  void flush() { ASSERT_TRUE(db->flush()); }
};

TEST(SpdlogSink, ForwardsLevelsNameAndPayloadToTheDatabaseSink) {
  Fixture f;
  f.logger->trace("t");
  f.logger->debug("retrying {}", 1);
  f.logger->info("charged {} cents", 1250);
  f.logger->warn("slow");
  f.logger->error("failed");
  f.logger->critical("down");
  f.flush();
  const auto rows = f.store.rows();
  EXPECT_THAT(messages(rows), ElementsAre("charged 1250 cents", "slow", "failed", "down"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].level, Level::kInfo);
  EXPECT_EQ(rows[1].level, Level::kWarn);
  EXPECT_EQ(rows[2].level, Level::kError);
  EXPECT_EQ(rows[3].level, Level::kError);
  EXPECT_EQ(rows[0].context, "payments");
}

TEST(SpdlogSink, CreatedAtIsSpdlogsOwnTimestamp) {
  Fixture f;
  SpdlogSinkMt sink(f.db, f.clock);
  const auto when = std::chrono::sys_days{std::chrono::year{2026} / 9 / 11} + 6h + 20min + 5ms;
  sink.log(spdlog::details::log_msg(when, spdlog::source_loc{}, "", spdlog::level::warn, "w"));
  f.flush();
  ASSERT_EQ(f.store.rows().size(), 1u);
  EXPECT_EQ(utc_stamp(f.store.rows()[0].created_at).view(), "2026-09-11T06:20:00.005Z");
  EXPECT_EQ(f.store.rows()[0].context, "spdlog") << "a logger without a name";
}

TEST(SpdlogSink, SpdlogUsersGetTheSameOverloadPause) {
  Fixture f;
  f.store.fail_next(sqlite_status(5, "database is locked"));
  f.logger->info("render 1");
  f.flush();
  EXPECT_TRUE(f.db->paused());
  f.logger->info("render 2");
  f.logger->error("failed too early");
  f.flush();
  f.clock.advance(5s);
  f.logger->error("failed after 5 s");
  f.flush();
  f.clock.advance(25s);
  f.logger->info("render 3");
  f.flush();
  EXPECT_THAT(messages(f.store.rows()),
              ElementsAre("failed after 5 s",
                          "Log persistence paused for 30 s while the database was overloaded; "
                          "skipped 3 entries (INFO 2, WARN 0, ERROR 1)",
                          "render 3"));
}

TEST(SpdlogSink, ANullTargetIsAConfigurationError) {
  EXPECT_THROW(SpdlogSinkMt(nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace holdfast
