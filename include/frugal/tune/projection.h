// The projection of a whole run from measured pieces (`frugal plan`, docs/plan.md): wall time,
// dollars on demand and on spot, kWh and kg CO2, each as a range. Pure arithmetic, no torch: the
// probe that measures the pieces is tune/plan.h, and tests feed this one injected figures.
//
// The model of a run's billed time (the process's, from its launch to its exit):
//
//   T = launch + start-up + first step + (steps - 1) x step + evals x eval + saves x save + finish
//
// where `eval` is one evaluation, `save` the trainer's stall for one checkpoint and `finish` what
// follows the last step besides the final evaluation and save (summary, final weights, the
// report, an async write still in flight). Counts follow the trainer's rules: an evaluation every
// train.eval_every steps plus the final one unless the last step had one; a checkpoint on
// checkpoint.every_steps, every_minutes or the Young-Daly interval, plus the final one.
//
// The range. The step time's central value is the median of the measured steps; its low and high
// are the lowest and highest median of the probe's quarters (a machine that drifts during the
// probe widens it), and never closer to the median than `margin` (the drift between the probe and
// the run, which a probe cannot see: docs/plan.md has the figures measured on this machine). Every
// other term gets +-margin. Terms are summed end by end (low with low): the dominant error, the
// machine's speed, moves them together. Figures scaled from another machine by peak FLOP/s
// (`compute_scale`) widen by `scale_spread` each way.
//
// Spot: preemptions arrive at rate 1 / MTBF without a usable notice (the Young-Daly assumption).
// Each costs the work since the last checkpoint (half the interval on average; the whole run so
// far without checkpoints) plus a restart (launch + start-up + reading the checkpoint, taken as
// one save). To first order the expected time is T / (1 - (interval / 2 + restart) / MTBF); the
// low end has no preemption, the high end the 90th percentile of the Poisson count over the high
// time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

struct Range {
  double low = 0, central = 0, high = 0;
};

// The price of a machine (on demand and spot), its power draw and the grid's carbon intensity.
struct MachinePrices {
  std::string name;              // price-table row or "" (budget.usd_per_hour given directly)
  double usd_per_hour = 0;       // on demand; 0 = unknown
  double spot_usd_per_hour = 0;  // 0 = unknown or not offered
  double watts = 0;              // 0 = unknown (no kWh, no CO2)
  double grid_g_per_kwh = 0;
};

struct ProjectionInputs {
  int64_t steps = 0;            // optimizer steps to project (train.steps)
  std::vector<double> step_s;   // measured seconds per step, in order (warm-up step excluded)
  double first_step_s = -1;     // the warm-up step (allocations, first touch); < 0 = a median step
  double launch_s = 0;          // process start until the Trainer is constructed
  double startup_s = 0;         // the Trainer's start-up (data, model, peak probe, run directory)
  double eval_s = 0;            // one evaluation (train.eval_batches batches)
  int64_t eval_every = 0;       // train.eval_every; 0 = the final evaluation only
  double save_s = 0;            // the trainer's stall for one checkpoint
  CheckpointConfig checkpoint;  // enabled, every_steps, every_minutes, auto_interval, mtbf_minutes
  double finish_s = 0;          // after the last step, besides the final evaluation and save
  double margin = 0.10;         // smallest relative half-width of every term's range (>= 0)
  // Figures measured on another machine: step and evaluation times x compute_scale (peak FLOP/s
  // where they were measured / peak FLOP/s of the target), their range widened by scale_spread
  // each way (>= 1).
  double compute_scale = 1;
  double scale_spread = 1;
  MachinePrices prices;
  double mtbf_s = 0;  // spot: mean seconds between preemptions; 0 = no preemptions
};

// Time, money and energy of one way to rent the machine.
struct Scenario {
  bool priced = false;  // a price is known
  double usd_per_hour = 0;
  Range seconds, usd, kwh, kg_co2;
  double expected_preemptions = 0;  // over the central time
  double lost_s = 0;                // expected seconds lost to preemptions (central - no-preemption)
  bool converges = true;            // false: a preemption costs more than the MTBF; never finishes
};

struct Projection {
  // The terms, central seconds.
  double launch_s = 0, startup_s = 0, first_step_s = 0, steps_s = 0, evals_s = 0, saves_s = 0, finish_s = 0;
  Range step_s;                      // one step (after scaling)
  double probe_spread = 0;           // relative: (highest - lowest quarter median) / median
  int64_t evals = 0;                 // every evaluation, the final one included
  int64_t saves = 0;                 // every checkpoint, the final one included
  double checkpoint_interval_s = 0;  // seconds between saves during training; 0 = no save before the end
  double young_daly_s = 0;           // sqrt(2 x save x MTBF) for the measured save stall (0 = no MTBF)
  double restart_s = 0;              // a preemption's restart: launch + start-up (+ one save to read)
  // Start-up, steps, evaluations and saves: the share summary.json's startup_s + wall_s measure
  // (launch and finish fall outside them).
  Range trainer_seconds;
  Scenario on_demand, spot;
};

// REQUIRES: step_s non-empty unless steps == 0; every figure >= 0; margin >= 0; scale_spread >= 1.
// Throws InternalError otherwise (the caller measured them).
Projection project_run(const ProjectionInputs& in);

// The median of `v` (0 for an empty one).
double median_of(std::vector<double> v);
// Lowest and highest median over `parts` consecutive, near-equal parts of `v` (fewer parts when
// `v` is shorter); {median, median} for fewer than two samples.
std::pair<double, double> part_median_range(const std::vector<double>& v, int parts = 4);
// Evaluations of a run of `steps` steps: one every `eval_every` and the final one.
int64_t evaluation_count(int64_t steps, int64_t eval_every);
// The smallest k with P(Poisson(mean) <= k) >= q.
int64_t poisson_quantile(double mean, double q);

}  // namespace frugal
