// `holdfast sim`'s results as files: the JSON document and the SVG charts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "holdfast/sim.hpp"

namespace holdfast::cli {

// The JSON document: the scenario, then per strategy (reports[i] ran strategies[i], in
// walls[i] seconds of real time) the summary and the timeline as columns. Only wall_s
// depends on the machine.
[[nodiscard]] nlohmann::ordered_json sim_json(const sim::Scenario& s,
                                              const std::vector<sim::Report>& reports,
                                              const std::vector<sim::Strategy>& strategies,
                                              const std::vector<double>& walls);

// The goodput, amplification, load and (when any opened) breaker charts, as one SVG.
[[nodiscard]] std::string sim_svg(const sim::Scenario& s, const std::vector<sim::Report>& reports);

}  // namespace holdfast::cli
