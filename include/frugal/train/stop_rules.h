// Two stops that used to live in the loop, as callbacks on the event list:
//   TimeLimit         train.max_minutes: billed wall time over every session (start-ups
//                     included) reached the limit; a checkpoint is written and the run ends with
//                     stop_kind "max_minutes".
//   NonFiniteLossStop the loss of a log window became NaN or infinite and nothing else handles it
//                     (no loss scaler skipping such steps at that step, no divergence guard
//                     rolling back): further steps would only spend money on NaN. Connected when
//                     the guard is off; it reads StepMetrics::loss_scaling each step, because an
//                     fp16 run that fell back to bf16 runs on without its scaler.
#pragma once

#include <cstdint>

#include "frugal/core/callback.h"

namespace frugal {

class TimeLimit : public Callback {
 public:
  // eval_every: train.eval_every (0 = no periodic evaluation).
  explicit TimeLimit(double max_minutes, int64_t eval_every = 0) : max_minutes_(max_minutes), eval_every_(eval_every) {}
  // At a step with an evaluation due, the evaluation runs first (its stops, e.g. early stopping,
  // come before the time limit) and the limit is checked after it.
  void on_step_end(const StepMetrics& m, Control& control) override {
    if (eval_every_ <= 0 || m.step % eval_every_ != 0) check(m.elapsed_s, control);
  }
  void on_eval_end(const EvalMetrics& m, Control& control) override { check(m.elapsed_s, control); }
  void on_resume(const StepMetrics& m, Control& control) override { check(m.elapsed_s, control); }

 private:
  void check(double elapsed_s, Control& control) const;
  double max_minutes_;
  int64_t eval_every_;
};

class NonFiniteLossStop : public Callback {
 public:
  void on_step_end(const StepMetrics& m, Control& control) override;
};

}  // namespace frugal
