// The schedule's current copy (ADR 0031): on the async lane the day's last good copy is
// answered again, without its queries, only while PRAGMA data_version shows nothing
// committed since it was read. DataEpoch on real SQLite connections, then the panel.
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "data_epoch.hpp"
#include "demo_data.hpp"
#include "panel_fixture.hpp"

namespace holdfast::panel {
namespace {

// A raw connection to `path`, closed at scope end.
struct Connection {
  explicit Connection(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  }
  ~Connection() { sqlite3_close(db); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  void exec(const char* sql) const {
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_free(error);
  }
  // One observation (DataEpoch::kObserveSql) on this connection.
  std::int64_t observe() const {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, DataEpoch::kObserveSql, -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    EXPECT_EQ(sqlite3_step(st), SQLITE_ROW) << sqlite3_errmsg(db);
    const std::int64_t epoch = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return epoch;
  }
  sqlite3* db = nullptr;
};

class DataEpochTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("holdfast-epoch-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "club.db").string();
    Connection setup(path_);
    setup.exec("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

// Observations on one connection answer the same epoch until another connection -- here
// one DataEpoch knows nothing of, as another process's would be -- commits.
TEST_F(DataEpochTest, TheEpochMovesOnlyWhenAnotherConnectionHasCommitted) {
  DataEpoch epoch;
  Connection reader(path_);
  ASSERT_TRUE(epoch.attach(reader.db).ok());
  Connection other(path_);
  const std::int64_t first = reader.observe();
  EXPECT_EQ(reader.observe(), first);
  EXPECT_EQ(reader.observe(), first) << "nothing was committed";
  other.exec("INSERT INTO t VALUES (2)");
  const std::int64_t after = reader.observe();
  EXPECT_NE(after, first) << "a commit by another connection went unseen";
  EXPECT_EQ(reader.observe(), after);
  other.exec("SELECT count(*) FROM t");
  EXPECT_EQ(reader.observe(), after) << "a read is no change";
}

// A copy stamped with the epoch one connection observed is checked by observations on
// others: a commit after the copy shows on whichever connection looks next.
TEST_F(DataEpochTest, ACommitShowsWhicheverConnectionLooksNext) {
  DataEpoch epoch;
  Connection a(path_);
  Connection b(path_);
  ASSERT_TRUE(epoch.attach(a.db).ok());
  ASSERT_TRUE(epoch.attach(b.db).ok());
  (void)a.observe();
  const std::int64_t stamp = b.observe();  // each connection's first report moves it once
  EXPECT_EQ(a.observe(), stamp);
  EXPECT_EQ(b.observe(), stamp);
  Connection other(path_);
  other.exec("UPDATE t SET x = x + 1");
  EXPECT_NE(a.observe(), stamp) << "connection a missed the commit";
  const std::int64_t moved = b.observe();
  EXPECT_NE(moved, stamp) << "connection b missed the commit";
  EXPECT_EQ(a.observe(), moved);
}

using PanelScheduleCopyTest = PanelFixture;

// The page's reads while nothing changes are the session and one observation; any commit,
// by the panel or by another program, is on the very next page.
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
    if (calls == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(calls, 2u) << "the session and the observation, and no schedule query";
  EXPECT_GE(server_->counters().current_copy.load(), 1u);
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("holdfast_panel_current_copy_pages_total{"), std::string::npos);
  ASSERT_FALSE(page["games"].empty());

  // Another program renames the club.
  {
    Connection other(path_);
    other.exec("UPDATE settings SET value = 'Renamed Club' WHERE key = 'club_name'");
  }
  page = get(calls);
  EXPECT_EQ(page["club"], "Renamed Club") << "a commit by another program was not seen";
  EXPECT_GT(calls, 2u);

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
