// holdfast::asio::pg::LogStore against a real server: DatabaseSink's batches written through a
// Client on an event loop of their own thread (the calling thread waits at a condition
// variable, never in libpq), made storable as PgLogStore makes them; a frozen server and a
// loop that does not run answered within the store's window as overload, so the sink pauses.
#include <thread>

#include "asio_pg_test_support.hpp"
#include "holdfast/adapters/asio_pg_log_store.hpp"
#include "log_store_support.hpp"

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/executor_work_guard.hpp>
#else
#include <asio/executor_work_guard.hpp>
#endif

namespace {

using namespace holdfast::asio_pg_test;
using holdfast::Duration;
using holdfast::Level;
using holdfast::LogRecord;
using holdfast::Status;
using holdfast::pg::PgLogStore;
using holdfast::pg::logstore_test::kMorning;
using holdfast::pg::logstore_test::LogSchema;
using LogStore = holdfast::asio::pg::LogStore<>;

// An io_context run by a thread of its own until stop().
class LoopThread {
 public:
  LoopThread() : work_(io_.get_executor()), thread_([this] { io_.run(); }) {}
  ~LoopThread() { stop(); }
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;
  void stop() {
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  net::io_context& io() { return io_; }

 private:
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::thread thread_;
};

// Client options for the logs table at `url`, in `schema` when one is given.
ClientOptions logs_options(const std::string& url, const std::string& schema = "") {
  ClientOptions o = options_for(url);
  o.max_connections = 2;
  o.shield_name = "logs";
  if (!schema.empty()) o.connect.settings = {{"search_path", schema}};
  return o;
}

LogRecord record(Level level, std::string context, std::string message, int second) {
  return {level, std::move(context), std::move(message), kMorning + std::chrono::seconds(second)};
}

TEST(AsioPgLogStore, ABatchIsStoredInOrderAndMadeStorableAndOldRowsArePruned) {
  if (server_url().empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_URL is not set";
  LogSchema schema;
  ASSERT_TRUE(PgLogStore::open(schema.options()).ok());  // creates the table
  LoopThread loop;
  const std::string name = schema.table().substr(0, schema.table().find('.'));
  auto client = Client<>::open(loop.io().get_executor(), logs_options(server_url(), name));
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto store = LogStore::open(*client);
  ASSERT_TRUE(store.ok()) << store.status().to_string();

  const std::vector<LogRecord> batch = {
      record(Level::kInfo, "panel", "first \"quoted\" \\ back", 0),
      record(Level::kWarn, "db", std::string("nul\0byte", 8), 1),
      record(Level::kError, "db", "bad \xC3 utf8", 2),
  };
  const Status s = (*store)->write_batch(batch);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto rows = schema.rows();
  ASSERT_EQ(rows.size(), 3U);
  EXPECT_EQ(rows[0].message, "first \"quoted\" \\ back");
  EXPECT_EQ(rows[1].level, "WARN");
  EXPECT_EQ(rows[1].message, "nulbyte");
  EXPECT_EQ(rows[2].message, "bad \xEF\xBF\xBD utf8");
  EXPECT_EQ(rows[2].created_at, "2026-09-11T06:20:02.000Z");
  EXPECT_LT(rows[0].id, rows[1].id);
  EXPECT_LT(rows[1].id, rows[2].id);
  EXPECT_EQ((*store)->batches(), 1U);
  EXPECT_EQ((*store)->sanitized(), 2U);

  holdfast::Result<int> pruned =
      (*store)->delete_older_than(kMorning + std::chrono::milliseconds(1500), 10);
  ASSERT_TRUE(pruned.ok()) << pruned.status().to_string();
  EXPECT_EQ(*pruned, 2);
  EXPECT_EQ(schema.count(), 1);
  EXPECT_EQ((*store)->delete_older_than(kMorning, 0).status().code(), Code::kInvalidArgument);
  loop.stop();
}

// The sink's writer thread is never held longer than the store's window (+ the cancel's
// grace) by a server that does not answer, and the failure is overload: the sink pauses.
TEST(AsioPgLogStore, AFrozenServerIsAnsweredWithinTheWindowAsOverload) {
  if (server_url().empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_URL is not set";
  PrivateServer server;
  if (server.url().empty()) GTEST_SKIP() << "could not start a private server";
  PgLogStore::Options made;
  made.url = server.url();
  ASSERT_TRUE(PgLogStore::open(made).ok());
  LoopThread loop;
  ClientOptions o = logs_options(server.url());
  o.silence_after = 500ms;
  o.silence_check = 500ms;
  auto client = Client<>::open(loop.io().get_executor(), o);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  LogStore::Options window;
  window.window = 1s;
  auto store = LogStore::open(*client, window);
  ASSERT_TRUE(store.ok());
  const std::vector<LogRecord> batch = {record(Level::kInfo, "panel", "before", 0)};
  ASSERT_TRUE((*store)->write_batch(batch).ok());  // a connection open before the freeze

  Freeze freeze(server.postmaster_pid());
  ASSERT_TRUE(freeze.frozen());
  for (int i = 0; i < 2; ++i) {  // the batch sent on the frozen server, then the one after
    const auto started = std::chrono::steady_clock::now();
    const Status s = (*store)->write_batch(batch);
    EXPECT_LT(seconds_since(started), 1.0 + 0.35 + 0.5);
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(s.fault().overload) << s.to_string();
  }
  EXPECT_EQ((*store)->failed_batches(), 2U);
  freeze.thaw();
  loop.stop();
}

// A loop that does not run the call in time: the caller is answered kUnavailable as overload
// (the sink pauses and counts the batch skipped), and the call, run later, is not sent.
TEST(AsioPgLogStore, ACallTheLoopDidNotRunInTimeIsAnsweredUnavailableAndNeverSentLater) {
  if (server_url().empty()) GTEST_SKIP() << "HOLDFAST_TEST_PG_URL is not set";
  LogSchema schema;
  ASSERT_TRUE(PgLogStore::open(schema.options()).ok());
  const std::string name = schema.table().substr(0, schema.table().find('.'));
  net::io_context late;  // not run until the store gave up
  auto client = Client<>::open(late.get_executor(), logs_options(server_url(), name));
  ASSERT_TRUE(client.ok());
  LogStore::Options o;
  o.window = 100ms;
  o.grace = 100ms;
  auto store = LogStore::open(*client, o);
  ASSERT_TRUE(store.ok());
  const std::vector<LogRecord> batch = {record(Level::kInfo, "panel", "too late", 0)};
  const Status s = (*store)->write_batch(batch);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  EXPECT_TRUE(s.fault().overload);
  late.run_for(500ms);  // the loop runs the call now
  EXPECT_EQ(schema.count(), 0);
  // A call in time is stored as usual.
  late.restart();
  auto work = net::make_work_guard(late);
  std::thread runner([&] { late.run(); });
  o.window = 2s;
  auto in_time = LogStore::open(*client, o);
  ASSERT_TRUE(in_time.ok());
  const Status stored = (*in_time)->write_batch(batch);
  work.reset();
  late.stop();
  runner.join();
  EXPECT_TRUE(stored.ok()) << stored.to_string();
  EXPECT_EQ(schema.count(), 1);
}

TEST(AsioPgLogStore, BadOptionsAreRefusedByName) {
  net::io_context io;
  EXPECT_EQ(LogStore::open(nullptr).status().code(), Code::kInvalidArgument);
  auto client = Client<>::open(io.get_executor(), logs_options("postgresql://127.0.0.1:1/x"));
  ASSERT_TRUE(client.ok());
  LogStore::Options o;
  o.window = Duration::zero();
  const Status s = LogStore::open(*client, o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("window"), std::string_view::npos) << s.to_string();
}

}  // namespace
