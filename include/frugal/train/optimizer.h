// The optimizer behind the training step: frugal's FusedAdamW (default) or LibTorch's AdamW
// (train.optimizer = "torch_adamw", the per-parameter reference the benchmark compares with).
// Both decay weight matrices only (biases, LayerNorm and rank-1 tensors are not decayed).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void set_lr(double lr) = 0;
  virtual void zero_grad() = 0;
  virtual void step() = 0;
  // The gradients the step will use (for unscaling and clipping).
  virtual std::vector<at::Tensor> grads() = 0;
  // Moments as named tensors plus the step count, for checkpoints.
  virtual std::vector<std::pair<std::string, at::Tensor>> state_tensors() = 0;
  virtual void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) = 0;
  virtual int64_t step_count() const = 0;
  virtual int64_t state_bytes() const = 0;
};

// `params` in a stable order (the model's named_parameters order).
std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, const std::vector<at::Tensor>& params,
                                          const TrainConfig& t);

}  // namespace frugal
