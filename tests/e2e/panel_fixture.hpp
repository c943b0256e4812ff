// The demo panel on loopback over a fresh SQLite file, signed in: what the end-to-end and
// browser tests start from.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "club_store.hpp"
#include "holdfast/sqlite/log_store.hpp"
#include "http_client.hpp"
#include "logging.hpp"
#include "server.hpp"
#include "storm.hpp"

namespace holdfast::panel {

namespace fs = std::filesystem;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

inline std::string today() {
  return std::string(utc_stamp(WallClock::system().now()).view().substr(0, 10));
}

class PanelFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("holdfast-e2e-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "club.db").string();
    ClubStore::Options so;
    so.path = path_;
    so.strategy = Strategy::kHoldfast;
    auto store = ClubStore::open(so);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(*store);
    ASSERT_TRUE(store_->ensure_demo_data(today()).ok());
    auto logging = make_logging(path_, Strategy::kHoldfast, Clock::system(), /*console=*/false);
    ASSERT_TRUE(logging.ok()) << logging.status().to_string();
    logging_ = std::move(*logging);
    PanelServer::Options po;
    po.store = store_.get();
    po.logger = logging_.logger.get();
    po.serve_stale = serve_stale_;
    po.async_lane = async_lane_;
    server_ = std::make_unique<PanelServer>(po);
    ASSERT_TRUE(server_->start().ok());
    http_ = std::make_unique<http_client::Client>("127.0.0.1", server_->port());
    http_->set_read_timeout(seconds(30));
    auto r = http_->Post(
        "/login", http_client::Params{{"email", "Ada.Nowak@club.example"}, {"password", "demo"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 303);
    const std::string set = r->get_header_value("Set-Cookie");
    EXPECT_NE(set.find("HttpOnly"), std::string::npos);
    EXPECT_NE(set.find("SameSite=Lax"), std::string::npos);
    cookie_ = {{"Cookie", set.substr(0, set.find(';'))},
               {"X-CSRF-Token", r->get_header_value("X-CSRF-Token")}};
  }
  void TearDown() override {
    server_.reset();
    logging_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  http_client::Result schedule() {
    return http_->Get("/dashboard/schedule?date=" + today(), cookie_);
  }
  std::unique_ptr<LockStorm> storm(StormKind kind) {
    auto s = std::make_unique<LockStorm>(path_, kind, [this] {
      store_->database().close_idle_connections();
      if (logging_.store) {
        static_cast<sqlite::SqliteLogStore*>(logging_.store.get())
            ->database()
            .close_idle_connections();
      }
    });
    EXPECT_TRUE(s->begin().ok());
    return s;
  }

  bool serve_stale_ = true;
  bool async_lane_ = true;  // PanelServer::Options::async_lane (ADRs 0029, 0030)
  fs::path dir_;
  std::string path_;
  std::unique_ptr<ClubStore> store_;
  PanelLogging logging_;
  std::unique_ptr<PanelServer> server_;
  std::unique_ptr<http_client::Client> http_;
  http_client::Headers cookie_;
};

}  // namespace holdfast::panel
