#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_log_store.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/log/database_sink.hpp"

namespace holdfast {
namespace {

using namespace std::chrono_literals;
using std::chrono::September;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_log::FakeLogStore;

const WallTime kNow = std::chrono::sys_days{std::chrono::year{2026} / September / 11} + 6h;

TEST(Retention, TheCutoffIs90DaysBeforeNowByDefault) {
  EXPECT_EQ(retention_cutoff(kNow), kNow - std::chrono::days(90));
  EXPECT_EQ(utc_stamp(retention_cutoff(kNow)).view(), "2026-06-13T06:00:00.000Z");
  EXPECT_EQ(retention_cutoff(kNow, std::chrono::days(7)), kNow - std::chrono::days(7));
}

TEST(Retention, DeletesOldRowsInSmallBatchesUntilNoneAreLeft) {
  FakeLogStore store;
  const WallTime cutoff = retention_cutoff(kNow);
  for (int i = 0; i < 1234; ++i)
    store.add_row(Level::kInfo, "old", cutoff - 1ms - std::chrono::minutes(i));
  for (int i = 0; i < 10; ++i)
    store.add_row(Level::kInfo, "recent", cutoff + std::chrono::minutes(i));
  store.add_row(Level::kInfo, "exactly at the cutoff", cutoff);
  ManualClock clock;
  PruneOptions o;
  o.batch_size = 500;
  o.pause_between_batches = 10ms;
  o.clock = &clock;

  Result<std::int64_t> deleted = prune_logs(store, cutoff, o);
  ASSERT_TRUE(deleted.ok()) << deleted.status().to_string();
  EXPECT_EQ(*deleted, 1234);
  EXPECT_THAT(store.delete_limits(), ElementsAre(500, 500, 500));
  EXPECT_THAT(store.deleted_counts(), ElementsAre(500, 500, 234));
  EXPECT_EQ(clock.total_slept(), 20ms) << "a pause between batches, none after the last";
  EXPECT_EQ(store.rows().size(), 11u);
  for (const LogRecord& r : store.rows())
    EXPECT_GE(r.created_at, cutoff);
}

TEST(Retention, AnExactMultipleOfTheBatchEndsWithAnEmptyBatch) {
  FakeLogStore store;
  for (int i = 0; i < 6; ++i)
    store.add_row(Level::kInfo, "old", kNow - std::chrono::days(100));
  ManualClock clock;
  Result<std::int64_t> deleted = prune_logs(store, retention_cutoff(kNow), {3, 0ms, &clock});
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 6);
  EXPECT_THAT(store.deleted_counts(), ElementsAre(3, 3, 0));
}

TEST(Retention, AFailedBatchStopsAndSaysHowManyWereDeletedBefore) {
  FakeLogStore store;
  for (int i = 0; i < 30; ++i)
    store.add_row(Level::kInfo, "old", kNow - std::chrono::days(100));
  store.fail_delete_calls({Status(), sqlite_status(5, "database is locked")});
  ManualClock clock;
  Result<std::int64_t> deleted = prune_logs(store, retention_cutoff(kNow), {10, 0ms, &clock});
  ASSERT_FALSE(deleted.ok());
  EXPECT_EQ(deleted.status().code(), Code::kUnavailable);
  EXPECT_THAT(std::string(deleted.status().message()), HasSubstr("deleted 10 rows"));
  EXPECT_EQ(store.rows().size(), 20u);
}

TEST(Retention, BadOptionsAreInvalidArgumentNamingTheField) {
  FakeLogStore store;
  Result<std::int64_t> r = prune_logs(store, kNow, {0, 0ms, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("batch_size"));
  r = prune_logs(store, kNow, {10, -1ms, nullptr});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("pause_between_batches"));
  EXPECT_TRUE(store.delete_limits().empty());
}

}  // namespace
}  // namespace holdfast
