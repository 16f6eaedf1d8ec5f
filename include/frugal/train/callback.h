// The documented event list of a training run, and the interface observers implement.
//
// Events, in order:
//   on_train_begin   after the model, data and run directory exist, before step 1
//   on_step_end      after every optimizer step (metrics.loss is valid when metrics.logged)
//   on_eval_end      after each validation pass (every train.eval_every steps and at the end)
//   on_train_end     once, with the final summary (also after a stop requested by a callback)
//
// Callbacks observe and request; the loop decides. To stop, set control.should_stop and a reason;
// never throw to stop. Callbacks run on the trainer thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config.h"

namespace frugal {

struct RunInfo {
  const Config* config = nullptr;
  std::string run_dir;
  int64_t params = 0;
  double flops_per_token = 0;
  int64_t tokens_per_step = 0;
  int threads = 0;
};

struct StepMetrics {
  int64_t step = 0;          // optimizer steps completed (1-based)
  int64_t total_steps = 0;
  bool logged = false;       // true on log steps: loss and grad_norm are read from the device
  double loss = 0;           // mean training loss since the previous log step
  double grad_norm = 0;      // global gradient norm before clipping (this step)
  double lr = 0;
  double step_s = 0;         // wall time of this step
  double tokens_per_s = 0;   // over the window since the previous log step
  double elapsed_s = 0;      // since the first step began
  int64_t tokens = 0;        // tokens consumed so far
  // Phase split of this step (seconds): data wait, forward, backward, optimizer (incl. zero_grad,
  // unscale, clip).
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  double cost_usd = 0;       // spend so far ([budget])
  double rss_mb = 0;         // resident memory at this (logged) step
  double loss_scale = 1;     // the fp16 loss scale after this step (1 when not scaling)
  int64_t skipped_steps = 0; // optimizer steps skipped for inf/NaN gradients so far
};

struct EvalMetrics {
  int64_t step = 0;
  double val_loss = 0;
  double best_val_loss = 0;
  double eval_s = 0;
};

struct Control {
  bool should_stop = false;
  bool by_guard = false;  // a guard (budget, divergence) stopped the run: the CLI exits with 3
  std::string reason;     // lands in summary.json's stop_reason
  // The first request wins; later ones do not overwrite its reason.
  void request_stop(std::string why) {
    if (!should_stop) reason = std::move(why);
    should_stop = true;
  }
  void request_guard_stop(std::string why) {
    if (!should_stop) by_guard = true;
    request_stop(std::move(why));
  }
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const RunInfo& info) {}
  virtual void on_step_end(const StepMetrics& m, Control& control) {}
  virtual void on_eval_end(const EvalMetrics& m, Control& control) {}
  virtual void on_train_end(const nlohmann::json& summary) {}
};

}  // namespace frugal
