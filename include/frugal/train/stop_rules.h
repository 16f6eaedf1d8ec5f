// Stops as callbacks on the event list:
//   TimeLimit         train.max_minutes: billed wall time over every session (start-ups
//                     included) reached the limit; a checkpoint is written and the run ends with
//                     stop_kind "max_minutes".
//   NonFiniteLossStop the loss of a log window became NaN or infinite and nothing else handles it
//                     (no loss scaler skipping such steps at that step, no divergence guard
//                     rolling back): further steps would only spend money on NaN. Connected when
//                     the guard is off; it reads StepMetrics::loss_scaling each step, because an
//                     fp16 run that fell back to bf16 runs on without its scaler.
//   TargetLoss        train.target_loss: an evaluation's validation loss reached the target; the
//                     run ends as a success (stop_kind "target_reached", exit 0) and summary.json's
//                     "to_target" records what it took: steps, tokens, billed wall time, $ and kWh
//                     at the cost meter's rates. Its record is checkpointed, so a resumed run
//                     reports the session it was reached in.
#pragma once

#include <cstdint>
#include <memory>

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

class CostMeter;

class TargetLoss : public Callback {
 public:
  // `cost` (optional): the run's cost meter, whose rates price the time to target.
  TargetLoss(double target, std::shared_ptr<const CostMeter> cost) : target_(target), cost_(std::move(cost)) {}
  void on_train_begin(const RunInfo& info) override { tokens_per_step_ = info.tokens_per_step; }
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  // A run resumed after it reached its target stops at once, saying so (exit 0): nothing is left
  // to train. A target lowered since (train.target_loss set anew) is trained toward instead.
  void on_resume(const StepMetrics& m, Control& control) override;
  void add_to_summary(nlohmann::ordered_json& summary) override;
  std::string state_key() const override { return "target_loss"; }
  void save_state(nlohmann::json& out) const override;
  void load_state(const nlohmann::json& in) override;

 private:
  double target_;
  std::shared_ptr<const CostMeter> cost_;
  int64_t tokens_per_step_ = 0;
  bool reached_ = false;
  int64_t step_ = 0;
  double val_loss_ = 0, elapsed_s_ = 0;
};

}  // namespace frugal
