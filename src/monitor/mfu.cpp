// MFU; see mfu.h.
#include "frugal/monitor/mfu.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "frugal/core/compat.h"
#include "frugal/core/device.h"
#include "frugal/core/matmul_probe.h"
#include "frugal/core/wall_clock.h"

namespace frugal {

double model_flops_utilization(double tokens_per_s, double flops_per_token, double peak_flops) {
  if (peak_flops <= 0) return 0;
  return tokens_per_s * flops_per_token / peak_flops;
}

namespace {
struct DatasheetRow {
  const char* name;  // a part of the device's name; the first row that matches wins
  double tflops;     // dense bf16 = fp16 tensor-core TFLOP/s
  const char* source;
};
// The specific names come before the general ones (an "H100 PCIe" also contains "H100").
constexpr DatasheetRow kDatasheet[] = {
    {"H100 PCIe", 756.0, "NVIDIA H100 PCIe datasheet, bf16/fp16 dense"},
    {"H100 NVL", 835.0, "NVIDIA H100 NVL datasheet, bf16/fp16 dense"},
    {"H100", 989.0, "NVIDIA H100 SXM datasheet, bf16/fp16 dense (989.4)"},
    {"H200", 989.0, "NVIDIA H200 datasheet, bf16/fp16 dense (as H100 SXM)"},
    {"A100", 312.0, "NVIDIA A100 datasheet, bf16/fp16 dense"},
};
}  // namespace

std::pair<double, std::string> datasheet_peak_flops(const std::string& gpu_name, c10::ScalarType dtype) {
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf) return {0.0, ""};
  for (const auto& row : kDatasheet)
    if (gpu_name.find(row.name) != std::string::npos) return {row.tflops * 1e12, row.source};
  return {0.0, ""};
}

PeakFlops resolve_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device, double seconds) {
  std::pair<double, std::string> sheet{0.0, ""};
  if (device.is_cuda())
    for (const auto& g : device::cuda_devices())
      if (g.index == (device.has_index() ? device.index() : 0)) sheet = datasheet_peak_flops(g.name, dtype);
  PeakFlops p = resolve_measured_peak_flops(c, dtype, device, seconds);
  p.datasheet_flops = sheet.first;
  p.datasheet_source = sheet.second;
  return p;
}

PeakFlops resolve_measured_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device,
                                      double seconds) {
  if (c.peak_tflops > 0) return {c.peak_tflops * 1e12, "configured (monitor.peak_tflops)", true, 0.0, ""};
  // 1024^3 on CPU (what frugal doctor measures); a GPU needs a bigger problem to reach its peak.
  int64_t n = device.is_cuda() ? 8192 : 1024;
  constexpr int kBursts = 5;
  double gflops = 0;
  int bursts = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // 5 bursts (each some products past its warm-up: about 0.05 s at 1024^3 in fp32 on 2 cores),
  // unless they outlast 5 budgets: a product far slower than the budget (bf16 without hardware
  // support, seconds per product) is measured once, not five times.
  while (bursts < kBursts && (bursts == 0 || seconds_since(t0) < kBursts * seconds)) {
    try {
      gflops = std::max(gflops, measure_matmul_gflops(n, dtype, device, seconds / kBursts));
    } catch (const std::exception& e) {
      // A device short of memory (another process on the GPU, a cap on the caching allocator)
      // gets a smaller probe, and none at all rather than a failed run: MFU is then not reported.
      if (!compat::is_out_of_memory(e)) throw;
      device::cuda_empty_cache();
      if (bursts > 0) break;  // memory ran short after a burst that fit: that burst's figure stands
      if (n <= 1024)
        return {0.0,
                fmt::format("not measured: a {}^3 {} matmul does not fit in {}'s free memory; set "
                            "monitor.peak_tflops for MFU",
                            n, c10::toString(dtype), device.str()),
                false, 0.0, ""};
      n /= 2;
      continue;
    }
    ++bursts;
  }
  return {gflops * 1e9,
          fmt::format("measured: {} matmul {}^3 on {}, best of {}, {:.1f} GFLOP/s", c10::toString(dtype), n,
                      device.str(), bursts, gflops),
          false, 0.0, ""};
}

std::string mfu_note(double mfu, const std::string& peak_source) {
  if (!(mfu > 1)) return "";
  return fmt::format(
      "MFU above 100% means the peak it is measured against ({}) is below what training reached: "
      "the machine was slower while the peak was measured (a shared or throttled machine) or the "
      "configured peak is too low; set monitor.peak_tflops to the hardware's peak for a stable figure",
      peak_source);
}

void MfuMeter::on_step_metrics(StepMetrics& m) {
  if (!m.logged) return;
  const double n = static_cast<double>(processes_);
  m.mfu = model_flops_utilization(m.tokens_per_s, flops_per_token_, n * peak_.primary_flops());
  // The window since the previous log step: its tokens, and its step time from its tokens/s.
  if (seen_window_ && m.tokens_per_s > 0 && m.tokens > last_tokens_) {
    const double tokens = static_cast<double>(m.tokens - last_tokens_);
    steady_tokens_ += tokens;
    steady_s_ += tokens / m.tokens_per_s;
  }
  seen_window_ = true;
  last_tokens_ = m.tokens;
}

void MfuMeter::add_to_banner(std::vector<std::string>& lines) const {
  if (peak_.datasheet_flops > 0 && !peak_.configured)
    lines.push_back(fmt::format("mfu: against the datasheet's {:.0f} TFLOP/s ({}); measured {:.3f} TFLOP/s ({})",
                                peak_.datasheet_flops / 1e12, peak_.datasheet_source, peak_.flops / 1e12,
                                peak_.source));
  else
    lines.push_back(fmt::format("mfu: peak {:.3f} TFLOP/s, {}", peak_.flops / 1e12, peak_.source));
}

void MfuMeter::add_to_summary(nlohmann::ordered_json& summary) {
  const double tps = steady_s_ > 0 ? steady_tokens_ / steady_s_ : summary.value("tokens_per_s", 0.0);
  const double n = static_cast<double>(processes_);
  const double mfu = model_flops_utilization(tps, flops_per_token_, n * peak_.primary_flops());
  summary["train_tokens_per_s"] = tps;
  summary["mfu"] = mfu;
  if (!mfu_note(mfu, peak_.primary_source()).empty()) summary["mfu_note"] = mfu_note(mfu, peak_.primary_source());
  summary["peak_tflops"] = peak_.primary_flops() / 1e12;
  summary["peak_source"] = peak_.primary_source();
  if (peak_.datasheet_flops > 0) {
    summary["mfu_datasheet"] = model_flops_utilization(tps, flops_per_token_, n * peak_.datasheet_flops);
    summary["peak_tflops_datasheet"] = peak_.datasheet_flops / 1e12;
  } else {
    summary["mfu_datasheet"] = nullptr;
    summary["peak_tflops_datasheet"] = nullptr;
  }
  summary["mfu_measured"] = model_flops_utilization(tps, flops_per_token_, n * peak_.flops);
  summary["peak_tflops_measured"] = peak_.flops / 1e12;
  summary["peak_source_measured"] = peak_.source;
}

}  // namespace frugal
