// Confirmed writes that a failover lost are found and reported (ADR 0036), on real servers:
// a private primary A and its streaming standby B. The loss is caused for real: B is promoted
// while A still takes writes (a split), holdfast confirms writes on A that B never gets, then
// A stops and holdfast's multi-host URL "A,B" moves to B. holdfast must name exactly the
// writes confirmed after the split, and nothing when a failover lost nothing. The ring and
// the rules without a server: confirmed_writes_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/log/logger.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/lost_writes.hpp"
#include "holdfast/pg/lsn.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg {
namespace {

using pgtest::Admin;
using pgtest::caught_up;
using pgtest::eventually;
using pgtest::host_port;
using pgtest::PrivateServer;
using pgtest::promote;
using pgtest::two_hosts;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The lines logged at INFO and above.
class Captured final : public Sink {
 public:
  [[nodiscard]] bool accepts(Level level) const noexcept override { return level >= Level::kInfo; }
  void write(const LogEntry& entry) override {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(std::string(entry.level == Level::kError  ? "ERROR "
                                 : entry.level == Level::kWarn ? "WARN "
                                                               : "INFO ") +
                     std::string(entry.context) + " " + std::string(entry.message));
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }
  std::string all() {
    std::string out;
    for (const std::string& l : lines())
      out += l + "\n";
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

struct Fixture {
  std::shared_ptr<Captured> captured = std::make_shared<Captured>();
  Logger logger{Logger::Options{nullptr, nullptr, false, {}}};
  Fixture() { logger.add_sink(captured); }
};

DatabaseOptions options_for(const std::string& a, const std::string& b, Logger& logger) {
  DatabaseOptions o;
  o.url =
      pgtest::url_with(two_hosts(host_port(a), b), "application_name=" + pgtest::unique("hf_lost"));
  o.application_name = "";
  o.idempotency_table = "lost_keys";
  o.lost_writes.logger = &logger;
  return o;
}

// One payment with its key, in a request of its own.
void pay(Database& db, const std::string& key) {
  RequestScope scope(seconds(6));
  auto r = db.once(key, [&](Transaction& tx) -> Result<std::string> {
    auto ins = tx.query("INSERT INTO lost_t (what) VALUES ($1)", {key});
    if (!ins.ok()) return ins.status();
    return std::string("paid");
  });
  ASSERT_TRUE(r.ok()) << key << ": " << r.status().to_string();
  EXPECT_FALSE(r->replayed) << key;
}

// One write without a key; returns its confirmed position.
Lsn write_unkeyed(Database& db, const std::string& what) {
  RequestScope scope(seconds(6));
  auto r = db.write("INSERT INTO lost_t (what) VALUES ($1)", {what});
  EXPECT_TRUE(r.ok()) << what << ": " << r.status().to_string();
  return request_lsn();
}

// Waits until the Database has completed `n` checks.
bool checked(Database& db, std::uint64_t n) {
  return eventually([&] { return db.lost_writes().checks >= n; }, milliseconds(20000));
}

void create_tables(const std::string& url, Database& db) {
  Admin(url).exec("CREATE TABLE lost_t (id serial PRIMARY KEY, what text)");
  ASSERT_TRUE(db.create_idempotency_table().ok());
}

// A private primary `a` and its streaming standby `b`, which a test promotes or splits.
class PgLostWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    HOLDFAST_REQUIRE_PG_SERVER();
    servers.emplace(20, /*with_standby=*/true);
    ASSERT_FALSE(servers->standby_url().empty()) << "the private standby did not start";
    a = servers->url();
    b = servers->standby_url();
  }

  std::optional<PrivateServer> servers;
  std::string a;
  std::string b;
  Fixture f;
};

TEST_F(PgLostWrites, WritesConfirmedOnTheOldPrimaryAfterASplitAreReportedByKeyAndPosition) {
  Database db(options_for(a, b, f.logger));
  ASSERT_NO_FATAL_FAILURE(create_tables(a, db));

  // Before the split: on A, and replayed by B.
  for (const char* key : {"before-1", "before-2", "before-3"})
    ASSERT_NO_FATAL_FAILURE(pay(db, key));
  const Lsn kept_unkeyed = write_unkeyed(db, "before-unkeyed");
  ASSERT_TRUE(caught_up(a, b));

  // The split: B becomes a primary of its own (timeline 2) while A goes on taking writes.
  ASSERT_TRUE(promote(b));
  const std::vector<std::string> lost = {"after-1", "after-2", "after-3", "after-4"};
  for (const std::string& key : lost)
    ASSERT_NO_FATAL_FAILURE(pay(db, key));
  {
    // A repeat of a lost payment, answered from its key, is the same write: reported once.
    RequestScope scope(seconds(6));
    auto again =
        db.once(lost[0], [](Transaction&) -> Result<std::string> { return std::string("twice"); });
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_TRUE(again->replayed);
  }
  const Lsn lost_unkeyed = write_unkeyed(db, "after-unkeyed");
  ASSERT_EQ(lost_unkeyed.timeline, 1u);
  EXPECT_EQ(Admin(a).count("SELECT count(*) FROM lost_keys"), 7);  // confirmed on A
  EXPECT_EQ(Admin(b).count("SELECT count(*) FROM lost_keys"), 3);  // B never got them
  EXPECT_EQ(db.lost_writes().changes, 0u);

  // A goes; holdfast's next write finds B, the writer now.
  ASSERT_TRUE(servers->down());
  ASSERT_NO_FATAL_FAILURE(pay(db, "on-b-1"));
  EXPECT_EQ(Admin(b).count("SELECT count(*) FROM lost_keys WHERE key = 'on-b-1'"), 1);
  ASSERT_TRUE(checked(db, 1)) << f.captured->all();

  LostWritesReport seen = db.lost_writes();
  EXPECT_EQ(seen.changes, 1u);
  EXPECT_EQ(seen.missing_total, 5u) << f.captured->all();
  EXPECT_EQ(seen.unverified_total, 0u);
  EXPECT_EQ(seen.split_brains, 0u);
  std::set<std::string> named(seen.last_missing.begin(), seen.last_missing.end());
  std::set<std::string> expected(lost.begin(), lost.end());
  expected.insert(lost_unkeyed.to_string_with_timeline());
  EXPECT_EQ(named, expected);
  EXPECT_EQ(db.shield().metrics().snapshot().confirmed_writes_missing, 5u);
  EXPECT_NE(db.shield().metrics_text().find("holdfast_confirmed_writes_missing_total{db=\"pg\"} 5"),
            std::string::npos);
  // The ERROR line names the lost keys and the lost position, and nothing that was kept.
  const std::string log = f.captured->all();
  for (const std::string& key : lost)
    EXPECT_NE(log.find("key \"" + key + "\""), std::string::npos) << log;
  EXPECT_NE(log.find(lost_unkeyed.to_string_with_timeline()), std::string::npos) << log;
  EXPECT_EQ(log.find("before-"), std::string::npos) << log;
  EXPECT_EQ(log.find(kept_unkeyed.to_string_with_timeline()), std::string::npos) << log;
  EXPECT_EQ(log.find("on-b-1"), std::string::npos) << log;
  EXPECT_EQ(log.find("ERROR pg.lost_writes 5 confirmed writes are not on the writer"), 0u) << log;

  // A comes back as a primary of the old timeline and B goes: holdfast follows the writer back
  // to timeline 1, older than timeline 2 it confirmed a write on. A split brain, and the write
  // B confirmed is not on A. What was reported already is not reported again.
  ASSERT_TRUE(servers->up());
  ASSERT_TRUE(servers->standby_down());
  ASSERT_NO_FATAL_FAILURE(pay(db, "on-a-again"));
  ASSERT_TRUE(checked(db, 2)) << f.captured->all();
  seen = db.lost_writes();
  EXPECT_EQ(seen.split_brains, 1u) << f.captured->all();
  EXPECT_EQ(seen.missing_total, 6u) << f.captured->all();
  EXPECT_EQ(seen.last_missing, std::vector<std::string>{"on-b-1"});
  EXPECT_EQ(db.shield().metrics().snapshot().split_brains, 1u);
  EXPECT_NE(f.captured->all().find("ERROR pg.lost_writes split brain: the writer"),
            std::string::npos)
      << f.captured->all();
}

TEST_F(PgLostWrites, AFailoverThatLostNothingReportsNothing) {
  Database db(options_for(a, b, f.logger));
  ASSERT_NO_FATAL_FAILURE(create_tables(a, db));
  for (int i = 0; i < 20; ++i) {
    ASSERT_NO_FATAL_FAILURE(pay(db, "clean-" + std::to_string(i)));
    write_unkeyed(db, "clean-unkeyed-" + std::to_string(i));
  }
  ASSERT_TRUE(caught_up(a, b));
  // A clean failover: A stops (its last WAL streamed to B), then B is promoted.
  ASSERT_TRUE(servers->down());
  ASSERT_TRUE(promote(b));
  ASSERT_TRUE(servers->promoted());
  ASSERT_NO_FATAL_FAILURE(pay(db, "clean-on-b"));
  ASSERT_TRUE(checked(db, 1)) << f.captured->all();
  const LostWritesReport seen = db.lost_writes();
  EXPECT_EQ(seen.changes, 1u);
  EXPECT_EQ(seen.missing_total, 0u) << f.captured->all();
  EXPECT_EQ(seen.unverified_total, 0u) << f.captured->all();
  EXPECT_EQ(seen.split_brains, 0u);
  EXPECT_TRUE(seen.last_finding.empty()) << seen.last_finding;
  // One line, at INFO: the check ran and found everything on the new writer.
  ASSERT_EQ(f.captured->lines().size(), 1u) << f.captured->all();
  EXPECT_EQ(f.captured->lines()[0].rfind("INFO pg.lost_writes a change of writer was checked: the "
                                         "writer (",
                                         0),
            0u)
      << f.captured->all();
  EXPECT_EQ(db.shield().metrics().snapshot().confirmed_writes_missing, 0u);
}

TEST_F(PgLostWrites, WithoutRightsToTheHistoryAnEarlierTimelinesUnkeyedWritesAreUnverifiedNotLost) {
  Admin(a).exec("CREATE ROLE lost_app LOGIN");
  Admin(a).exec("CREATE TABLE lost_t (id serial PRIMARY KEY, what text)");
  Admin(a).exec("GRANT ALL ON lost_t, lost_t_id_seq TO lost_app");
  Admin(a).exec("GRANT CREATE ON SCHEMA public TO lost_app");
  Database db(options_for(pgtest::url_as(a, "lost_app"), pgtest::url_as(b, "lost_app"), f.logger));
  ASSERT_TRUE(db.create_idempotency_table().ok());
  ASSERT_NO_FATAL_FAILURE(pay(db, "app-before"));
  write_unkeyed(db, "app-before-unkeyed");
  ASSERT_TRUE(caught_up(a, b));
  ASSERT_TRUE(promote(b));
  ASSERT_NO_FATAL_FAILURE(pay(db, "app-after"));
  write_unkeyed(db, "app-after-unkeyed");
  ASSERT_TRUE(servers->down());
  ASSERT_NO_FATAL_FAILURE(pay(db, "app-on-b"));
  ASSERT_TRUE(checked(db, 1)) << f.captured->all();
  const LostWritesReport seen = db.lost_writes();
  // The keys are checked without any right beyond the table's; the positions of timeline 1
  // need B's timeline history, which this role may not read.
  EXPECT_EQ(seen.missing_total, 1u) << f.captured->all();
  EXPECT_EQ(seen.last_missing, std::vector<std::string>{"app-after"});
  EXPECT_EQ(seen.unverified_total, 3u) << f.captured->all();  // and create_idempotency_table()
  EXPECT_NE(f.captured->all().find("WARN pg.lost_writes 3 confirmed writes without an idempotency "
                                   "key"),
            std::string::npos)
      << f.captured->all();
  EXPECT_NE(f.captured->all().find("needs superuser"), std::string::npos) << f.captured->all();
}

}  // namespace
}  // namespace holdfast::pg
