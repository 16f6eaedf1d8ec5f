// One step's figures as the callbacks see them, made by a pure function from what the step and
// the loop measured (the device values already read), so the arithmetic of the log window is
// tested on its own (tests/train/step_metrics_test.cpp) and the loop only gathers readings.
#pragma once

#include <cstdint>
#include <limits>

#include "frugal/core/callback.h"

namespace frugal {

// What one optimizer step and the loop measured, as plain numbers.
struct StepReadings {
  int64_t step = 0, total_steps = 0;  // step: optimizer steps completed, this one included
  bool logged = false;                // a log step: the window below is closed and read
  double lr = 0;
  double step_s = 0;          // wall time of this step
  PhaseTimes phases;          // its split
  int64_t tokens = 0;         // items consumed so far, every process
  double elapsed_s = 0;       // billed wall time so far, over every session
  int64_t skipped_steps = 0;  // optimizer steps skipped for inf/NaN gradients so far
  double loss_scale = 1;
  bool loss_scaling = false;  // the loss scaler ran this step
  int64_t micro_batch = 0, oom_backoffs = 0;
  // The log window (the steps since the previous log step, this one included): logged steps only.
  int64_t window_steps = 0, window_tokens = 0;
  double window_s = 0;
  double window_loss_sum = 0;  // sum of the window's step losses
  double grad_norm = 0;        // this step's global gradient norm
  // Sum over this step's micro-batches of their squared gradient norms, and their count; NaN when
  // not measured (the noise scale's input).
  double micro_grad_sq_sum = std::numeric_limits<double>::quiet_NaN();
  int64_t accum = 1;
  int64_t samples_per_step = 0;  // sequences per optimizer step (the global batch)
  double rss_mb = 0;
  double eval_s = 0, checkpoint_s = 0;  // spent between steps since the previous log step
};

// The StepMetrics of a step. Figures read only at log steps (loss, gradient norm, rates, memory,
// eval and checkpoint time, and the producers' MFU and noise scale) keep the newest log step's
// values, taken from `previous`, between log steps; on a log step the producers' figures start
// as "not measured" (0, NaN) for them to fill.
StepMetrics make_step_metrics(const StepReadings& r, const StepMetrics& previous);

}  // namespace frugal
