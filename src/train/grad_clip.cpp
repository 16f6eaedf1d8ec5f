// Gradient clipping; see grad_clip.h.
#include "frugal/train/grad_clip.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace frugal {

at::Tensor global_grad_norm(const std::vector<at::Tensor>& grads) {
  if (grads.empty()) return at::zeros({}, at::kFloat);
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  return at::stack(norms).to(at::kFloat).norm(2);
}

at::Tensor clip_coefficient(const at::Tensor& norm, double max_norm) {
  if (max_norm <= 0) return {};
  c10::NoGradGuard no_grad;
  return (max_norm / (norm + 1e-6)).clamp_max(1.0);
}

void clip_to_norm(const std::vector<at::Tensor>& grads, const at::Tensor& norm, double max_norm) {
  const at::Tensor coef = clip_coefficient(norm, max_norm);
  if (!coef.defined()) return;
  c10::NoGradGuard no_grad;
  for (const auto& g : grads) g.mul_(coef.to(g.scalar_type()));
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::Tensor norm = global_grad_norm(grads);
  clip_to_norm(grads, norm, max_norm);
  return norm;
}

}  // namespace frugal
