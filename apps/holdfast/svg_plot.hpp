// A small SVG line-chart writer for the command-line tool's reports (sim, drill).
//
//   holdfast::svg::LineChart chart;
//   chart.title = "Goodput";
//   chart.x.label = "time (s)";
//   chart.y.label = "requests/s";
//   holdfast::svg::Series naive;
//   naive.name = "naive";
//   naive.x = t;
//   naive.y = goodput;
//   chart.series.push_back(naive);
//   holdfast::svg::Span trigger;
//   trigger.from = 20;
//   trigger.to = 30;
//   trigger.label = "trigger active";
//   chart.spans.push_back(trigger);
//   std::string svg = holdfast::svg::render(chart);  // render(span of charts): stacked
//
// Features: a title, axes with "nice" ticks and labels, any number of named series with a
// legend, shaded time spans (trigger active, breaker open, ...), and an optional second y
// axis on the right for series marked `right_axis`. A NaN y leaves a gap in its line.
// Dependency-free (standard library only); output is deterministic for the same input.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace holdfast::svg {

struct Axis {
  std::string label;
  // Fixed ends; unset: from the data (the y axes start at 0 when all data are >= 0).
  std::optional<double> min;
  std::optional<double> max;
};

struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // same length as x; NaN leaves a gap
  std::string color;      // any SVG colour; empty: the next palette colour
  bool right_axis = false;
  bool dashed = false;
  double width = 1.6;
};

// A shaded band over an x range, labelled at its top.
struct Span {
  double from = 0.0;
  double to = 0.0;
  std::string label;
  std::string color = "#f4a261";
  double opacity = 0.18;
};

struct LineChart {
  std::string title;
  Axis x;
  Axis y;
  Axis y2;  // drawn only when a series has right_axis
  std::vector<Series> series;
  std::vector<Span> spans;
  int width = 960;
  int height = 340;
};

// One standalone SVG document with the charts stacked top to bottom.
[[nodiscard]] std::string render(std::span<const LineChart> charts);
[[nodiscard]] inline std::string render(const LineChart& chart) {
  return render(std::span<const LineChart>(&chart, 1));
}

// Tick positions for [lo, hi]: multiples of 1, 2 or 5 x 10^k, about `target` of them.
[[nodiscard]] std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// `text` with &, <, >, " and ' escaped for XML.
[[nodiscard]] std::string escape(std::string_view text);

}  // namespace holdfast::svg
