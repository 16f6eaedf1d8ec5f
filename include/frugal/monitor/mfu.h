// Model FLOPs utilisation (MFU, PaLM appendix B): the model's training FLOP/s (the model's
// flops_per_token x tokens/s; recomputation from activation checkpointing is not counted) over
// the machine's peak FLOP/s. The peak is [monitor] peak_tflops when set, else measured at
// start-up with frugal doctor's dense matmul probe in the run's compute dtype on the run's
// device: an attainable peak, not a datasheet one, so MFU near 1 means the step is as fast as a
// large matmul on this machine.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <utility>
#include <vector>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"

namespace frugal {

// tokens_per_s x flops_per_token / peak_flops (0 when the peak is unknown).
double model_flops_utilization(double tokens_per_s, double flops_per_token, double peak_flops);

// "" for an MFU up to 1; above it, why that can be (the measured peak was taken while the machine
// was slower than during training, or the configured peak is too low) and what to do.
std::string mfu_note(double mfu, const std::string& peak_source);

struct PeakFlops {
  double flops = 0;    // FLOP/s
  std::string source;  // "configured (monitor.peak_tflops)" or "measured: bf16 matmul 1024^3 on cpu"
};

// The configured peak, or the best of up to 5 measurements of n x n matmuls in `dtype` on
// `device`, `seconds` in all (fewer when one outlasts the budget): the best, because a burst slowed by another process (a shared machine, a
// page fault) says nothing about what the hardware can do, and a low peak inflates MFU.
PeakFlops resolve_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device,
                             double seconds = 0.2);

// The MFU producer: fills StepMetrics::mfu at log steps (from the window's tokens/s), adds the
// run's MFU and its peak to summary.json and the peak to the banner.
class MfuMeter : public Callback {
 public:
  MfuMeter(PeakFlops peak, double flops_per_token) : peak_(std::move(peak)), flops_per_token_(flops_per_token) {}
  void on_step_metrics(StepMetrics& m) override;
  void add_to_banner(std::vector<std::string>& lines) const override;
  // Reads the summary's tokens_per_s.
  void add_to_summary(nlohmann::ordered_json& summary) override;

 private:
  PeakFlops peak_;
  double flops_per_token_;
};

}  // namespace frugal
