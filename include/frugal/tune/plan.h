// `frugal plan`: what a run will cost before it is paid for (docs/plan.md). The figures the
// projection needs (tune/projection.h) come from one of:
//
//   a probe       (default) the configured run trains plan.probe_steps steps after one warm-up
//                 step through the real Trainer, in a temporary run directory, quietly, with its
//                 own evaluation and checkpoint settings: its start-up, every step's wall time
//                 (evaluations and saves taken out), one evaluation, one save's stall and what
//                 follows the last step are measured. plan.max_probe_s bounds the steps' time.
//   a run         (from_run) a finished or partial run directory: the step time of each log
//                 window of metrics.jsonl, its evaluations, and summary.json's start-up, save
//                 stall and end (a partial run estimates the start-up and end).
//
// and are projected onto the configured run (train.steps, the cadences, the price) on this
// machine, or onto a price-table instance (instance): step and evaluation times scaled by the
// ratio of peak FLOP/s (measured here, the instance's configured peak_tflops there), a rough
// model whose range widens by kCrossMachineSpread each way.
//
// `frugal train` with plan.before_train makes the same plan first, shows it in the banner, refuses
// to start (GuardStop, exit 3) when budget.limit_usd is below the central projected cost, and
// records projected against measured in summary.json ("plan").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/callback.h"
#include "frugal/core/config_loader.h"
#include "frugal/tune/projection.h"

namespace frugal {

// How far apart a projection onto another machine by peak FLOP/s may be, each way: a small model
// is bound by memory and launch latency long before FLOP/s, so the ratio of peaks is an upper
// bound on the speed-up, not a measurement.
constexpr double kCrossMachineSpread = 3.0;

// The measured inputs of a projection and where they came from.
struct PlanFigures {
  std::string source;          // "probe" or "run"
  std::string describe;        // one line: "a probe on this machine (cpu): 21 steps in 3.4 s"
  std::vector<double> step_s;  // seconds per step, in order (warm-up excluded)
  double first_step_s = -1;    // the warm-up step; < 0 = not measured
  double launch_s = 0, startup_s = 0, eval_s = 0, save_s = 0, finish_s = 0;
  bool saved = false;           // a save was measured (else save_s is 0)
  double peak_flops = 0;        // where they were measured (0 = unknown)
  int64_t tokens_per_step = 0;  // tokens (or samples: item) per optimizer step; 0 = unknown
  std::string item = "token";
  std::string device;
  double probe_s = 0;  // the probe's own wall time (0 for a run directory)
  // What the run holds (summary.json's): parameters and those that train (train.freeze), the
  // optimizer's state and a checkpoint's bytes; < 0 = not known (no checkpoint written).
  int64_t params = -1, trainable_params = -1, checkpoint_bytes = -1;
  double optimizer_state_mb = -1;
  // The whole model's parameter bytes (state_bytes_per_rank's, which is one rank's share under
  // ZeRO-3, made whole: see plan.cpp's whole_parameter_bytes), the training state the measured
  // process held (state_bytes_per_rank.total: its share under ZeRO) and its peak tensor memory;
  // < 0 = not known.
  int64_t param_bytes = -1, state_bytes = -1;
  double peak_tensor_mb = -1;
  // The optimizer whose state optimizer_state_mb is (summary.json's levers.optimizer.kind, else the
  // config's train.optimizer: "fused_adamw", "muon" or "torch_adamw"), and the ranks that state was
  // sharded over (the run's world size where its dist.zero >= 1: the figure is one rank's share).
  std::string optimizer;
  int64_t optimizer_state_ranks = 1;
  // The run trains under bf16 autocast (summary.json's levers.precision.mode): an offloaded ZeRO-3
  // shard then stays on the GPU as its bf16 copy, the fp32 master in host memory.
  bool bf16 = false;
};

using PlanProgress = std::function<void(const std::string& line, bool permanent)>;

struct CostPlanOptions {
  std::string from_run;    // measure from this run directory instead of probing
  std::string instance;    // project onto this price-table row ("" = this machine)
  double peak_tflops = 0;  // the instance's peak; 0 = its peak_tflops in the price table
  double launch_s = 0;     // the process's launch before the Trainer (the CLI measures its own)
  PlanProgress progress;   // status while probing (may be empty)
};

// What the learning-rate schedule and the run's own stops make of train.steps: where the decay
// begins, and how far a deadline lets the run go.
struct PlanSchedule {
  std::string kind;  // train.schedule: "cosine" or "wsd"
  int64_t warmup_steps = 0;
  int64_t decay_start = 0;      // the first step of the decay (cosine: the first after the warm-up)
  double decay_start_s = 0;     // central projected time from launch to it
  double target_loss = 0;       // train.target_loss (0 = none): the run may end sooner
  std::string deadline_source;  // checkpoint.deadline resolved ("" = none)
  double deadline_in_s = 0;     // from when the plan was made
  int64_t deadline_steps = -1;  // the steps that fit before the deadline (central); -1 = all of them
  std::string deadline_action;  // checkpoint.deadline_action: "requeue" or "decay"
};

struct CostPlan {
  std::string run_name;
  int64_t steps = 0;
  int64_t tokens = 0;        // steps x the figures' tokens_per_step (0 = unknown)
  bool spot_billed = false;  // budget.spot: the run is billed at the spot price
  double limit_usd = 0;      // budget.limit_usd
  PlanFigures figures;
  ProjectionInputs inputs;
  Projection projection;
  std::string target;  // "this machine (cpu)" or "gpu-1xh100 (scaled by peak FLOP/s: ...)"
  PlanSchedule schedule;

  // The scenario the configured price bills (spot when budget.spot).
  const Scenario& billed() const { return spot_billed ? projection.spot : projection.on_demand; }
  std::string table() const;
  nlohmann::json to_json() const;
  // One line for the training banner.
  std::string banner_line() const;
};

// The prices for `budget`, or for the price-table row `instance` when one is named (its on-demand
// and spot prices and watts; budget.watts still wins when set). Throws ConfigError for a name not
// in the table, listing the table's names. *peak_tflops receives the row's peak (0 = none).
MachinePrices resolve_prices(const BudgetConfig& budget, const std::string& instance, double* peak_tflops = nullptr);

// The probe (see the top of this file). Throws what the Trainer throws for the config
// (ConfigError, DataError: bad input, reported once).
PlanFigures probe_figures(const std::string& file, const std::vector<std::string>& overrides,
                          const std::map<std::string, std::string>& env, const PlanProgress& progress);
// The figures of a run directory. Throws ConfigError when it holds no metrics.jsonl with two step
// lines (nothing to measure from).
PlanFigures run_dir_figures(const std::string& run_dir);

// `plan`'s schedule outlook for config `c` (its projection made), the deadline counted from
// `now_unix`.
PlanSchedule plan_schedule(const Config& c, const CostPlan& plan, double now_unix);

CostPlan make_cost_plan(const std::string& file, const std::vector<std::string>& overrides,
                        const std::map<std::string, std::string>& env, const CostPlanOptions& options);

// "" when budget.limit_usd is 0, no price is known or the limit covers the billed scenario's
// central cost; otherwise the reason the run should not start: the figures and what to do.
std::string budget_shortfall(const CostPlan& plan);

// The callback `frugal train` adds with plan.before_train: the banner line, <run_dir>/plan.json
// (written when training begins), and summary.json's "plan" (the projection, and the trainer's
// measured time beside its projected share).
std::shared_ptr<Callback> plan_callback(const CostPlan& plan);

// 0.05 ms, 250 ms, 42.0 s, 3.5 min, 2.10 h; "never" for an infinite time.
std::string describe_duration(double seconds);

}  // namespace frugal
