// Flat-buffer AdamW; see fused_adamw.h.
#include "frugal/train/fused_adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "frugal/core/errors.h"

namespace frugal {


FusedAdamW::FusedAdamW(std::vector<Group> groups, AdamWHyper hyper) : hyper_(hyper) {
  c10::NoGradGuard no_grad;
  for (auto& g : groups) {
    if (g.params.empty()) continue;
    const auto opts = g.params.front().options();
    int64_t total = 0;
    for (const auto& p : g.params) {
      TORCH_CHECK(p.options().dtype() == opts.dtype() && p.device() == opts.device(),
                  "FusedAdamW: parameters of a group must share dtype and device");
      total += p.numel();
    }
    Flat f;
    f.weight_decay = g.weight_decay;
    f.params = at::empty({total}, opts);
    f.grads = at::zeros({total}, opts);
    int64_t off = 0;
    for (auto& p : g.params) {
      const int64_t n = p.numel();
      at::Tensor pv = f.params.narrow(0, off, n).view(p.sizes());
      pv.copy_(p);
      p.set_data(pv);  // the parameter now lives in the flat buffer
      p.mutable_grad() = f.grads.narrow(0, off, n).view(p.sizes());
      off += n;
    }
    f.exp_avg = at::zeros({total}, opts);
    f.exp_avg_sq = at::zeros({total}, opts);
    f.denom = at::empty({total}, opts);
    flats_.push_back(std::move(f));
  }
}

void FusedAdamW::zero_grad() {
  for (auto& f : flats_) f.grads.zero_();
}

void FusedAdamW::step() {
  c10::NoGradGuard no_grad;
  ++steps_;
  const double b1 = hyper_.beta1, b2 = hyper_.beta2;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(steps_));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(steps_));
  const double step_size = hyper_.lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  for (auto& f : flats_) {
    // The exact op sequence of torch::optim::AdamW::step (LibTorch 1.13 adamw.cpp).
    if (f.weight_decay != 0) f.params.mul_(1 - hyper_.lr * f.weight_decay);
    f.exp_avg.mul_(b1).add_(f.grads, 1 - b1);
    f.exp_avg_sq.mul_(b2).addcmul_(f.grads, f.grads, 1 - b2);
    at::sqrt_out(f.denom, f.exp_avg_sq).div_(bc2_sqrt).add_(hyper_.eps);
    f.params.addcdiv_(f.exp_avg, f.denom, -step_size);
  }
}

std::vector<at::Tensor> FusedAdamW::flat_grads() const {
  std::vector<at::Tensor> out;
  for (const auto& f : flats_) out.push_back(f.grads);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> FusedAdamW::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < flats_.size(); ++i) {
    out.emplace_back("g" + std::to_string(i) + ".exp_avg", flats_[i].exp_avg);
    out.emplace_back("g" + std::to_string(i) + ".exp_avg_sq", flats_[i].exp_avg_sq);
  }
  return out;
}

void FusedAdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps) {
  c10::NoGradGuard no_grad;
  auto mine = state_tensors();
  for (const auto& [name, dst] : mine) {
    const at::Tensor* src = nullptr;
    for (const auto& [n, t] : tensors)
      if (n == name) src = &t;
    if (!src || src->numel() != dst.numel())
      throw CheckpointError("optimizer state '" + name +
                            "' is missing or has the wrong size; the model or its parameter "
                            "grouping differs from the checkpoint's");
    dst.copy_(src->reshape(dst.sizes()));
  }
  steps_ = steps;
}

int64_t FusedAdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += 2 * f.exp_avg.numel() * static_cast<int64_t>(f.exp_avg.element_size());
  return n;
}

}  // namespace frugal
