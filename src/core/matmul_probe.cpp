// The matmul probe; see matmul_probe.h.
#include "frugal/core/matmul_probe.h"

#include <torch/torch.h>

#include <chrono>

namespace frugal {

double measure_matmul_gflops(int64_t n, bool bf16, double seconds) {
  return measure_matmul_gflops(n, bf16 ? torch::kBFloat16 : torch::kFloat, torch::kCPU, seconds);
}

double measure_matmul_gflops(int64_t n, c10::ScalarType dtype, c10::Device device, double seconds) {
  using Clock = std::chrono::steady_clock;
  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  auto a = torch::randn({n, n}).to(opts), b = torch::randn({n, n}).to(opts);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  };
  torch::mm(a, b);  // warm-up (oneDNN primitive creation, cuBLAS handles)
  sync();
  int64_t reps = 0;
  auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds || reps < 2) {
    torch::mm(a, b);
    ++reps;
    if (device.is_cuda() && reps % 8 != 0) continue;  // keep the GPU queue full between checks
    sync();
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return 2.0 * static_cast<double>(n * n * n) * static_cast<double>(reps) / elapsed / 1e9;
}

}  // namespace frugal
