// `frugal train --stop-at-step N`; see stop_at_step.h.
#include "frugal/train/stop_at_step.h"

#include <fmt/format.h>

namespace frugal {

namespace {
std::string reason(int64_t step) { return fmt::format("stopped at step {} (--stop-at-step)", step); }
}  // namespace

void StopAtStep::on_train_begin(const RunInfo& info) {
  if (!info.config) return;
  eval_every_ = info.config->train.eval_every;
}

void StopAtStep::on_step_end(const StepMetrics& m, Control& control) {
  if (m.step < step_ || m.step >= m.total_steps) return;  // the last step ends the run anyway
  const bool evaluates_now = eval_every_ > 0 && m.step % eval_every_ == 0;
  if (!evaluates_now) control.request_stop(reason(step_));  // else on_eval_end, after the evaluation
}

void StopAtStep::on_eval_end(const EvalMetrics& m, Control& control) {
  if (m.step >= step_ && m.step < m.total_steps) control.request_stop(reason(step_));
}

}  // namespace frugal
