// Stop a run at a given step without changing its schedule: `frugal train --stop-at-step N`.
//
// The learning-rate schedule, evaluation cadence and everything else still follow train.steps; the
// run only ends early, as a callback stop (summary.json stop_kind "callback"), with its evaluation
// at step N, a checkpoint at step N (checkpoint.enabled) and its summary. `--resume auto` later
// continues it exactly as if it had never stopped: `frugal search` uses this to run a trial to a
// rung and resume it for the next one (docs/search.md). TrainerOptions::stop_at_step asks for it;
// the callback connector (callback_connector.cpp) connects it after the user's callbacks.
//
// When step N is an evaluation step (train.eval_every divides it), the stop is requested after
// that evaluation, with the loop's own control, so every callback sees the evaluation exactly as in
// the uninterrupted run; otherwise right after step N, and the end of the run evaluates.
// REQUIRES: the run starts (or resumes) before step N; a run resumed at or past N takes one more
// step before it stops (an evaluation left pending at N by a stop signal is the exception: it
// runs first and the run stops at N).
#pragma once

#include <cstdint>

#include "frugal/core/callback.h"

namespace frugal {

class StopAtStep final : public Callback {
 public:
  explicit StopAtStep(int64_t step) : step_(step) {}
  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;

 private:
  int64_t step_ = 0;
  int64_t eval_every_ = 0;
};

}  // namespace frugal
