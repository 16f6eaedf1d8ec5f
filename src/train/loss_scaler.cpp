// Dynamic loss scaling; see loss_scaler.h.
#include "frugal/train/loss_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>

#include "frugal/core/compat.h"
#include "frugal/train/grad_clip.h"

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

LossScaler::LossScaler(bool enabled, const PrecisionConfig& config) : enabled_(enabled), config_(config) {
  state_.scale = std::max(config.init_scale, config.min_scale);
}

at::Tensor LossScaler::scale_loss(const at::Tensor& loss) const { return enabled_ ? loss * state_.scale : loss; }

void LossScaler::unscale(const std::vector<at::Tensor>& grads) const {
  if (!enabled_) return;
  c10::NoGradGuard no_grad;
  const double inv = 1.0 / state_.scale;
  for (const auto& g : grads) g.mul_(inv);
}

namespace {
// ATen's multi-tensor unscale-and-check into `found_inf`; false where LibTorch has none (1.13).
bool unscale_and_check_fused(const std::vector<at::Tensor>& grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  // The kernel takes one dtype at a time (as torch.amp.GradScaler groups them).
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& g : grads) by_dtype[g.scalar_type()].push_back(g);
  bool fused = true;
  for (auto& [dtype, group] : by_dtype) fused = fused && compat::amp_unscale_and_check(group, found_inf, inv_scale);
  return fused;
}
}  // namespace

at::Tensor LossScaler::unscale_and_check(const std::vector<at::Tensor>& grads) const {
  if (!enabled_ || grads.empty()) return {};
  c10::NoGradGuard no_grad;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(grads.front().device());
  at::Tensor found_inf = at::zeros({}, opts);
  const at::Tensor inv_scale = at::full({}, 1.0 / state_.scale, opts);
  if (unscale_and_check_fused(grads, found_inf, inv_scale)) return found_inf;
  unscale(grads);
  return global_grad_norm(grads).isfinite().logical_not().to(at::kFloat);
}

void LossScaler::unscale_and_check(const std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                                   const at::Tensor& inv_scale) const {
  c10::NoGradGuard no_grad;
  found_inf.zero_();
  TORCH_CHECK(unscale_and_check_fused(grads, found_inf, inv_scale),
              "LossScaler::unscale_and_check: the flag in device memory needs LibTorch >= 2.1");
}

void LossScaler::write_scale(at::Tensor& scale, at::Tensor& inv_scale) const {
  c10::NoGradGuard no_grad;
  scale.fill_(this->scale());
  inv_scale.fill_(1.0 / this->scale());
}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return false;
  state_ = next_scale_state(state_, found_inf, config_);
  return found_inf;
}

}  // namespace frugal
