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

PeakFlops resolve_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device,
                             double seconds) {
  if (c.peak_tflops > 0) return {c.peak_tflops * 1e12, "configured (monitor.peak_tflops)"};
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
        return {0.0, fmt::format("not measured: a {}^3 {} matmul does not fit in {}'s free memory; set "
                                 "monitor.peak_tflops for MFU", n, c10::toString(dtype), device.str())};
      n /= 2;
      continue;
    }
    ++bursts;
  }
  return {gflops * 1e9, fmt::format("measured: {} matmul {}^3 on {}, best of {}, {:.1f} GFLOP/s", c10::toString(dtype), n,
                                    device.str(), bursts, gflops)};
}

std::string mfu_note(double mfu, const std::string& peak_source) {
  if (!(mfu > 1)) return "";
  return fmt::format("MFU above 100% means the peak it is measured against ({}) is below what training reached: "
                     "the machine was slower while the peak was measured (a shared or throttled machine) or the "
                     "configured peak is too low; set monitor.peak_tflops to the hardware's peak for a stable figure",
                     peak_source);
}

void MfuMeter::on_step_metrics(StepMetrics& m) {
  if (m.logged) m.mfu = model_flops_utilization(m.tokens_per_s, flops_per_token_, peak_.flops);
}

void MfuMeter::add_to_banner(std::vector<std::string>& lines) const {
  lines.push_back(fmt::format("mfu: peak {:.3f} TFLOP/s, {}", peak_.flops / 1e12, peak_.source));
}

void MfuMeter::add_to_summary(nlohmann::ordered_json& summary) {
  const double mfu = model_flops_utilization(summary.value("tokens_per_s", 0.0), flops_per_token_, peak_.flops);
  summary["mfu"] = mfu;
  if (!mfu_note(mfu, peak_.source).empty()) summary["mfu_note"] = mfu_note(mfu, peak_.source);
  summary["peak_tflops"] = peak_.flops / 1e12;
  summary["peak_source"] = peak_.source;
}

}  // namespace frugal
