// Divergence guard; see divergence_guard.h.
#include "frugal/train/divergence_guard.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace frugal {

GuardVerdict next_guard_state(const GuardState& s, double loss, int64_t step, const GuardConfig& c) {
  GuardVerdict v{s, false, ""};
  GuardState& n = v.state;
  if (!std::isfinite(loss)) {
    v.diverged = true;
    v.reason = fmt::format("training loss became {} in the log window ending at step {}", loss, step);
    return v;
  }
  if (n.windows == 0) {
    n.windows = 1;
    n.ema = loss;
    n.good_step = step;
    return v;
  }
  if (c.spike_factor > 0 && loss > c.spike_factor * n.ema) {
    ++n.above;
    if (n.above >= c.spike_windows) {
      v.diverged = true;
      v.reason = fmt::format(
          "training loss {:.4g} at step {} stayed above {} x its moving average "
          "{:.4g} for {} log windows",
          loss, step, c.spike_factor, n.ema, n.above);
    }
    return v;
  }
  n.above = 0;
  ++n.windows;
  n.ema = c.ema_decay * n.ema + (1 - c.ema_decay) * loss;
  n.good_step = step;
  return v;
}

void DivergenceGuard::on_step_end(const StepMetrics& m, Control& control) {
  if (!m.logged) return;
  GuardVerdict v = next_guard_state(state_, m.loss, m.step, config_);
  state_ = v.state;
  if (v.diverged) control.request_rollback(v.reason, state_.good_step);
}

void DivergenceGuard::save_state(nlohmann::json& out) const {
  out = {{"windows", state_.windows}, {"ema", state_.ema}, {"above", state_.above}, {"good_step", state_.good_step}};
}

void DivergenceGuard::load_state(const nlohmann::json& in) {
  state_.windows = in.at("windows").get<int64_t>();
  state_.ema = in.at("ema").get<double>();
  state_.above = in.at("above").get<int64_t>();
  state_.good_step = in.at("good_step").get<int64_t>();
}

}  // namespace frugal
