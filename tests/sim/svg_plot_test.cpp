#include "svg_plot.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace holdfast::svg {
namespace {

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

Series series(std::string name, std::vector<double> x, std::vector<double> y) {
  Series s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

TEST(SvgPlot, TicksAreRoundNumbersCoveringTheRange) {
  EXPECT_EQ(nice_ticks(0, 150), (std::vector<double>{0, 20, 40, 60, 80, 100, 120, 140}));
  EXPECT_EQ(nice_ticks(0, 1), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  const std::vector<double> t = nice_ticks(0.9, 4.3);
  ASSERT_FALSE(t.empty());
  EXPECT_GE(t.front(), 0.9);
  EXPECT_LE(t.back(), 4.3);
  EXPECT_TRUE(nice_ticks(5, 5).empty());
  EXPECT_TRUE(nice_ticks(0, NAN).empty());
}

TEST(SvgPlot, TextIsEscaped) {
  EXPECT_EQ(escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  LineChart c;
  c.title = "naive <retry> & friends";
  c.series.push_back(series("x<y", {0, 1}, {0, 1}));
  const std::string svg = render(c);
  EXPECT_NE(svg.find("naive &lt;retry&gt; &amp; friends"), std::string::npos);
  EXPECT_NE(svg.find("x&lt;y"), std::string::npos);
  EXPECT_EQ(svg.find("<retry>"), std::string::npos);
}

TEST(SvgPlot, AChartHasItsTitleAxesLegendSpansAndOneLinePerSeries) {
  LineChart c;
  c.title = "Goodput";
  c.x.label = "time (s)";
  c.y.label = "requests/s";
  c.series.push_back(series("none", {0, 1, 2, 3}, {10, 20, 30, 40}));
  c.series.push_back(series("holdfast", {0, 1, 2, 3}, {10, 10, 10, 10}));
  Span trigger;
  trigger.from = 1;
  trigger.to = 2;
  trigger.label = "trigger active";
  c.spans.push_back(trigger);
  const std::string svg = render(c);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  for (const char* text :
       {">Goodput<", ">time (s)<", ">requests/s<", ">none<", ">holdfast<", ">trigger active<"}) {
    EXPECT_NE(svg.find(text), std::string::npos) << text;
  }
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  // The y axis starts at zero for non-negative data and ends on a tick above the data.
  EXPECT_NE(svg.find(">0<"), std::string::npos);
  EXPECT_NE(svg.find(">40<"), std::string::npos);
  // Distinct palette colours.
  EXPECT_NE(svg.find("#1f77b4"), std::string::npos);
  EXPECT_NE(svg.find("#d62728"), std::string::npos);
}

TEST(SvgPlot, ANaNLeavesAGap) {
  LineChart c;
  c.series.push_back(series("gappy", {0, 1, 2, 3, 4}, {1, 2, NAN, 4, 5}));
  EXPECT_EQ(count(render(c), "<polyline"), 2u);
}

TEST(SvgPlot, ASecondAxisGetsItsOwnTicksAndLabel) {
  LineChart c;
  c.y.label = "requests/s";
  c.y2.label = "fraction open";
  c.series.push_back(series("goodput", {0, 10}, {0, 1000}));
  Series open = series("open", {0, 10}, {0, 1});
  open.right_axis = true;
  c.series.push_back(open);
  const std::string svg = render(c);
  EXPECT_NE(svg.find(">fraction open<"), std::string::npos);
  EXPECT_NE(svg.find("open (right)"), std::string::npos);
  EXPECT_NE(svg.find(">0.2<"), std::string::npos);   // a right-axis tick
  EXPECT_NE(svg.find(">1000<"), std::string::npos);  // a left-axis tick
  // Without a right-axis series there is no second axis.
  LineChart one;
  one.y2.label = "unused";
  one.series.push_back(series("a", {0, 1}, {0, 1}));
  EXPECT_EQ(render(one).find("unused"), std::string::npos);
}

TEST(SvgPlot, ChartsStackIntoOneDocumentAndRenderingIsDeterministic) {
  LineChart a;
  a.title = "first";
  a.height = 200;
  a.series.push_back(series("s", {0, 1}, {0, 1}));
  LineChart b = a;
  b.title = "second";
  b.height = 300;
  const std::vector<LineChart> charts = {a, b};
  const std::string svg = render(charts);
  EXPECT_NE(svg.find("height=\"500\""), std::string::npos);
  EXPECT_NE(svg.find(">first<"), std::string::npos);
  EXPECT_NE(svg.find(">second<"), std::string::npos);
  EXPECT_NE(svg.find("clipPath id=\"plot0\""), std::string::npos);
  EXPECT_NE(svg.find("clipPath id=\"plot1\""), std::string::npos);
  EXPECT_EQ(svg, render(charts));
}

TEST(SvgPlot, EmptyAndFlatDataStillRender) {
  LineChart empty;
  EXPECT_EQ(count(render(empty), "</svg>"), 1u);
  LineChart flat;
  flat.series.push_back(series("flat", {0, 1, 2}, {5, 5, 5}));
  const std::string svg = render(flat);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

}  // namespace
}  // namespace holdfast::svg
