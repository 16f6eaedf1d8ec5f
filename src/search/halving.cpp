// Successive halving; see halving.h.
#include "frugal/search/halving.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "frugal/core/errors.h"

namespace frugal {

std::vector<int64_t> rung_steps_for(int64_t max_steps, int64_t rungs, double eta) {
  if (rungs < 1) throw ConfigError(fmt::format("search.rungs = {}: need at least 1", rungs));
  if (!(eta > 1)) throw ConfigError(fmt::format("search.eta = {}: must be greater than 1", eta));
  std::vector<int64_t> steps;
  for (int64_t k = 0; k < rungs; ++k) {
    const double s = static_cast<double>(max_steps) / std::pow(eta, static_cast<double>(rungs - 1 - k));
    steps.push_back(static_cast<int64_t>(std::llround(s)));
  }
  for (size_t k = 0; k < steps.size(); ++k)
    if (steps[k] < 1 || (k > 0 && steps[k] <= steps[k - 1]))
      throw ConfigError(
          fmt::format("search: {} rungs with eta = {} over train.steps = {} give rung steps {}, "
                      "which are not increasing from 1 up; use fewer rungs, a smaller eta or "
                      "more train.steps (or list search.rung_steps)",
                      rungs, eta, max_steps, fmt::join(steps, ", ")));
  return steps;
}

int64_t survivors(int64_t ran, double eta) {
  if (ran <= 0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(ran) / eta)));
}

HalvingSchedule halving_schedule(int64_t trials, const std::vector<int64_t>& rung_steps, double eta) {
  HalvingSchedule p;
  p.steps = rung_steps;
  int64_t n = trials, prev = 0;
  for (size_t k = 0; k < rung_steps.size(); ++k) {
    p.trials.push_back(n);
    p.trial_steps += n * (rung_steps[k] - prev);
    p.trial_rungs += n;
    prev = rung_steps[k];
    n = survivors(n, eta);
  }
  p.full_trial_steps = rung_steps.empty() ? 0 : trials * rung_steps.back();
  return p;
}

double not_reached_metric(MetricMode mode) { return mode == MetricMode::kMin ? 1e300 : -1e300; }
bool is_not_reached(double metric) { return std::fabs(metric) >= 1e300; }

namespace {
// Whether a is better than b (both finite).
bool better(double a, double b, MetricMode mode) { return mode == MetricMode::kMin ? a < b : a > b; }
}  // namespace

RungDecision decide_rung(int64_t rung, std::vector<RungEntry> entries, double eta, MetricMode mode) {
  std::sort(entries.begin(), entries.end(), [mode](const RungEntry& a, const RungEntry& b) {
    const bool fa = std::isfinite(a.metric), fb = std::isfinite(b.metric);
    if (fa != fb) return fa;
    if (fa && a.metric != b.metric) return better(a.metric, b.metric, mode);
    return a.id < b.id;
  });
  RungDecision d;
  d.rung = rung;
  int64_t keep = survivors(static_cast<int64_t>(entries.size()), eta);
  for (const auto& e : entries) {
    d.ranked.push_back(e.id);
    if (keep > 0 && std::isfinite(e.metric) && e.can_continue) {
      d.promoted.push_back(e.id);
      --keep;
    } else {
      d.stopped.push_back(e.id);
    }
  }
  return d;
}

std::vector<std::string> rank_standings(std::vector<Standing> standings, MetricMode mode) {
  std::sort(standings.begin(), standings.end(), [mode](const Standing& a, const Standing& b) {
    const bool fa = a.rung >= 0 && std::isfinite(a.metric), fb = b.rung >= 0 && std::isfinite(b.metric);
    if (fa != fb) return fa;
    if (fa && a.rung != b.rung) return a.rung > b.rung;
    if (fa && a.metric != b.metric) return better(a.metric, b.metric, mode);
    if (fa && a.cost != b.cost) return a.cost < b.cost;
    return a.id < b.id;
  });
  std::vector<std::string> ids;
  for (const auto& s : standings) ids.push_back(s.id);
  return ids;
}

std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& points) {
  std::vector<size_t> order;
  for (size_t i = 0; i < points.size(); ++i)
    if (std::isfinite(points[i].first) && std::isfinite(points[i].second)) order.push_back(i);
  // By the first coordinate, then the second: a point is on the front when its second coordinate
  // beats every one before it.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (points[a].first != points[b].first) return points[a].first < points[b].first;
    if (points[a].second != points[b].second) return points[a].second < points[b].second;
    return a < b;
  });
  std::vector<size_t> front;
  double best = INFINITY;
  for (size_t i : order) {
    if (points[i].second < best) {
      front.push_back(i);
      best = points[i].second;
    }
  }
  return front;
}

}  // namespace frugal
