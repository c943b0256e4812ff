// The drill's setup: per strategy, a fresh SQLite file with the demo club, the strategy's
// logging and a panel on a loopback port.
#include <filesystem>

#include <fmt/format.h>

#include "drill_run.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/sqlite/log_store.hpp"

namespace holdfast::panel::drill {
namespace {

namespace fs = std::filesystem;

Result<std::unique_ptr<Instance>> open_instance(const DrillOptions& options, Strategy s,
                                                const std::string& today) {
  auto inst = std::make_unique<Instance>();
  inst->strategy = s;
  inst->name = std::string(to_string(s));
  inst->path = (fs::path(options.out_dir) / "db" / fmt::format("{}.db", to_string(s))).string();
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    fs::remove(inst->path + suffix, ec);
  ClubStore::Options store_options;
  store_options.path = inst->path;
  store_options.strategy = s;
  Result<std::unique_ptr<ClubStore>> store = ClubStore::open(store_options);
  if (!store.ok()) return store.status();
  inst->store = std::move(*store);
  if (Status st = inst->store->ensure_demo_data(today); !st.ok()) return st;
  auto last =
      inst->store->database().query_one<std::int64_t>("SELECT coalesce(max(id), 0) FROM payments");
  if (!last.ok()) return last.status();
  inst->payments_before = last->value_or(0);
  Result<PanelLogging> logging = make_logging(
      inst->path, s, Clock::system(), /*console=*/false,
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(options.log_pause_s)));
  if (!logging.ok()) return logging.status();
  inst->logging = std::move(*logging);
  PanelServer::Options server_options;
  server_options.store = inst->store.get();
  server_options.logger = inst->logging.logger.get();
  inst->server = std::make_unique<PanelServer>(server_options);
  if (Status st = inst->server->start(); !st.ok()) return st;
  return inst;
}

}  // namespace

void Instance::close_idle_connections() {
  store->database().close_idle_connections();
  if (logging.store) {
    static_cast<sqlite::SqliteLogStore*>(logging.store.get())->database().close_idle_connections();
  }
  if (logging.sync_sink) logging.sync_sink->database().close_idle_connections();
}

int Instance::breaker_state() {
  const auto level = [](const Shield* s) {
    if (s == nullptr) return 0;
    switch (s->breaker().state()) {
      case BreakerState::kClosed:
        return 0;
      case BreakerState::kHalfOpen:
        return 1;
      default:
        return 2;
    }
  };
  if (store->read_shield() != nullptr) {
    return std::max(level(store->read_shield()), level(store->write_shield()));
  }
  if (baselines::OriginBreaker* b = store->origin_breaker()) {
    using State = baselines::OriginBreaker::State;
    switch (b->state()) {
      case State::kClosed:
        return 0;
      case State::kHalfOpen:
        return 1;
      case State::kOpen:
        return 2;
    }
  }
  return 0;
}

Status open_instances(DrillRun& run, const std::string& today) {
  for (Strategy s : run.options.strategies) {
    Result<std::unique_ptr<Instance>> inst = open_instance(run.options, s, today);
    if (!inst.ok()) return inst.status();
    run.instances.push_back(std::move(*inst));
  }
  return Status();
}

}  // namespace holdfast::panel::drill
