// Dynamic loss scaling; see loss_scaler.h.
#include "frugal/train/loss_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

namespace frugal {

ScaleState next_scale_state(const ScaleState& s, bool found_inf, const PrecisionConfig& c) {
  ScaleState n = s;
  if (found_inf) {
    const bool at_floor = s.scale <= c.min_scale;
    n.scale = std::max(c.min_scale, s.scale * c.backoff_factor);
    n.growth_tracker = 0;
    n.skipped += 1;
    n.skipped_at_floor = at_floor ? s.skipped_at_floor + 1 : 0;
    return n;
  }
  n.skipped_at_floor = 0;
  n.growth_tracker = s.growth_tracker + 1;
  if (n.growth_tracker >= c.growth_interval) {
    n.scale = s.scale * c.growth_factor;
    // Stay finite in fp32 (the scale multiplies an fp32 loss).
    if (n.scale > 1e38) n.scale = s.scale;
    n.growth_tracker = 0;
  }
  return n;
}

LossScaler::LossScaler(bool enabled, const PrecisionConfig& config)
    : enabled_(enabled), config_(config) {
  state_.scale = std::max(config.init_scale, config.min_scale);
}

at::Tensor LossScaler::scale_loss(const at::Tensor& loss) const {
  return enabled_ ? loss * state_.scale : loss;
}

void LossScaler::unscale(const std::vector<at::Tensor>& grads) const {
  if (!enabled_) return;
  c10::NoGradGuard no_grad;
  const double inv = 1.0 / state_.scale;
  for (const auto& g : grads) g.mul_(inv);
}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return false;
  state_ = next_scale_state(state_, found_inf, config_);
  return found_inf;
}

}  // namespace frugal
