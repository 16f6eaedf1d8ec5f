// Global gradient-norm clipping without a host sync: the norm stays a device tensor and the
// clip coefficient min(1, max_norm / (norm + 1e-6)) multiplies every gradient. Same maths as
// torch::nn::utils::clip_grad_norm_ (which returns a double and so syncs every step).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace frugal {

// Returns the total L2 norm of the gradients before clipping (a 0-dim fp32 tensor). With
// max_norm <= 0 only measures. Parameters without a gradient are skipped.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace frugal
