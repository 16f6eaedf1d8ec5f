// Gradient noise scale; see grad_noise.h.
#include "frugal/monitor/grad_noise.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace frugal {

GradNoiseEstimate estimate_grad_noise(double small_sq, double big_sq, double b_small, double b_big) {
  GradNoiseEstimate e;
  e.g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small);
  e.trace_cov = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big);
  return e;
}

void GradNoiseScale::add(const GradNoiseEstimate& e) {
  if (!std::isfinite(e.g2) || !std::isfinite(e.trace_cov)) return;
  ema_g2_ = decay_ * ema_g2_ + (1 - decay_) * e.g2;
  ema_s_ = decay_ * ema_s_ + (1 - decay_) * e.trace_cov;
  ++count_;
}

double GradNoiseScale::b_simple() const {
  // Both averages carry the same bias factor (1 - decay^count), which cancels in the ratio.
  if (count_ == 0 || ema_g2_ <= 0) return std::numeric_limits<double>::quiet_NaN();
  return ema_s_ / ema_g2_;
}

nlohmann::json GradNoiseScale::to_json() const {
  return {{"ema_g2", ema_g2_}, {"ema_trace_cov", ema_s_}, {"count", count_}};
}

void GradNoiseScale::from_json(const nlohmann::json& j) {
  ema_g2_ = j.value("ema_g2", 0.0);
  ema_s_ = j.value("ema_trace_cov", 0.0);
  count_ = j.value("count", int64_t{0});
}

void MicroBatchGradProbe::after_backward(const std::vector<at::Tensor>& grads, double factor, bool last) {
  if (!on_) return;
  at::Tensor acc;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    at::Tensor d = grads[i].to(torch::kFloat);
    if (i < prev_.size() && prev_[i].defined()) d = d - prev_[i];
    at::Tensor sq = d.pow(2).sum();
    acc = acc.defined() ? acc + sq : sq;
  }
  if (!acc.defined()) return;
  acc = acc * (factor * factor);
  sum_sq_ = sum_sq_.defined() ? sum_sq_ + acc : acc;
  if (last) {
    prev_.clear();
    return;
  }
  prev_.resize(grads.size());
  for (size_t i = 0; i < grads.size(); ++i)
    prev_[i] = grads[i].defined() ? grads[i].to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true) : at::Tensor();
}

void GradNoiseMeter::on_step_metrics(StepMetrics& m) {
  if (!m.logged) return;
  if (std::isfinite(m.micro_grad_sq) && std::isfinite(m.grad_norm)) {
    const double b_small = static_cast<double>(micro_batch_), k = static_cast<double>(accum_);
    scale_.add(estimate_grad_noise(m.micro_grad_sq, m.grad_norm * m.grad_norm, b_small, b_small * k));
  }
  m.grad_noise_scale = scale_.b_simple();
}

void GradNoiseMeter::add_to_summary(nlohmann::ordered_json& summary) {
  if (scale_.count() == 0) return;
  const double gns = scale_.b_simple();
  summary["grad_noise_scale"] = std::isfinite(gns) ? nlohmann::ordered_json(gns) : nlohmann::ordered_json(nullptr);
  summary["grad_noise_estimates"] = scale_.count();
  const double batch = static_cast<double>(global_batch_);
  summary["grad_noise_hint"] =
      !std::isfinite(gns) ? "too noisy to estimate yet (the mean-gradient estimate is not positive)"
      : gns > 2 * batch   ? fmt::format(
                                "a larger global batch (up to ~{:.0f} sequences) would likely cut the "
                                  "steps needed nearly in proportion",
                                gns)
      : gns < 0.5 * batch ? "the global batch is above the noise scale: a smaller batch would waste fewer tokens"
                          : "the global batch is near the noise scale (a good trade-off)";
}

}  // namespace frugal
