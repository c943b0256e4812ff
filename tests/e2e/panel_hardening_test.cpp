// Issue #13 on the SQLite panel: idempotency keys, answers without internals, web security,
// limits. Each test fails on the panel before the fix.
#include <chrono>
#include <string>

#include "hardening_checks.hpp"
#include "panel_fixture.hpp"

namespace holdfast::panel {
namespace {

class PanelHardeningTest : public PanelFixture {
 protected:
  long long count(const std::string& sql) {
    auto n = store_->database().query_one<std::int64_t>(sql);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    return n.ok() ? n->value_or(-1) : -1;
  }
  long long payments() { return count("SELECT count(*) FROM payments"); }
  // A game with room that neither demo user 1 nor 2 has joined.
  long long open_game() {
    return count(
        "SELECT min(id) FROM games g WHERE capacity > "
        "(SELECT count(*) FROM signups s WHERE s.game_id = g.id) + 2 AND NOT EXISTS "
        "(SELECT 1 FROM signups s WHERE s.game_id = g.id AND s.user_id IN (1, 2))");
  }
};

TEST_F(PanelHardeningTest, IdempotencyKeysAreScopedToUserAndRouteAndCarryTheRequestFingerprint) {
  hardening::expect_keys_scoped_and_fingerprinted(
      *http_, [this] { return payments(); }, open_game());
}

TEST_F(PanelHardeningTest, KeysWithControlBytesOrOver255BytesAreRefusedWith400) {
  hardening::expect_nul_key_refused(*store_);
  hardening::expect_bad_keys_refused(*http_, [this] { return payments(); });
}

TEST_F(PanelHardeningTest, AnOldUnscopedKeyTableIsReplacedAndCreationIsIdempotent) {
  ASSERT_TRUE(
      store_->database()
          .execute_script(
              "DROP TABLE idempotency_keys; CREATE TABLE idempotency_keys (key TEXT PRIMARY "
              "KEY, route TEXT NOT NULL, result_id INTEGER NOT NULL, created_at TEXT NOT NULL);")
          .ok());
  ASSERT_TRUE(store_->ensure_demo_data(today()).ok());
  ASSERT_TRUE(store_->ensure_demo_data(today()).ok());
  EXPECT_EQ(count("SELECT count(*) FROM sqlite_master WHERE name = 'idempotency_keys' "
                  "AND sql LIKE '%user_id%fingerprint%'"),
            1);
}

}  // namespace
}  // namespace holdfast::panel
