#include "drill.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "drill_run.hpp"

namespace holdfast::panel {

namespace drill {

std::string kind_name(StormKind k) {
  return k == StormKind::kWrite ? "write" : "read";
}

}  // namespace drill

std::string storm_name(const StormSpec& spec) {
  return spec.fault.empty() ? drill::kind_name(spec.kind) : spec.fault;
}

std::vector<StormSpec> default_storms() {
  std::vector<StormSpec> storms;
  for (double s : {2.0, 5.0, 20.0}) {
    storms.push_back({StormKind::kWrite, s});
    storms.push_back({StormKind::kRead, s});
  }
  return storms;
}

Result<DrillResult> run_drill(
    const DrillOptions& options,
    const std::function<void(double, double, const std::string&)>& progress) {
  if (options.strategies.empty()) return Status(Code::kInvalidArgument, "no strategies to run");
  if (options.workers < 1 || options.workers > 64) {
    return Status(Code::kInvalidArgument, "workers must be between 1 and 64");
  }
  const std::vector<StormSpec> storms = options.storms.empty() ? default_storms() : options.storms;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(options.out_dir) / "db", ec);
  if (ec) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("cannot create {}: {}", options.out_dir, ec.message()));
  }
  const std::string today(utc_stamp(WallClock::system().now()).view().substr(0, 10));

  drill::DrillRun run(options);
  if (Status s = drill::open_instances(run, today); !s.ok()) return s;
  drill::start_load(run);
  DrillResult result;
  if (Status s = drill::run_storms(run, storms, progress, result); !s.ok()) return s;
  run.stop_load();
  for (auto& inst : run.instances) {
    if (inst->logging.sink) inst->logging.sink->flush(std::chrono::seconds(5));
    inst->server->stop();
  }
  result.seconds = run.since();
  drill::summarize(run, result);
  return result;
}

}  // namespace holdfast::panel
