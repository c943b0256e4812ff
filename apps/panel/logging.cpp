#include "logging.hpp"

#include <fmt/format.h>

#include "holdfast/sqlite/log_store.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "holdfast/pg/log_store.hpp"
#endif

namespace holdfast::panel {

void SyncTableSink::write(const LogEntry& entry) {
  std::string message(entry.message);
  for (const LogField& f : entry.fields) {
    message += fmt::format(" {}={}", f.key(), f.value());
  }
  const UtcStamp at = utc_stamp(entry.created_at);
  Result<sqlite::Exec> row = db_.execute(sqlite::logs_table::kInsert, to_string(entry.level),
                                         entry.context, message, at.view());
  if (!row.ok()) {
    failures_++;
    if (report_failures_)
      console::write(Level::kError, "logger",
                     "Failed to save log to database: " + row.status().to_string());
  }
}

Status LaneLogStore::write_batch(std::span<const LogRecord> records) {
  const std::shared_ptr<LogStore> loop = on_loop();
  return loop ? loop->write_batch(records) : blocking_->write_batch(records);
}

Result<int> LaneLogStore::delete_older_than(WallTime cutoff, int limit) {
  const std::shared_ptr<LogStore> loop = on_loop();
  return loop ? loop->delete_older_than(cutoff, limit)
              : blocking_->delete_older_than(cutoff, limit);
}

void LaneLogStore::attach(std::shared_ptr<LogStore> on_loop) {
  std::lock_guard<std::mutex> hold(mutex_);
  on_loop_ = std::move(on_loop);
}

void LaneLogStore::detach() noexcept {
  std::shared_ptr<LogStore> gone;  // released outside the lock
  std::lock_guard<std::mutex> hold(mutex_);
  gone.swap(on_loop_);
}

std::shared_ptr<LogStore> LaneLogStore::on_loop() const {
  std::lock_guard<std::mutex> hold(mutex_);
  return on_loop_;
}

namespace {

// A logger on `clock` (writing to the console too when `console`), with no sink yet.
PanelLogging with_logger(Clock& clock, bool console) {
  PanelLogging out;
  Logger::Options options;
  options.clock = &clock;
  options.console = console;
  out.logger = std::make_unique<Logger>(options);
  return out;
}

// holdfast's logging: a DatabaseSink over `store`, pausing `overload_pause` after the
// database refuses a batch.
void add_database_sink(PanelLogging& out, std::unique_ptr<LogStore> store, Clock& clock,
                       Duration overload_pause) {
  DatabaseSink::Options sink_options;
  sink_options.clock = &clock;
  sink_options.overload_pause = overload_pause;
  out.store = std::move(store);
  out.sink = std::make_shared<DatabaseSink>(*out.store, sink_options);
  out.logger->add_sink(out.sink);
}

}  // namespace

Result<PanelLogging> make_logging(const std::string& path, Strategy strategy, Clock& clock,
                                  bool console, Duration overload_pause) {
  PanelLogging out = with_logger(clock, console);
  if (strategy == Strategy::kHoldfast) {
    sqlite::SqliteLogStore::Options store_options;
    store_options.path = path;
    store_options.clock = &clock;
    Result<std::unique_ptr<sqlite::SqliteLogStore>> store =
        sqlite::SqliteLogStore::open(store_options);
    if (!store.ok()) return store.status();
    add_database_sink(out, std::move(*store), clock, overload_pause);
  } else {
    sqlite::Options db_options;
    db_options.path = path;
    db_options.busy_timeout = std::chrono::seconds(5);
    db_options.read_connections = 1;
    db_options.clock = &clock;
    Result<sqlite::Database> db = sqlite::Database::open(db_options);
    if (!db.ok()) return db.status();
    for (std::string_view ddl : sqlite::logs_table::kSchema) {
      if (auto made = db->execute(ddl); !made.ok()) return made.status();
    }
    out.sync_sink = std::make_shared<SyncTableSink>(std::move(*db), console);
    out.logger->add_sink(out.sync_sink);
  }
  return out;
}

Result<PanelLogging> make_logging_pg(const std::string& url, Strategy strategy, Clock& clock,
                                     bool console, Duration overload_pause) {
  PanelLogging out = with_logger(clock, console);
  if (strategy != Strategy::kHoldfast) return out;  // the baselines: the console only
#ifdef HOLDFAST_PANEL_HAVE_PG
  pg::PgLogStore::Options store_options;
  store_options.url = url;
  store_options.clock = &clock;
  store_options.application_name = "holdfast-panel-logs";
  Result<std::unique_ptr<pg::PgLogStore>> store = pg::PgLogStore::open(std::move(store_options));
  if (!store.ok()) return store.status();
  auto lane = std::make_unique<LaneLogStore>(std::move(*store), url);
  out.lane_store = lane.get();
  add_database_sink(out, std::move(lane), clock, overload_pause);
  return out;
#else
  (void)url;
  return Status(Code::kFailedPrecondition, "this build has no PostgreSQL support");
#endif
}

}  // namespace holdfast::panel
