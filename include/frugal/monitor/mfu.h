// Model FLOPs utilisation (MFU, PaLM appendix B): the model's training FLOP/s (the model's
// flops_per_token x tokens/s; recomputation from activation checkpointing is not counted) over
// the machine's peak FLOP/s, against two peaks where both are known: the GPU's datasheet dense
// figure in the run's precision (frugal's table, datasheet_peak_flops) first, and the attainable
// peak second, [monitor] peak_tflops when set, else measured at start-up with frugal doctor's
// dense matmul probe in the run's compute dtype on the run's device. A configured peak replaces
// both as the first. The throughput is that of the training steps after the first log window
// (no start-up, evaluation or checkpoint time; the first window holds the warm-up), over every
// process of a data-parallel run against the peak of every process.
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
  double flops = 0;    // FLOP/s, configured or measured
  std::string source;  // "configured (monitor.peak_tflops)" or "measured: bf16 matmul 1024^3 on cpu"
  bool configured = false;
  double datasheet_flops = 0;  // the GPU's datasheet figure in the run's dtype; 0 = not in the table
  std::string datasheet_source;
  // The peak MFU is quoted against first: the configured one, else the datasheet's, else the
  // measured one.
  double primary_flops() const { return configured || datasheet_flops <= 0 ? flops : datasheet_flops; }
  const std::string& primary_source() const { return configured || datasheet_flops <= 0 ? source : datasheet_source; }
};

// The dense (no sparsity) tensor-core FLOP/s of NVIDIA's datasheet for a GPU whose name contains
// one of the table's names (H100 PCIe, H100 NVL, H100 SXM, H200, A100), in bf16 or fp16, with the
// table's words for its source; {0, ""} for another GPU or dtype. The GPU benchmark reads the same
// figure from `frugal doctor --json`.
std::pair<double, std::string> datasheet_peak_flops(const std::string& gpu_name, c10::ScalarType dtype);

// The configured peak, or the best of up to 5 measurements of n x n matmuls in `dtype` on
// `device`, `seconds` in all (fewer when one outlasts the budget): the best, because a burst slowed by another process
// (a shared machine, a page fault) says nothing about what the hardware can do, and a low peak inflates MFU.
PeakFlops resolve_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device, double seconds = 0.2);
// The same without the datasheet's figure (as on the CPU).
PeakFlops resolve_measured_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device,
                                      double seconds = 0.2);

// The MFU producer: fills StepMetrics::mfu at log steps (the window's tokens/s against the first
// peak), adds to summary.json the run's MFU against each peak with the throughput it is computed
// from (train_tokens_per_s: the log windows after the first), and the peaks to the banner.
// `processes`: a data-parallel run's world size (its tokens/s count every process).
class MfuMeter : public Callback {
 public:
  MfuMeter(PeakFlops peak, double flops_per_token, int64_t processes = 1)
      : peak_(std::move(peak)), flops_per_token_(flops_per_token), processes_(processes < 1 ? 1 : processes) {}
  void on_step_metrics(StepMetrics& m) override;
  void add_to_banner(std::vector<std::string>& lines) const override;
  // Falls back on the summary's tokens_per_s when no log window came after the first.
  void add_to_summary(nlohmann::ordered_json& summary) override;

 private:
  PeakFlops peak_;
  double flops_per_token_;
  int64_t processes_;
  bool seen_window_ = false;  // the first log window of this session (the warm-up) has passed
  int64_t last_tokens_ = 0;   // StepMetrics::tokens at the previous log step
  double steady_tokens_ = 0, steady_s_ = 0;
};

}  // namespace frugal
