// The projection of a whole run from measured pieces; see projection.h.
#include "frugal/tune/projection.h"

#include <algorithm>
#include <cmath>

#include "frugal/ckpt/cadence.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/cost_meter.h"

namespace frugal {

namespace {

// A term measured once: +-margin around it.
Range around(double x, double margin) { return {x * (1 - margin), x, x * (1 + margin)}; }

Range scaled(Range r, double scale, double spread) {
  return {r.low * scale / spread, r.central * scale, r.high * scale * spread};
}

Range times(Range r, double n) { return {r.low * n, r.central * n, r.high * n}; }

Range operator+(Range a, Range b) { return {a.low + b.low, a.central + b.central, a.high + b.high}; }

// Seconds between saves during training (0 = none before the end) and the total saves, the final
// one included, for `train_s` seconds of training (steps and evaluations) over `steps` steps, the
// first taking first_step_s.
struct SaveCount {
  double interval_s = 0;
  int64_t saves = 0;
};
SaveCount count_saves(const CheckpointConfig& c, int64_t steps, double train_s, double first_step_s, double save_s) {
  SaveCount out;
  if (!c.enabled || steps <= 0) return out;
  const double per_step = train_s / static_cast<double>(steps);
  double time_rule = 0;  // the time rule's interval (0 = off)
  if (c.auto_interval)
    time_rule = young_daly_interval_s(std::max(save_s, 1e-3), c.mtbf_minutes * 60);
  else if (c.every_minutes > 0)
    time_rule = c.every_minutes * 60;
  const double step_rule = c.every_steps > 0 ? static_cast<double>(c.every_steps) * per_step : 0;
  out.interval_s = step_rule > 0 && (time_rule <= 0 || step_rule <= time_rule) ? step_rule : time_rule;
  // The count: the trainer's own rule (checkpoint_due) stepped through the run, each step taking
  // its share of the time (evaluations spread out), each save restarting the time rule's clock,
  // and the final save unless the last step saved. A closed form misses where the rules interleave
  // or a time interval is not a whole number of steps.
  const double first = std::min(std::max(first_step_s, 0.0), train_s);
  const double later = steps > 1 ? (train_s - first) / static_cast<double>(steps - 1) : 0;
  CadenceInput in;
  for (int64_t step = 1; step <= steps; ++step) {
    in.step = step;
    in.since_save_s += step == 1 ? first : later;
    if (checkpoint_due(c, in)) {
      ++out.saves;
      in.last_save_step = step;
      in.since_save_s = 0;
      in.last_stall_s = save_s;
    }
  }
  if (in.last_save_step != steps) ++out.saves;  // the final save
  return out;
}

void price(Scenario& s, double usd_per_hour, const MachinePrices& p) {
  s.priced = usd_per_hour > 0;
  s.usd_per_hour = usd_per_hour;
  auto at = [&](double seconds) { return cost_at(seconds, 1, 1, usd_per_hour, p.watts, p.grid_g_per_kwh); };
  const CostFigures lo = at(s.seconds.low), mid = at(s.seconds.central), hi = at(s.seconds.high);
  s.usd = {lo.usd, mid.usd, hi.usd};
  s.kwh = {lo.kwh, mid.kwh, hi.kwh};
  s.kg_co2 = {lo.kg_co2, mid.kg_co2, hi.kg_co2};
}

// Spot: the same run with preemptions at rate 1 / mtbf_s (see projection.h).
Scenario with_preemptions(const Range& t, const Projection& p, double mtbf_s) {
  Scenario s;
  s.seconds = t;
  if (mtbf_s <= 0) return s;
  // Work since the last save; no more than the run itself.
  const double interval = p.checkpoint_interval_s > 0 ? std::min(p.checkpoint_interval_s, t.central) : t.central;
  const double per_preemption = interval / 2 + p.restart_s;
  if (per_preemption >= mtbf_s) {
    s.converges = false;
    s.seconds = {t.low, INFINITY, INFINITY};
    return s;
  }
  s.seconds.central = t.central / (1 - per_preemption / mtbf_s);
  s.expected_preemptions = s.seconds.central / mtbf_s;
  s.lost_s = s.seconds.central - t.central;
  const double interval_high = p.checkpoint_interval_s > 0 ? std::min(p.checkpoint_interval_s, t.high) : t.high;
  s.seconds.high =
      t.high + static_cast<double>(poisson_quantile(t.high / mtbf_s, 0.9)) * (interval_high / 2 + p.restart_s);
  s.seconds.high = std::max(s.seconds.high, s.seconds.central);
  return s;
}

}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::pair<double, double> part_median_range(const std::vector<double>& v, int parts) {
  const double all = median_of(v);
  const size_t k = std::min(v.size(), static_cast<size_t>(std::max(parts, 1)));
  if (v.size() < 2 || k < 2) return {all, all};
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < k; ++i) {
    const size_t from = i * v.size() / k, to = (i + 1) * v.size() / k;
    const double m = median_of(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(from),
                                                   v.begin() + static_cast<std::ptrdiff_t>(to)));
    lo = std::min(lo, m);
    hi = std::max(hi, m);
  }
  return {lo, hi};
}

int64_t evaluation_count(int64_t steps, int64_t eval_every) {
  if (steps <= 0) return 1;
  if (eval_every <= 0) return 1;
  return (steps + eval_every - 1) / eval_every;  // the final one replaces none when steps % every == 0
}

int64_t poisson_quantile(double mean, double q) {
  if (mean <= 0) return 0;
  double p = std::exp(-mean), cdf = p;
  int64_t k = 0;
  while (cdf < q && k < 1000000) {
    ++k;
    p *= mean / static_cast<double>(k);
    cdf += p;
  }
  return k;
}

Projection project_run(const ProjectionInputs& in) {
  FRUGAL_INTERNAL_ASSERT(in.steps == 0 || !in.step_s.empty(), "project_run needs measured step times");
  FRUGAL_INTERNAL_ASSERT(in.margin >= 0 && in.scale_spread >= 1 && in.compute_scale > 0,
                         "project_run: margin >= 0, scale_spread >= 1, compute_scale > 0");
  for (double x : in.step_s) FRUGAL_INTERNAL_ASSERT(x >= 0 && std::isfinite(x), "project_run: a step time < 0");
  Projection p;
  const double m = median_of(in.step_s);
  const auto [part_lo, part_hi] = part_median_range(in.step_s);
  p.probe_spread = m > 0 ? (part_hi - part_lo) / m : 0;
  const Range step = scaled({std::min(part_lo, m * (1 - in.margin)), m, std::max(part_hi, m * (1 + in.margin))},
                            in.compute_scale, in.scale_spread);
  p.step_s = step;
  const Range first =
      scaled(around(in.first_step_s >= 0 ? in.first_step_s : m, in.margin), in.compute_scale, in.scale_spread);
  const Range eval = scaled(around(in.eval_s, in.margin), in.compute_scale, in.scale_spread);
  const double later_steps = static_cast<double>(std::max<int64_t>(0, in.steps - 1));
  p.evals = evaluation_count(in.steps, in.eval_every);
  const Range training =
      (in.steps > 0 ? first : Range{}) + times(step, later_steps) + times(eval, static_cast<double>(p.evals));
  const SaveCount saves = count_saves(in.checkpoint, in.steps, training.central, first.central, in.save_s);
  p.saves = saves.saves;
  p.checkpoint_interval_s = saves.interval_s;
  p.young_daly_s = in.mtbf_s > 0 ? young_daly_interval_s(std::max(in.save_s, 1e-3), in.mtbf_s) : 0;
  p.trainer_seconds =
      training + around(in.startup_s, in.margin) + times(around(in.save_s, in.margin), static_cast<double>(p.saves));
  const Range total = p.trainer_seconds + around(in.launch_s, in.margin) + around(in.finish_s, in.margin);
  p.launch_s = in.launch_s;
  p.startup_s = in.startup_s;
  p.first_step_s = in.steps > 0 ? first.central : 0;
  p.steps_s = step.central * later_steps;
  p.evals_s = eval.central * static_cast<double>(p.evals);
  p.saves_s = in.save_s * static_cast<double>(p.saves);
  p.finish_s = in.finish_s;
  p.restart_s = in.launch_s + in.startup_s + (in.checkpoint.enabled ? in.save_s : 0);
  p.on_demand.seconds = total;
  price(p.on_demand, in.prices.usd_per_hour, in.prices);
  p.spot = with_preemptions(total, p, in.mtbf_s);
  price(p.spot, in.prices.spot_usd_per_hour, in.prices);
  return p;
}

}  // namespace frugal
