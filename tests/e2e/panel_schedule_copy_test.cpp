// The schedule's current copy (ADR 0031): on the async lane the day's last good copy is
// answered again, without its queries, only while PRAGMA data_version shows nothing
// committed since it was read. sqlite::ChangeEpoch on real SQLite connections, then the panel.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "demo_data.hpp"
#include "holdfast/sqlite/change_epoch.hpp"
#include "panel_fixture.hpp"
#include "sqlite_faults.hpp"  // RawConnection, TempDir

namespace holdfast::panel {
namespace {

using holdfast::testing::RawConnection;

// A connection of its own on `path` (as another program's would be).
RawConnection open_raw(const std::string& path) {
  Result<RawConnection> c = RawConnection::open(path);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(*c);
}

// One observation (sqlite::ChangeEpoch::kObserveSql) on `c`.
std::int64_t observe(RawConnection& c) {
  Result<std::int64_t> epoch = c.query_int(sqlite::ChangeEpoch::kObserveSql);
  EXPECT_TRUE(epoch.ok()) << epoch.status().to_string();
  return epoch.ok() ? *epoch : -1;
}

class ChangeEpochTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(open_raw(path_)
                    .exec("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
                    .ok());
  }
  holdfast::testing::TempDir dir_;
  std::string path_ = dir_.file("club.db");
};

// Observations on one connection answer the same epoch until another connection -- here
// one ChangeEpoch knows nothing of, as another process's would be -- commits.
TEST_F(ChangeEpochTest, TheEpochMovesOnlyWhenAnotherConnectionHasCommitted) {
  sqlite::ChangeEpoch epoch;
  RawConnection reader = open_raw(path_);
  ASSERT_TRUE(epoch.attach(reader.handle()).ok());
  RawConnection other = open_raw(path_);
  const std::int64_t first = observe(reader);
  EXPECT_EQ(observe(reader), first);
  EXPECT_EQ(observe(reader), first) << "nothing was committed";
  ASSERT_TRUE(other.exec("INSERT INTO t VALUES (2)").ok());
  const std::int64_t after = observe(reader);
  EXPECT_NE(after, first) << "a commit by another connection went unseen";
  EXPECT_EQ(observe(reader), after);
  ASSERT_TRUE(other.query_int("SELECT count(*) FROM t").ok());
  EXPECT_EQ(observe(reader), after) << "a read is no change";
}

// A copy stamped with the epoch one connection observed is checked by observations on
// others: a commit after the copy shows on whichever connection looks next.
TEST_F(ChangeEpochTest, ACommitShowsWhicheverConnectionLooksNext) {
  sqlite::ChangeEpoch epoch;
  RawConnection a = open_raw(path_);
  RawConnection b = open_raw(path_);
  ASSERT_TRUE(epoch.attach(a.handle()).ok());
  ASSERT_TRUE(epoch.attach(b.handle()).ok());
  (void)observe(a);
  const std::int64_t stamp = observe(b);  // each connection's first report moves it once
  EXPECT_EQ(observe(a), stamp);
  EXPECT_EQ(observe(b), stamp);
  ASSERT_TRUE(open_raw(path_).exec("UPDATE t SET x = x + 1").ok());
  EXPECT_NE(observe(a), stamp) << "connection a missed the commit";
  const std::int64_t moved = observe(b);
  EXPECT_NE(moved, stamp) << "connection b missed the commit";
  EXPECT_EQ(observe(a), moved);
}

using PanelScheduleCopyTest = PanelFixture;

// The page's reads while nothing changes are one statement, the session with an observation;
// any commit, by the panel or by another program, is on the very next page.
TEST_F(PanelScheduleCopyTest, TheCurrentCopyIsAnsweredUntilAnythingIsCommitted) {
  // Tomorrow: every game of the day is still ahead, open to a sign-up.
  const std::string url = "/api/schedule?date=" + day_after(today());
  const auto get = [&](std::uint64_t& calls) {
    const std::uint64_t before = store_->calls();
    auto r = http_->Get(url, cookie_);
    calls = store_->calls() - before;
    EXPECT_TRUE(r);
    if (!r) return nlohmann::json();
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));
    return nlohmann::json::parse(r->body);
  };
  // The sign-in's own writes and the session refresh it queues commit in the background:
  // a few pages may read afresh before the copy stays current.
  std::uint64_t calls = 0;
  nlohmann::json page;
  for (int i = 0; i < 20; ++i) {
    page = get(calls);
    if (calls == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(calls, 1u) << "the session with the observation, and no schedule query";
  EXPECT_GE(server_->counters().current_copy.load(), 1u);
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("holdfast_panel_current_copy_pages_total{"), std::string::npos);
  ASSERT_FALSE(page["games"].empty());

  // Another program renames the club.
  ASSERT_TRUE(open_raw(path_)
                  .exec("UPDATE settings SET value = 'Renamed Club' WHERE key = 'club_name'")
                  .ok());
  page = get(calls);
  EXPECT_EQ(page["club"], "Renamed Club") << "a commit by another program was not seen";
  EXPECT_GT(calls, 1u);

  // The panel's own write: a sign-up counts at once (on the first game open to one: some
  // may be past, full, or Ada's already).
  const nlohmann::json games = page["games"];
  for (std::size_t i = 0; i < games.size(); ++i) {
    const std::string id = std::to_string(games[i]["id"].get<std::int64_t>());
    auto signed_up = http_->Post("/signups", cookie_, http_client::Params{{"game_id", id}});
    ASSERT_TRUE(signed_up);
    if (signed_up->status != 201) continue;
    page = get(calls);
    EXPECT_EQ(page["games"][i]["signed_up"], games[i]["signed_up"].get<int>() + 1)
        << "the panel's own sign-up was not seen";
    return;
  }
  FAIL() << "no game of the day took a sign-up";
}

}  // namespace
}  // namespace holdfast::panel
