// Two stops that used to live in the loop, as callbacks on the event list:
//   TimeLimit         train.max_minutes: billed wall time over every session (start-ups
//                     included) reached the limit; a checkpoint is written and the run ends with
//                     stop_kind "max_minutes".
//   NonFiniteLossStop the loss of a log window became NaN or infinite and nothing else handles it
//                     (no fp16 loss scaler skipping such steps, no divergence guard rolling back):
//                     further steps would only spend money on NaN.
#pragma once

#include <cstdint>

#include "frugal/core/callback.h"

namespace frugal {

class TimeLimit : public Callback {
 public:
  explicit TimeLimit(double max_minutes) : max_minutes_(max_minutes) {}
  void on_step_end(const StepMetrics& m, Control& control) override { check(m.elapsed_s, control); }
  // An evaluation's time counts too: a step that ends under the limit may end its evaluation over it.
  void on_eval_end(const EvalMetrics& m, Control& control) override { check(m.elapsed_s, control); }

 private:
  void check(double elapsed_s, Control& control) const;
  double max_minutes_;
};

class NonFiniteLossStop : public Callback {
 public:
  void on_step_end(const StepMetrics& m, Control& control) override;
};

}  // namespace frugal
