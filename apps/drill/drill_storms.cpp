// The drill's storms: after the warm-up, each storm hits every file at the same instant
// (storm.hpp) and is followed by a quiet gap; then the drill waits for paused log sinks to
// resume, so the gap lines they write can be counted.
#include <fmt/format.h>

#include "drill_run.hpp"

namespace holdfast::panel::drill {
namespace {

std::string wall_now() {
  return std::string(utc_stamp(WallClock::system().now()).view());
}

// One storm on every file at once, held for spec.seconds. On failure to take a lock the
// load is stopped.
Result<StormResult> run_storm(DrillRun& run, const StormSpec& spec, Pacer& pacer) {
  const std::string what = fmt::format("{} storm, {:g} s", kind_name(spec.kind), spec.seconds);
  // Every file is locked at the same instant (one thread each).
  std::vector<std::unique_ptr<LockStorm>> locks;
  for (auto& inst : run.instances) {
    Instance* raw = inst.get();
    locks.push_back(std::make_unique<LockStorm>(inst->path, spec.kind,
                                                [raw] { raw->close_idle_connections(); }));
  }
  std::vector<std::thread> starters;
  std::vector<Status> started(locks.size());
  for (std::size_t i = 0; i < locks.size(); ++i) {
    starters.emplace_back([&, i] { started[i] = locks[i]->begin(); });
  }
  for (auto& th : starters)
    th.join();
  StormResult sr;
  sr.spec = spec;
  sr.start_s = run.since();
  const std::string wall_start = wall_now();
  for (const Status& st : started) {
    if (!st.ok()) {
      run.stop_load();
      return Status(st).annotate(what);
    }
  }
  // A read storm blocks connections that open while it holds the file; the panels keep
  // recycling idle connections, so none that opened before the storm outlives it.
  pacer.wait_until(sr.start_s + spec.seconds, what, [&] {
    if (spec.kind != StormKind::kRead) return;
    for (auto& inst : run.instances)
      inst->close_idle_connections();
  });
  for (auto& l : locks)
    l->end();
  sr.end_s = run.since();
  run.storm_wall.push_back({wall_start, wall_now()});
  pacer.wait_until(sr.end_s + run.options.gap_s, what + " - recovery");
  return sr;
}

// Waits for paused log sinks to resume (at most options.log_tail_s), then, if that took a
// while, 2 s more of traffic so they write their gap lines.
void wait_for_log_sinks(const DrillRun& run, Pacer& pacer) {
  const double tail_start = run.since();
  for (;;) {
    bool all = true;
    for (auto& inst : run.instances) {
      if (inst->logging.sink && inst->logging.sink->paused()) all = false;
    }
    if (all || run.since() - tail_start > run.options.log_tail_s) break;
    pacer.report("waiting for paused log sinks to resume");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (run.since() - tail_start > 0.5) pacer.wait_until(run.since() + 2.0, "log sinks resumed");
}

}  // namespace

Status run_storms(DrillRun& run, const std::vector<StormSpec>& storms, const Progress& progress,
                  DrillResult& result) {
  Pacer pacer(run, storms, progress);
  pacer.wait_until(run.options.warmup_s, "warm-up");
  for (const StormSpec& spec : storms) {
    Result<StormResult> sr = run_storm(run, spec, pacer);
    if (!sr.ok()) return sr.status();
    result.storms.push_back(*sr);
  }
  wait_for_log_sinks(run, pacer);
  return Status();
}

}  // namespace holdfast::panel::drill
