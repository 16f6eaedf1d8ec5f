// The matmul probe; see matmul_probe.h.
#include "frugal/core/matmul_probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "frugal/core/wall_clock.h"

namespace frugal {

double measure_matmul_gflops(int64_t n, bool bf16, double seconds) {
  return measure_matmul_gflops(n, bf16 ? torch::kBFloat16 : torch::kFloat, torch::kCPU, seconds);
}

double measure_matmul_gflops(int64_t n, c10::ScalarType dtype, c10::Device device, double seconds) {
  using Clock = std::chrono::steady_clock;
  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  // Its own generator: a probe must not draw from the default one, or whether it ran (precision
  // "auto" kept or measured, monitor.peak_tflops given or measured) would change the dropout masks
  // and the data order of the run that follows it.
  at::Generator gen = at::detail::createCPUGenerator(0x5eed);
  auto a = torch::randn({n, n}, gen).to(opts), b = torch::randn({n, n}, gen).to(opts);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  };
  const auto w0 = Clock::now();
  torch::mm(a, b);  // warm-up (oneDNN primitive creation, cuBLAS handles)
  sync();
  const double flops = 2.0 * static_cast<double>(n * n * n);
  // One product slower than the whole budget (bf16 on a CPU without AVX-512 BF16 runs a generic
  // loop, ~100x slower than fp32: 2.3 s for 1024^3 on a 2-core AMD EPYC) is the figure itself: a
  // probe then costs one product, not three.
  const double warm = seconds_since(w0);
  if (warm >= seconds) return flops / warm / 1e9;
  int64_t reps = 0;
  auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds || reps < 2) {
    torch::mm(a, b);
    ++reps;
    if (device.is_cuda() && reps % 8 != 0) continue;  // keep the GPU queue full between checks
    sync();
    elapsed = seconds_since(t0);
  }
  return flops * static_cast<double>(reps) / elapsed / 1e9;
}

CpuPrecisionSpeeds measure_cpu_precision_speeds(int64_t n, int rounds, double seconds_per_probe) {
  std::vector<double> fp32, bf16;
  for (int r = 0; r < rounds; ++r) {
    fp32.push_back(measure_matmul_gflops(n, false, seconds_per_probe));
    bf16.push_back(measure_matmul_gflops(n, true, seconds_per_probe));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  return {median(fp32), median(bf16), rounds, n};
}

}  // namespace frugal
