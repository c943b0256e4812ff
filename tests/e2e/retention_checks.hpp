// Retention of sessions and idempotency keys, on both stores (panel_test.cpp runs these on
// SQLite, panel_pg_test.cpp on PostgreSQL). Time is what the store is told: `now_utc` stamps
// for sessions; for keys, which the database stamps itself, "now" as the store would be
// told it a day later.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "club_store.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast::panel::retention {

// "2030-01-01T00:00:00.000Z" plus `minutes` (minutes < 60 * 24 * 28).
inline std::string stamp_2030(int minutes) {
  const int day = 1 + minutes / (60 * 24);
  const int hour = minutes / 60 % 24;
  const int minute = minutes % 60;
  return fmt::format("2030-01-{:02}T{:02}:{:02}:00.000Z", day, hour, minute);
}

inline std::int64_t demo_user(ClubStore& store) {
  auto id = store.user_id_by_email("Ada.Nowak@club.example");
  EXPECT_TRUE(id.ok() && id->has_value());
  return id.ok() && id->has_value() ? **id : 0;
}

// 25 sign-ins of one user, a minute apart: the newest 20 sessions live, the 5 oldest gone.
inline void twenty_five_sign_ins_leave_the_newest_twenty(ClubStore& store) {
  const std::int64_t user = demo_user(store);
  std::vector<std::string> tokens;
  for (int i = 0; i < 25; ++i) {
    auto token = store.open_session(user, stamp_2030(i));
    ASSERT_TRUE(token.ok()) << token.status().to_string();
    tokens.push_back(*token);
  }
  int live = 0;
  for (int i = 0; i < 25; ++i) {
    auto who = store.session(tokens[static_cast<std::size_t>(i)], stamp_2030(25));
    ASSERT_TRUE(who.ok()) << who.status().to_string();
    EXPECT_EQ(who->has_value(), i >= 5) << "sign-in " << i;
    live += who->has_value() ? 1 : 0;
  }
  EXPECT_EQ(live, ClubStore::kSessionsPerUser);
  // Past 30 days the newest is no longer valid either, and the pruning deletes them all, in
  // batches of the size it is given.
  const std::string later = "2030-02-01T00:00:00.000Z";
  auto who = store.session(tokens.back(), later);
  ASSERT_TRUE(who.ok());
  EXPECT_FALSE(who->has_value());
  auto batch = store.delete_expired_sessions(later, 7);
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  EXPECT_EQ(*batch, 7);
  auto rest = store.prune(later, 5, Duration::zero());
  ASSERT_TRUE(rest.ok()) << rest.status().to_string();
  EXPECT_GE(*rest, 13);  // the other 13, and the sessions of the test's own sign-in
  auto none = store.delete_expired_sessions(later, 7);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
}

// A key paid with now is kept by a pruning 23 h later and gone after one 25 h later: the
// same payment with the same key is then a new payment, not the first one's replay.
inline void idempotency_keys_older_than_a_day_are_pruned_and_newer_ones_kept(ClubStore& store) {
  const std::int64_t user = demo_user(store);
  const auto at = [](std::chrono::hours from_now) {
    return std::string(utc_stamp(WallClock::system().now() + from_now).view());
  };
  auto first = store.pay(user, 1234, "cash", "retention-key", at(std::chrono::hours(0)));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto kept = store.prune(at(std::chrono::hours(23)));
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  auto replay = store.pay(user, 1234, "cash", "retention-key", at(std::chrono::hours(0)));
  ASSERT_TRUE(replay.ok()) << replay.status().to_string();
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(replay->payment_id, first->payment_id);
  auto pruned = store.prune(at(std::chrono::hours(25)));
  ASSERT_TRUE(pruned.ok()) << pruned.status().to_string();
  EXPECT_GE(*pruned, 1);
  auto again = store.pay(user, 1234, "cash", "retention-key", at(std::chrono::hours(0)));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(again->replayed);
  EXPECT_NE(again->payment_id, first->payment_id);
}

}  // namespace holdfast::panel::retention
