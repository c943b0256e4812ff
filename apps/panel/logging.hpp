// The panel's logging: console plus the logs table, the holdfast way or the origin's way.
//
// holdfast: DatabaseSink over SqliteLogStore — a bounded queue, batches written off the
// request path, a 30 s pause when the database is overloaded, a gap line afterwards.
// The baselines: one synchronous INSERT per entry on the request's thread with the origin's
// 5 s busy_timeout — the logger that, in the origin's incident, added queries to the
// overloaded queue and fell over ("Failed to save log to database").
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "holdfast/core/result.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/log/logger.hpp"
#include "holdfast/sqlite/database.hpp"
#include "strategy.hpp"

namespace holdfast::panel {

// The baselines' logs-table sink: writes each entry at once, waiting for the lock.
class SyncTableSink final : public Sink {
 public:
  // `report_failures`: write "Failed to save log to database" on the console, as the
  // origin's logger did (the drill turns it off to keep its progress bar readable).
  SyncTableSink(sqlite::Database db, bool report_failures) noexcept
      : db_(std::move(db)), report_failures_(report_failures) {}
  [[nodiscard]] bool accepts(Level level) const noexcept override { return level >= Level::kInfo; }
  void write(const LogEntry& entry) override;
  [[nodiscard]] std::uint64_t failures() const noexcept { return failures_.load(); }
  [[nodiscard]] sqlite::Database& database() noexcept { return db_; }

 private:
  sqlite::Database db_;
  bool report_failures_;
  std::atomic<std::uint64_t> failures_{0};
};

// holdfast's logs on PostgreSQL: written by the blocking store it is made with (pg::PgLogStore)
// until the panel's event loop runs, then by the store attached on that loop
// (asio::pg::LogStore, PanelServer attaches it: no thread then waits in libpq for a log batch),
// and by the blocking one again after detach(). Called by the sink's threads; attach() and
// detach() by the server's.
class LaneLogStore final : public LogStore {
 public:
  // `url`: where the logs go (the lane writes there too when it is the store's server).
  LaneLogStore(std::unique_ptr<LogStore> blocking, std::string url) noexcept
      : blocking_(std::move(blocking)), url_(std::move(url)) {}
  Status write_batch(std::span<const LogRecord> records) override;
  Result<int> delete_older_than(WallTime cutoff, int limit) override;

  void attach(std::shared_ptr<LogStore> on_loop);
  // The blocking store again; a call in flight on the loop's store finishes there.
  void detach() noexcept;
  [[nodiscard]] const std::string& url() const noexcept { return url_; }

 private:
  [[nodiscard]] std::shared_ptr<LogStore> on_loop() const;

  std::unique_ptr<LogStore> blocking_;
  const std::string url_;
  mutable std::mutex mutex_;
  std::shared_ptr<LogStore> on_loop_;  // under mutex_
};

// The sink writes to the store and the logger holds the sinks, so they are released in
// that order: logger, sinks, then the store (also when one is assigned over another).
struct PanelLogging {
  std::unique_ptr<LogStore> store;           // holdfast
  LaneLogStore* lane_store = nullptr;        // `store` when it is one (holdfast on PostgreSQL)
  std::shared_ptr<DatabaseSink> sink;        // holdfast
  std::shared_ptr<SyncTableSink> sync_sink;  // baselines
  std::unique_ptr<Logger> logger;

  PanelLogging() = default;
  PanelLogging(PanelLogging&&) noexcept = default;
  PanelLogging& operator=(PanelLogging&& other) noexcept {
    if (this != &other) {
      reset();
      store = std::move(other.store);
      lane_store = std::exchange(other.lane_store, nullptr);
      sink = std::move(other.sink);
      sync_sink = std::move(other.sync_sink);
      logger = std::move(other.logger);
    }
    return *this;
  }
  ~PanelLogging() { reset(); }

  void reset() noexcept {
    logger.reset();
    sync_sink.reset();
    sink.reset();
    lane_store = nullptr;
    store.reset();
  }
};

// `overload_pause`: holdfast's DatabaseSink pause (the origin's 30 s by default).
Result<PanelLogging> make_logging(const std::string& path, Strategy strategy, Clock& clock,
                                  bool console = true,
                                  Duration overload_pause = std::chrono::seconds(30));
// On PostgreSQL: holdfast logs to the logs table through DatabaseSink over a LaneLogStore
// (pg::PgLogStore until the server's event loop takes over); the baselines log to the console
// only.
Result<PanelLogging> make_logging_pg(const std::string& url, Strategy strategy, Clock& clock,
                                     bool console = true,
                                     Duration overload_pause = std::chrono::seconds(30));

}  // namespace holdfast::panel
