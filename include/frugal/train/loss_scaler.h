// Dynamic loss scaling for fp16 training. The loss is multiplied by `scale` before backward so
// small gradients survive fp16; gradients are unscaled before clipping; a step whose gradients
// hold inf/NaN is skipped and the scale backs off; after growth_interval consecutive finite steps
// the scale grows. The scale never drops below min_scale.
//
// The state machine is the pure function next_scale_state(), tested transition by transition.
// Known failure modes elsewhere avoided here: the LR schedule follows *taken* optimizer steps
// (the trainer does not advance it on a skip), and the scale has a floor and a logged history.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

struct ScaleState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;    // consecutive finite steps since the last growth or backoff
  int64_t skipped = 0;           // steps skipped over the whole run
  int64_t skipped_at_floor = 0;  // consecutive skipped steps while at min_scale
};

// One transition: `found_inf` says whether this step's gradients held inf/NaN.
ScaleState next_scale_state(const ScaleState& s, bool found_inf, const PrecisionConfig& c);

class LossScaler {
 public:
  LossScaler(bool enabled, const PrecisionConfig& config);

  bool enabled() const { return enabled_; }
  // loss * scale (the loss itself when disabled).
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // Multiplies gradients by 1/scale in place (no-op when disabled).
  void unscale(const std::vector<at::Tensor>& grads) const;
  // Unscales and checks in one pass: returns a 0-dim float tensor on the gradients' device that
  // is non-zero when any gradient holds inf/NaN (LibTorch 2.x: one multi-tensor kernel per
  // device, on CPU and CUDA alike, no host synchronisation; 1.13: unscale, then the finiteness of
  // the gradients' norm). Undefined when disabled or without gradients.
  at::Tensor unscale_and_check(const std::vector<at::Tensor>& grads) const;
  // The same with the scale and the flag in device memory, for a CUDA graph: zeroes `found_inf`,
  // unscales by `inv_scale`'s value and flags there (both 0-dim fp32 on the gradients' device;
  // write_scale() fills them). REQUIRES LibTorch >= 2.1 (ATen's multi-tensor kernel).
  void unscale_and_check(const std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                         const at::Tensor& inv_scale) const;
  // Writes the current scale and its reciprocal into 0-dim fp32 device tensors (small device
  // writes, no wait): the values scale_loss() and unscale_and_check() use on the host's side.
  void write_scale(at::Tensor& scale, at::Tensor& inv_scale) const;
  // Records the step's outcome; returns true when the optimizer step must be skipped.
  bool update(bool found_inf);

  const ScaleState& state() const { return state_; }
  void set_state(const ScaleState& s) { state_ = s; }
  double scale() const { return enabled_ ? state_.scale : 1.0; }

 private:
  bool enabled_;
  PrecisionConfig config_;
  ScaleState state_;
};

}  // namespace frugal
