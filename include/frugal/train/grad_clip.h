// Global gradient-norm clipping without a host sync: the norm stays a device tensor and the
// clip coefficient min(1, max_norm / (norm + 1e-6)) multiplies every gradient. Same maths as
// torch::nn::utils::clip_grad_norm_ (which returns a double and so syncs every step).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace frugal {

// Total L2 norm of `grads` (a 0-dim fp32 tensor; inf/NaN if any gradient holds one).
at::Tensor global_grad_norm(const std::vector<at::Tensor>& grads);

// min(1, max_norm / (norm + 1e-6)) as a 0-dim tensor beside `norm`; undefined when max_norm <= 0
// (no clipping). Optimizer::step(coefficient) applies it.
at::Tensor clip_coefficient(const at::Tensor& norm, double max_norm);
// Scales `grads` in place so their global norm is at most max_norm, given their `norm`.
void clip_to_norm(const std::vector<at::Tensor>& grads, const at::Tensor& norm, double max_norm);

// Both, on the gradients of `params` (those without a gradient are skipped); returns the norm
// before clipping. max_norm <= 0 only measures.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace frugal
