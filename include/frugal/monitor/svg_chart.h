// The SVG charts and the page style of frugal's self-contained HTML pages (report.html,
// search.html): no scripts, no network, round ticks (report.h's nice_ticks), 560 x 260 px charts.
// One place draws them, so every page looks alike.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace frugal::chart {

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y values are left out
};

// HTML text with <, >, &, " and ' escaped (safe in text and in either kind of quoted attribute).
std::string escape(const std::string& s);

// The CSS of the pages (the inside of a <style> element).
std::string page_style();

// Lines through each series' points, x titled `xl` ("step" in the run report).
std::string line_chart(const std::string& id, const std::string& title, const std::string& yl,
                       const std::vector<Series>& series, bool zero_y = false, const std::string& xl = "step");

// Stacked bars: one bar per point of the first series, segments in series order.
std::string stacked_chart(const std::string& id, const std::string& title, const std::string& yl,
                          const std::vector<Series>& series);

// A labelled point of a scatter chart.
struct Point {
  double x = 0, y = 0;
  std::string label;  // shown on hover (an SVG <title>) and as data-label
};
struct PointSeries {
  std::string name;
  std::string color;
  std::vector<Point> points;
  std::vector<std::pair<double, double>> line;  // drawn joined in the series' colour (a Pareto front); may be empty
};

// Points per series, with an optional line per series; x titled `xl`. Values of y above y_clip (NaN =
// none) are drawn hollow at y_clip, so that a few far-off points (a diverged trial) do not flatten
// the rest; their labels keep the value.
std::string scatter_chart(const std::string& id, const std::string& title, const std::string& xl, const std::string& yl,
                          const std::vector<PointSeries>& series, double y_clip = NAN);

}  // namespace frugal::chart
