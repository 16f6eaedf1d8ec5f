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
  double data_wait_s = 0;    // part of step_s spent waiting for the batch (the data loader)
  double tokens_per_s = 0;   // over the window since the previous log step
  double elapsed_s = 0;      // since the first step began
  int64_t tokens = 0;        // tokens consumed so far
};

struct EvalMetrics {
  int64_t step = 0;
  double val_loss = 0;
  double best_val_loss = 0;
  double eval_s = 0;
};

struct Control {
  bool should_stop = false;
  std::string reason;  // lands in summary.json's stop_reason
  void request_stop(std::string why) {
    if (!should_stop) reason = std::move(why);
    should_stop = true;
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
