// Gradient clipping; see grad_clip.h.
#include "frugal/train/grad_clip.h"

#include <ATen/ATen.h>

namespace frugal {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return at::zeros({}, at::kFloat);
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  at::Tensor total = at::stack(norms).to(at::kFloat).norm(2);
  if (max_norm > 0) {
    at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (auto& g : grads) g.mul_(coef.to(g.scalar_type()));
  }
  return total;
}

}  // namespace frugal
