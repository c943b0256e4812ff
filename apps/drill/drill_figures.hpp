// The figures of one storm period per strategy (drill_figures.cpp), for the drill's report
// (drill_report.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drill.hpp"
#include "drill_run.hpp"

namespace holdfast::panel::drill {

// A storm period: from the storm's start to `to` (the next storm's start, or the end of
// the last storm's gap: the log tail that follows is not storm).
struct Period {
  const StormResult& storm;
  double to;
  const StormWall& wall;
};

// The figures of `inst` in `period` (drill.hpp's StrategyResult, but the failover's);
// `seconds`: the drill's length.
StrategyResult period_result(const Instance& inst, const Period& period, double seconds);

// Instance::count, or a count(*) on its SQLite file; -1 on error.
std::int64_t count_in(const Instance& inst, const std::string& sql,
                      const std::vector<std::string>& params);

// The breakers of process `p` that both samples around `t` saw open (samples in time
// order): Sample::kReadsOpen, kWritesOpen.
std::uint8_t open_around(const std::vector<Sample>& samples, double t, int p);

}  // namespace holdfast::panel::drill
