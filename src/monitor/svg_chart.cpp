// SVG charts and the page style; see svg_chart.h. The charts of report.html were drawn here first.
#include "frugal/monitor/svg_chart.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "frugal/monitor/report.h"  // nice_ticks, format_tick

namespace frugal::chart {

namespace {

std::string escape_html(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':  // attributes in single quotes (the live page's no-script refresh link)
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

constexpr double kW = 560, kH = 260, kLeft = 64, kRight = 12, kTop = 28, kBottom = 36;

// Axes with round ticks (nice_ticks) and titles clear of the tick labels; maps data to pixels.
struct Frame {
  double x0, x1, y0, y1;
  std::vector<double> xt, yt;  // tick values; x0..x1 and y0..y1 run from the first tick to the last
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); }
  double py(double y) const { return kH - kBottom - (y - y0) / (y1 - y0) * (kH - kTop - kBottom); }
  std::string axes(const std::string& title, const std::string& xl, const std::string& yl) const {
    std::string s = fmt::format(
        "<text x='{}' y='18' class='title'>{}</text><line x1='{}' y1='{}' x2='{}' y2='{}' class='axis'/>"
        "<line x1='{}' y1='{}' x2='{}' y2='{}' class='axis'/>",
        kLeft, escape_html(title), kLeft, kH - kBottom, kW - kRight, kH - kBottom, kLeft, kTop, kLeft, kH - kBottom);
    const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
    for (double xv : xt)
      s += fmt::format("<text x='{:.1f}' y='{}' class='tick' data-axis='x' text-anchor='middle'>{}</text>", px(xv),
                       kH - kBottom + 13, format_tick(xv, xstep));
    for (double yv : yt) {
      s += fmt::format("<text x='{}' y='{:.1f}' class='tick' data-axis='y' text-anchor='end'>{}</text>", kLeft - 4,
                       py(yv) + 4, format_tick(yv, ystep));
      s += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' class='grid'/>", kLeft, py(yv), kW - kRight,
                       py(yv));
    }
    // Axis titles: below the x tick labels, and left of the widest y tick label (at most 6
    // characters, ~36 px at 10 px).
    s += fmt::format("<text x='{}' y='{}' class='axis-title' text-anchor='middle'>{}</text>", (kLeft + kW) / 2, kH - 4,
                     escape_html(xl));
    s += fmt::format(
        "<text x='10' y='{}' class='axis-title' transform='rotate(-90 10 {})' text-anchor='middle'>{}</text>",
        (kTop + kH - kBottom) / 2, (kTop + kH - kBottom) / 2, escape_html(yl));
    return s;
  }
};

Frame frame_for(const std::vector<Series>& series, bool zero_y) {
  Frame f{1e300, -1e300, 1e300, -1e300, {}, {}};
  for (const auto& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      f.x0 = std::min(f.x0, x), f.x1 = std::max(f.x1, x);
      f.y0 = std::min(f.y0, y), f.y1 = std::max(f.y1, y);
    }
  if (f.x0 > f.x1) f = {0, 1, 0, 1, {}, {}};
  if (zero_y) f.y0 = std::min(0.0, f.y0);
  if (zero_y && f.y0 == 0 && f.y1 == 0) f.y1 = 1;  // all zero (no price: $0): 0 at the bottom, not mid-chart
  f.xt = nice_ticks(f.x0, f.x1, 6);
  f.yt = nice_ticks(f.y0, f.y1, 5);
  f.x0 = f.xt.front(), f.x1 = f.xt.back();
  f.y0 = f.yt.front(), f.y1 = f.yt.back();
  return f;
}

// Legend swatches, right-aligned beside the title; two rows when there are more than three.
std::string legend(const std::vector<std::pair<std::string, std::string>>& series, bool compact = false) {
  std::string s;
  const size_t per_row = series.size() > 3 ? (series.size() + 1) / 2 : series.size();
  const double w = compact || series.size() > 3 ? 80 : 130;
  for (size_t i = 0; i < series.size(); ++i) {
    const size_t row = i / per_row, col = i % per_row;
    const double x = kW - kRight - w * static_cast<double>(per_row) + w * static_cast<double>(col);
    const double y = 4 + 11 * static_cast<double>(row);
    s += fmt::format(
        "<rect x='{:.0f}' y='{:.0f}' width='9' height='9' fill='{}'/><text x='{:.0f}' y='{:.0f}' "
        "class='tick'>{}</text>",
        x, y, series[i].second, x + 12, y + 8, escape_html(series[i].first));
  }
  return s;
}

template <class S>
std::vector<std::pair<std::string, std::string>> names(const std::vector<S>& series) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& s : series) out.emplace_back(s.name, s.color);
  return out;
}

}  // namespace

std::string line_chart(const std::string& id, const std::string& title, const std::string& yl,
                       const std::vector<Series>& series, bool zero_y, const std::string& xl) {
  Frame f = frame_for(series, zero_y);
  std::string s =
      fmt::format("<svg id='{}' class='chart' viewBox='0 0 {} {}' width='{}' height='{}'>", id, kW, kH, kW, kH);
  s += f.axes(title, xl, yl) + legend(names(series));
  for (const auto& se : series) {
    std::string pts;
    int n = 0;
    double last_x = 0, last_y = 0;
    for (auto [x, y] : se.points)
      if (std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", last_x = f.px(x), last_y = f.py(y)), ++n;
    s += fmt::format("<polyline class='series' data-name='{}' fill='none' stroke='{}' stroke-width='2' points='{}'/>",
                     escape_html(se.name), se.color, pts);
    // A line needs two points: a series measured once (one evaluation) is drawn as a dot.
    if (n == 1)
      s += fmt::format("<circle class='point' data-name='{}' cx='{:.1f}' cy='{:.1f}' r='3.5' fill='{}'/>",
                       escape_html(se.name), last_x, last_y, se.color);
  }
  return s + "</svg>";
}

// Stacked bars: one bar per logged step, segments in series order.
std::string stacked_chart(const std::string& id, const std::string& title, const std::string& yl,
                          const std::vector<Series>& series) {
  std::vector<Series> totals{{"total", "", {}}};
  for (size_t i = 0; i < series.front().points.size(); ++i) {
    double sum = 0;
    for (const auto& se : series) sum += se.points[i].second;
    totals[0].points.push_back({series.front().points[i].first, sum});
  }
  Frame f = frame_for(totals, true);
  std::string s =
      fmt::format("<svg id='{}' class='chart' viewBox='0 0 {} {}' width='{}' height='{}'>", id, kW, kH, kW, kH);
  s += f.axes(title, "step", yl) + legend(names(series));
  const size_t n = series.front().points.size();
  const double bw = std::max(1.0, (kW - kLeft - kRight) / std::max<double>(1, static_cast<double>(n)) * 0.8);
  for (size_t i = 0; i < n; ++i) {
    double base = 0;
    for (const auto& se : series) {
      double x = se.points[i].first, h = se.points[i].second;
      s += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'/>", f.px(x) - bw / 2,
                       f.py(base + h), bw, std::max(0.0, f.py(base) - f.py(base + h)), se.color);
      base += h;
    }
  }
  return s + "</svg>";
}

std::string scatter_chart(const std::string& id, const std::string& title, const std::string& xl, const std::string& yl,
                          const std::vector<PointSeries>& series, double y_clip) {
  auto y_of = [&](double y) { return std::isfinite(y_clip) ? std::min(y, y_clip) : y; };
  std::vector<Series> all(1);
  for (const auto& se : series)
    for (const auto& p : se.points)
      if (std::isfinite(p.x)) all[0].points.emplace_back(p.x, y_of(p.y));
  Frame f = frame_for(all, false);
  std::string s =
      fmt::format("<svg id='{}' class='chart' viewBox='0 0 {} {}' width='{}' height='{}'>", id, kW, kH, kW, kH);
  s += f.axes(title, xl, yl) + legend(names(series), true);
  for (const auto& se : series) {
    std::string pts;
    for (auto [x, y] : se.line)
      if (std::isfinite(x) && std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", f.px(x), f.py(y_of(y)));
    if (!pts.empty())
      s += fmt::format(
          "<polyline class='front' data-name='{}' fill='none' stroke='{}' stroke-width='1.5' "
          "stroke-dasharray='4 3' points='{}'/>",
          escape_html(se.name), se.color, pts);
    for (const auto& p : se.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      const bool clipped = p.y > y_of(p.y);  // drawn hollow at the top edge
      s += fmt::format(
          "<circle class='point{}' data-series='{}' data-label='{}' cx='{:.1f}' cy='{:.1f}' r='4' "
          "fill='{}' stroke='{}'><title>{}</title></circle>",
          clipped ? " clipped" : "", escape_html(se.name), escape_html(p.label), f.px(p.x), f.py(y_of(p.y)),
          clipped ? "none" : se.color, se.color, escape_html(p.label));
    }
  }
  return s + "</svg>";
}

std::string escape(const std::string& s) { return escape_html(s); }

std::string page_style() {
  return R"(body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #ddd;background:#fff}
.title{font-weight:600;font-size:13px}.tick{font-size:10px;fill:#555}.axis-title{font-size:11px;fill:#333}.axis{stroke:#333}.grid{stroke:#eee}
table{border-collapse:collapse}th,td{padding:2px 10px;text-align:left;border-bottom:1px solid #eee}
#headline{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.card{border:1px solid #ddd;padding:6px 12px;min-width:110px}
.card .label{font-size:11px;color:#666}.card .figure{font-size:20px;font-weight:600}.card .unit{font-size:11px;color:#666}
.stop{padding:8px;background:#f4f4f4;border-left:4px solid #1f77b4}.live{border-left-color:#2ca02c}
.note{padding:8px;background:#fff4e5;border-left:4px solid #ff7f0e})";
}

}  // namespace frugal::chart
