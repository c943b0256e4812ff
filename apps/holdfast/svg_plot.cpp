#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace holdfast::svg {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr double kCharWidth = 6.6;  // average glyph width of the 11 px sans-serif labels

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string opacity(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::clamp(v, 0.0, 1.0));
  return buf;
}

// A tick label: no trailing zeros, no "-0".
std::string label(double v, double step) {
  if (std::fabs(v) < step * 1e-9) v = 0.0;
  char buf[32];
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 9), v);
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  [[nodiscard]] bool empty() const { return !(lo <= hi); }
};

// The data range of an axis, widened to whole ticks; returns the ticks.
std::vector<double> settle(Range& r, const Axis& axis, bool from_zero) {
  if (r.empty()) r = Range{0.0, 1.0};
  if (from_zero && r.lo >= 0.0) r.lo = 0.0;
  if (axis.min) r.lo = *axis.min;
  if (axis.max) r.hi = *axis.max;
  if (!(r.hi > r.lo)) r.hi = r.lo + (r.lo == 0.0 ? 1.0 : std::fabs(r.lo) * 0.1);
  std::vector<double> ticks = nice_ticks(r.lo, r.hi);
  if (ticks.size() >= 2) {
    const double step = ticks[1] - ticks[0];
    if (!axis.min) r.lo = std::min(r.lo, std::floor(r.lo / step + 1e-9) * step);
    if (!axis.max) r.hi = std::max(r.hi, std::ceil(r.hi / step - 1e-9) * step);
    ticks = nice_ticks(r.lo, r.hi);
  }
  return ticks;
}

double tick_step(const std::vector<double>& ticks) {
  return ticks.size() >= 2 ? ticks[1] - ticks[0] : 1.0;
}

void text(std::string& out, double x, double y, std::string_view s, const char* anchor,
          const char* extra = "") {
  out += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\"" + extra +
         ">" + escape(s) + "</text>\n";
}

bool has_right_axis(const LineChart& c) {
  for (const Series& s : c.series) {
    if (s.right_axis) return true;
  }
  return false;
}

// The legend: one entry per series, in rows under the title.
struct Legend {
  struct Entry {
    double x;
    double y;
    const Series* s;
    std::string color;
  };
  std::vector<Entry> entries;  // entries[i] is c.series[i]
  double last_row = 0.0;       // the baseline of the last row
};

Legend lay_out_legend(const LineChart& c, double oy) {
  Legend legend;
  double lx = 64.0;
  double ly = oy + 40.0;
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const double width = 30.0 + kCharWidth * static_cast<double>(s.name.size()) + 18.0;
    if (lx + width > c.width - 16.0 && lx > 64.0) {
      lx = 64.0;
      ly += 16.0;
    }
    legend.entries.push_back(
        Legend::Entry{lx, ly, &s, s.color.empty() ? kPalette[i % kPaletteSize] : s.color});
    lx += width;
  }
  legend.last_row = ly;
  return legend;
}

// The plot area of a chart and the scales that map data into it.
struct Plot {
  double left = 0, right = 0, top = 0, bottom = 0;
  bool has_y2 = false;
  Range x, y, y2;
  std::vector<double> xt, yt, y2t;  // ticks

  [[nodiscard]] double px(double v) const {
    return left + (v - x.lo) / (x.hi - x.lo) * (right - left);
  }
  [[nodiscard]] double py(double v) const {
    return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top);
  }
  [[nodiscard]] double py2(double v) const {
    return bottom - (v - y2.lo) / (y2.hi - y2.lo) * (bottom - top);
  }
};

// The chart's plot area below its title and legend, with axes settled on the data.
Plot lay_out_plot(const LineChart& c, double oy, const Legend& legend) {
  Plot p;
  p.has_y2 = has_right_axis(c);
  p.left = 64.0;
  p.right = c.width - (p.has_y2 ? 64.0 : 24.0);
  p.top = (legend.entries.empty() ? oy + 34.0 : legend.last_row + 14.0);
  p.bottom = oy + c.height - 44.0;
  for (const Series& s : c.series) {
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.y[i])) continue;
      p.x.add(s.x[i]);
      (s.right_axis ? p.y2 : p.y).add(s.y[i]);
    }
  }
  for (const Span& sp : c.spans) {
    p.x.add(sp.from);
    p.x.add(sp.to);
  }
  p.xt = settle(p.x, c.x, false);
  p.yt = settle(p.y, c.y, true);
  p.y2t = p.has_y2 ? settle(p.y2, c.y2, true) : std::vector<double>{};
  return p;
}

// Shaded spans with their labels; drawn first, under everything else.
void draw_spans(std::string& out, const LineChart& c, const Plot& p) {
  for (const Span& sp : c.spans) {
    const double x0 = std::clamp(p.px(std::min(sp.from, sp.to)), p.left, p.right);
    const double x1 = std::clamp(p.px(std::max(sp.from, sp.to)), p.left, p.right);
    out += "<rect x=\"" + num(x0) + "\" y=\"" + num(p.top) + "\" width=\"" + num(x1 - x0) +
           "\" height=\"" + num(p.bottom - p.top) + "\" fill=\"" + escape(sp.color) +
           "\" fill-opacity=\"" + opacity(sp.opacity) + "\"/>\n";
    if (!sp.label.empty()) {
      text(out, x0 + 4.0, p.top + 12.0, sp.label, "start", " class=\"span\"");
    }
  }
}

// Grid lines, ticks and their labels, the frame, and the axis labels.
void draw_axes(std::string& out, const LineChart& c, const Plot& p) {
  for (double v : p.yt) {
    const double y = p.py(v);
    out += "<line x1=\"" + num(p.left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(p.right) +
           "\" y2=\"" + num(y) + "\" class=\"grid\"/>\n";
    text(out, p.left - 6.0, y + 4.0, label(v, tick_step(p.yt)), "end");
  }
  for (double v : p.y2t)
    text(out, p.right + 6.0, p.py2(v) + 4.0, label(v, tick_step(p.y2t)), "start");
  for (double v : p.xt) {
    const double x = p.px(v);
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(p.bottom) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(p.bottom + 4.0) + "\" class=\"axis\"/>\n";
    text(out, x, p.bottom + 16.0, label(v, tick_step(p.xt)), "middle");
  }
  out += "<rect x=\"" + num(p.left) + "\" y=\"" + num(p.top) + "\" width=\"" +
         num(p.right - p.left) + "\" height=\"" + num(p.bottom - p.top) + "\" class=\"frame\"/>\n";
  if (!c.x.label.empty()) text(out, (p.left + p.right) / 2.0, p.bottom + 34.0, c.x.label, "middle");
  if (!c.y.label.empty()) {
    const double cy = (p.top + p.bottom) / 2.0;
    text(out, 16.0, cy, c.y.label, "middle",
         (" transform=\"rotate(-90 16 " + num(cy) + ")\"").c_str());
  }
  if (p.has_y2 && !c.y2.label.empty()) {
    const double cy = (p.top + p.bottom) / 2.0;
    const double x = c.width - 12.0;
    text(out, x, cy, c.y2.label, "middle",
         (" transform=\"rotate(90 " + num(x) + " " + num(cy) + ")\"").c_str());
  }
}

// The series: one polyline per run of finite points, clipped to the plot area.
void draw_lines(std::string& out, const LineChart& c, const Plot& p, const Legend& legend,
                const std::string& clip) {
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const std::string& color = legend.entries[i].color;
    const std::string style = "fill=\"none\" stroke=\"" + escape(color) + "\" stroke-width=\"" +
                              num(s.width) + "\"" + (s.dashed ? " stroke-dasharray=\"6 4\"" : "") +
                              " stroke-linejoin=\"round\"";
    const std::size_t n = std::min(s.x.size(), s.y.size());
    std::string points;
    auto flush = [&] {
      if (!points.empty()) {
        out += "<polyline clip-path=\"url(#" + clip + ")\" " + style + " points=\"" + points +
               "\"/>\n";
      }
      points.clear();
    };
    for (std::size_t k = 0; k < n; ++k) {
      if (!std::isfinite(s.y[k]) || !std::isfinite(s.x[k])) {
        flush();
        continue;
      }
      if (!points.empty()) points += ' ';
      points += num(p.px(s.x[k])) + "," + num(s.right_axis ? p.py2(s.y[k]) : p.py(s.y[k]));
    }
    flush();
  }
}

void draw_legend(std::string& out, const Legend& legend, bool has_y2) {
  for (const Legend::Entry& e : legend.entries) {
    out += "<line x1=\"" + num(e.x) + "\" y1=\"" + num(e.y - 4.0) + "\" x2=\"" + num(e.x + 22.0) +
           "\" y2=\"" + num(e.y - 4.0) + "\" stroke=\"" + escape(e.color) +
           "\" stroke-width=\"3\"" + (e.s->dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    text(out, e.x + 28.0, e.y, e.s->name + (e.s->right_axis && has_y2 ? " (right)" : ""), "start");
  }
}

// Chart number `index` of a document, its top at `oy`.
void render_chart(std::string& out, const LineChart& c, int index, double oy) {
  const Legend legend = lay_out_legend(c, oy);
  const Plot p = lay_out_plot(c, oy, legend);
  const std::string clip = "plot" + std::to_string(index);
  out += "<g>\n";
  out += "<clipPath id=\"" + clip + "\"><rect x=\"" + num(p.left) + "\" y=\"" + num(p.top) +
         "\" width=\"" + num(p.right - p.left) + "\" height=\"" + num(p.bottom - p.top) +
         "\"/></clipPath>\n";
  if (!c.title.empty()) {
    text(out, c.width / 2.0, oy + 20.0, c.title, "middle", " class=\"title\"");
  }
  draw_spans(out, c, p);
  draw_axes(out, c, p);
  draw_lines(out, c, p, legend, clip);
  draw_legend(out, legend, p.has_y2);
  out += "</g>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo) || target < 1) return ticks;
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0; i < 1000; ++i) {
    const double v = first + step * i;
    if (v > hi + step * 1e-9) break;
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string render(std::span<const LineChart> charts) {
  int width = 0;
  int height = 0;
  for (const LineChart& c : charts) {
    width = std::max(width, c.width);
    height += c.height;
  }
  std::string out;
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out +=
      "<style>.title{font-size:14px;font-weight:bold}.span{fill:#7a4a1a}"
      ".grid{stroke:#e3e3e3;stroke-width:1}.axis{stroke:#444;stroke-width:1}"
      ".frame{fill:none;stroke:#444;stroke-width:1}text{fill:#222}</style>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  double oy = 0.0;
  int index = 0;
  for (const LineChart& c : charts) {
    render_chart(out, c, index++, oy);
    oy += c.height;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace holdfast::svg
