// The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch
// Training", appendix A): a measured answer to "would a bigger batch help?".
//
// With gradient accumulation a step already sees gradients at two batch sizes: each micro-batch's
// gradient g_k (b_small = data.micro_batch sequences) and their mean g (b_big = accum x b_small).
// For a true gradient G and per-sequence gradient covariance Sigma,
//   E|g_k|^2 = |G|^2 + tr(Sigma) / b_small        E|g|^2 = |G|^2 + tr(Sigma) / b_big
// so, with small_sq = mean_k |g_k|^2 and big_sq = |g|^2, unbiased estimates are
//   |G|^2     ~ G2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
//   tr(Sigma) ~ S  = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
// and the simple noise scale B_simple = S / G2 (in sequences). Each estimate is noisy, so S and
// G2 are averaged separately (bias-corrected exponential moving averages) before dividing, as the
// paper recommends.
//
// Reading it: B_simple approximates the critical batch size. A global batch well below it wastes
// steps (a bigger batch would cut the number of steps nearly in proportion, for the same tokens);
// a batch well above it spends compute for little fewer steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/core/callback.h"

namespace frugal {

struct GradNoiseEstimate {
  double g2 = 0;         // |G|^2 estimate
  double trace_cov = 0;  // tr(Sigma) estimate (per sequence)
};

// One step's estimate. REQUIRES: b_big > b_small > 0.
GradNoiseEstimate estimate_grad_noise(double small_sq, double big_sq, double b_small, double b_big);

// The smoothed B_simple over log steps. Checkpointed with the run (to_json/from_json) so that a
// resumed run reports what the uninterrupted one would.
class GradNoiseScale {
 public:
  explicit GradNoiseScale(double decay = 0.9) : decay_(decay) {}
  void add(const GradNoiseEstimate& e);
  int64_t count() const { return count_; }
  // S / G2 of the averages; NaN before the first estimate or while G2 <= 0 (too noisy to say).
  double b_simple() const;
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j);

 private:
  double decay_;
  double ema_g2_ = 0, ema_s_ = 0;
  int64_t count_ = 0;
};

// The noise-scale producer: at log steps with a measured StepMetrics::micro_grad_sq, adds one
// estimate and fills StepMetrics::grad_noise_scale; its averages are checkpointed, and the summary
// gets the scale with a hint. Connected when monitor.grad_noise is on and accum > 1.
class GradNoiseMeter : public Callback {
 public:
  // micro_batch: b_small (sequences per micro-batch); accum: micro-batches per step on each
  // process; global_batch: sequences per optimizer step (the hint compares against it).
  GradNoiseMeter(int64_t micro_batch, int64_t accum, int64_t global_batch)
      : micro_batch_(micro_batch), accum_(accum), global_batch_(global_batch) {}
  void on_step_metrics(StepMetrics& m) override;
  void add_to_summary(nlohmann::ordered_json& summary) override;
  std::string state_key() const override { return "grad_noise"; }
  void save_state(nlohmann::json& out) const override { out = scale_.to_json(); }
  void load_state(const nlohmann::json& in) override { scale_.from_json(in); }

 private:
  int64_t micro_batch_, accum_, global_batch_;
  GradNoiseScale scale_;
};

// Measures each micro-batch's gradient norm inside a step from the running sum in .grad: after
// micro-batch k's backward, g_k = (grad_now - grad_before) * factor, factor = accum / loss_scale.
// Keeps one copy of the gradients while on. Off (every call a no-op) unless constructed with
// `on` = true; the trainer turns it on at log steps only.
class MicroBatchGradProbe {
 public:
  explicit MicroBatchGradProbe(bool on) : on_(on) {}
  bool on() const { return on_; }
  void after_backward(const std::vector<at::Tensor>& grads, double factor, bool last);
  // Sum over micro-batches of |g_k|^2 (0-dim fp32 tensor on the device; undefined when off).
  const at::Tensor& sum_sq() const { return sum_sq_; }

 private:
  bool on_;
  std::vector<at::Tensor> prev_;
  at::Tensor sum_sq_;
};

}  // namespace frugal
