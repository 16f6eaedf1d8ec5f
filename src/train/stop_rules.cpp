// The time limit and the non-finite loss stop; see stop_rules.h.
#include "frugal/train/stop_rules.h"

#include <cmath>

#include <fmt/format.h>

namespace frugal {

void TimeLimit::check(double elapsed_s, Control& control) const {
  if (max_minutes_ > 0 && elapsed_s >= max_minutes_ * 60)
    control.request_stop(fmt::format("train.max_minutes = {} reached", max_minutes_), StopKind::kMaxMinutes);
}

void NonFiniteLossStop::on_step_end(const StepMetrics& m, Control& control) {
  if (m.logged && !m.loss_scaling && !std::isfinite(m.loss))
    control.request_stop(fmt::format("loss became {} at step {}", m.loss, m.step));
}

}  // namespace frugal
