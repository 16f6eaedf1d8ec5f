// MFU; see mfu.h.
#include "frugal/monitor/mfu.h"

#include <fmt/format.h>

#include "frugal/monitor/doctor.h"

namespace frugal {

double model_flops_utilization(double tokens_per_s, double flops_per_token, double peak_flops) {
  if (peak_flops <= 0) return 0;
  return tokens_per_s * flops_per_token / peak_flops;
}

PeakFlops resolve_peak_flops(const MonitorConfig& c, c10::ScalarType dtype, c10::Device device,
                             double seconds) {
  if (c.peak_tflops > 0) return {c.peak_tflops * 1e12, "configured (monitor.peak_tflops)"};
  // 1024^3 on CPU (what frugal doctor measures); a GPU needs a bigger problem to reach its peak.
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  const double gflops = measure_matmul_gflops(n, dtype, device, seconds);
  return {gflops * 1e9, fmt::format("measured: {} matmul {}^3 on {}, {:.1f} GFLOP/s", c10::toString(dtype), n,
                                    device.str(), gflops)};
}

}  // namespace frugal
