// precision.mode = "fp8" on a GPU (CTest label `cuda`): the layer's at::_scaled_mm products give
// what the CPU emulation gives (the same fp8 operands, fp32 accumulation in another order), the cast
// kernel writes what ATen's casts write, a run
// on fp8 linears tracks bf16 on frugal's ATen path and on its kernels, and a GPU without fp8 tensor
// cores (below compute capability 8.9) is refused by name. Skipped without a GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/model/fp8.h"
#include "frugal/model/kernel_ops.h"
#include "cuda_util.h"
#include "test_util.h"

namespace frugal::cuda_fp8_test {
namespace {

// "" when GPU 0 runs fp8 products, else why the case is skipped.
std::string no_fp8_gpu() {
  if (!device::build_info().cuda_compiled) return "frugal was built without CUDA";
  if (!device::cuda_available()) return "no CUDA device visible to this process";
  const auto g = device::cuda_devices().at(0);
  if (!fp8::gpu_supports_fp8(g.major, g.minor))
    return g.name + " has no fp8 tensor cores (compute capability " + std::to_string(g.major) + "." +
           std::to_string(g.minor) + ")";
  return "";
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.cpu().to(at::kDouble), y = b.cpu().to(at::kDouble);
  return (x - y).abs().max().item<double>() / y.abs().max().item<double>();
}

TEST(CudaFp8, ScaledMmProductsOnTheGpuGiveTheCpuEmulation) {
  if (const std::string why = no_fp8_gpu(); !why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(1);
  const at::Tensor x0 = torch::randn({4, 64, 256}), w0 = torch::randn({384, 256}) * 0.05, b0 = torch::randn({384});
  const at::Tensor g = torch::randn({4, 64, 384});
  // The CPU emulation, then the GPU with ATen's casts and (where they run) with frugal's cast kernel.
  const int sides = cuda_kernels_unavailable(c10::Device(c10::kCUDA, 0)).empty() ? 3 : 2;
  std::vector<at::Tensor> got[3];
  for (int side = 0; side < sides; ++side) {
    const c10::Device d = side > 0 ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    fp8::Scope scope(true, side == 2);
    // detach(): on the CPU side to(d) returns the input itself, which must stay a plain tensor.
    at::Tensor x = x0.to(d).detach().requires_grad_(), w = w0.to(d).detach().requires_grad_();
    at::Tensor b = b0.to(d).detach().requires_grad_();
    at::Tensor y = fp8::linear(x, w, b);
    y.backward(g.to(d));
    got[side] = {y, x.grad(), w.grad(), b.grad()};
  }
  // Hopper's fp8 tensor cores keep fewer bits than fp32 in their running sums (cuBLAS promotes them
  // to fp32 at intervals): the H200 gave 2.2e-4 of the largest output against the fp32 emulation.
  // A wrong scale, operand or transposition is off by percents.
  const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
  for (int side = 1; side < sides; ++side)
    for (int i = 0; i < 4; ++i)
      EXPECT_LT(rel_diff(got[side][i], got[0][i]), 1e-3) << names[i] << (side == 2 ? ", cast kernel" : ", ATen casts");
}

// frugal's cast kernel (src/kernels/fp8_cast.cu) writes the bytes and the scale ATen's casts write:
// e4m3 and e5m2, from fp32 and bf16, lengths that are no multiple of a block's, and all zeros.
TEST(CudaFp8, TheCastKernelWritesTheBytesAndScaleOfAtensCasts) {
  if (const std::string why = no_fp8_gpu(); !why.empty()) GTEST_SKIP() << why;
  const c10::Device gpu(c10::kCUDA, 0);
  if (const std::string why = cuda_kernels_unavailable(gpu); !why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(2);
  // The last length is past what the kernel's grid covers in one trip (65535 blocks of 2048).
  for (const int64_t n :
       {int64_t{1}, int64_t{1000}, int64_t{4097}, int64_t{3 * 1024 * 1024 + 5}, int64_t{65535} * 2048 + 4099}) {
    const bool huge = n > int64_t{65535} * 2048;
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      for (const bool zeros : {false, true}) {
        if (huge && (dtype == at::kFloat || zeros)) continue;  // one case of that size: bf16, random
        const at::Tensor x = zeros ? torch::zeros({n}, dtype) : (torch::randn({n}) * 30).to(dtype);
        for (const auto format : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
          const fp8::Cast want = fp8::cast(x, format, false);
          const fp8::Cast got = fp8::cast(x.to(gpu), format, true);
          EXPECT_TRUE(torch::equal(got.data.cpu().view(at::kByte), want.data.view(at::kByte)))
              << "n " << n << " dtype " << dtype << " format " << format << " zeros " << zeros;
          EXPECT_EQ(got.scale.item<float>(), want.scale.item<float>()) << "n " << n << " format " << format;
        }
      }
    }
  }
}

using test::train_on_gpu;

TEST(CudaFp8, Fp8RunsTrackBf16OnAtenAndOnTheKernelsOrAreRefusedByName) {
  if (!device::build_info().cuda_compiled || !device::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string why = no_fp8_gpu();
  if (!why.empty()) {
    test::TempDir d;
    try {
      train_on_gpu(d.path(), {"precision.mode=fp8"});
      ADD_FAILURE() << "fp8 trained on a GPU without fp8 tensor cores: " << why;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("8.9"), std::string::npos) << e.what();
    }
    return;
  }
  test::TempDir a, b, c;
  train_on_gpu(a.path(), {"precision.mode=bf16", "model.kernels=aten"});
  const auto s8 = train_on_gpu(b.path(), {"precision.mode=fp8", "model.kernels=aten"});
  std::vector<const test::TempDir*> fp8_runs = {&b};
  if (cuda_kernels_unavailable(c10::Device(c10::kCUDA, 0)).empty()) {
    train_on_gpu(c.path(), {"precision.mode=fp8", "model.kernels=frugal"});
    fp8_runs.push_back(&c);
  }
  EXPECT_EQ(s8["precision"], "fp8");
  const auto l16 = test::step_losses(a.path() + "/demo/metrics.jsonl");
  for (const auto* dir : fp8_runs)
    test::expect_curve_tracks(test::step_losses(dir->path() + "/demo/metrics.jsonl"), l16, 0.05, "fp8");
}

}  // namespace
}  // namespace frugal::cuda_fp8_test
