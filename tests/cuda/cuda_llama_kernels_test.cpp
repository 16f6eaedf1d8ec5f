// The Llama family's CUDA kernels (src/kernels/llama.cu, model.kernels = "frugal"; CTest label
// `cuda`): RMSNorm forward and backward and SwiGLU forward and backward give what frugal's CPU loops
// give (the same arithmetic; those loops are tested against ATen in tests/model/), in fp32 and bf16,
// on fresh inputs into outputs the kernels must fill; the weight gradient is the same bits run after
// run; a Llama run on the kernels tracks one on ATen's operators. Skipped without a GPU the kernels
// run on.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "frugal/core/device.h"
#include "frugal/model/fused_llama.h"
#include "frugal/model/kernel_ops.h"
#include "cuda_util.h"
#include "test_util.h"

namespace frugal::cuda_llama_kernels_test {
namespace {

std::string no_kernels() {
  if (!cuda_kernels_built()) return "frugal was built without its CUDA kernels";
  if (!device::cuda_available()) return "no CUDA device visible to this process";
  return cuda_kernels_unavailable(c10::Device(c10::kCUDA, 0));
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  const double denom = w.norm().item<double>();
  return (g - w).norm().item<double>() / (denom > 0 ? denom : 1.0);
}

// fp32 results to 1e-5 (the same float arithmetic, sums in another order), bf16 ones to a rounding.
double tolerance(at::ScalarType t) { return t == at::kBFloat16 ? 8e-3 : 1e-5; }

struct Norm {
  at::ScalarType x, out;
  int64_t rows, cols;
};

TEST(Cuda, LlamaKernelsGiveTheCpuLoopsResultsAndTheSameBitsTwice) {
  if (const std::string why = no_kernels(); !why.empty()) GTEST_SKIP() << why;
  const c10::Device gpu(c10::kCUDA, 0);
  torch::manual_seed(5);
  for (const Norm& s : {Norm{at::kFloat, at::kBFloat16, 4096, 768}, Norm{at::kBFloat16, at::kBFloat16, 300, 4096},
                        Norm{at::kFloat, at::kFloat, 1, 100}, Norm{at::kFloat, at::kBFloat16, 7, 1000},
                        Norm{at::kFloat, at::kFloat, 1500, 64}}) {
    SCOPED_TRACE(::testing::Message() << "x " << s.x << " out " << s.out << " rows " << s.rows << " cols " << s.cols);
    const at::Tensor x0 = torch::randn({s.rows, s.cols}).to(s.x), w0 = 1 + 0.3 * torch::randn({s.cols});
    const at::Tensor dy = torch::randn({s.rows, s.cols}).to(s.out);
    std::vector<at::Tensor> got[3];
    for (int side = 0; side < 3; ++side) {  // the CPU loops, then the kernels twice
      const c10::Device d = side == 0 ? c10::Device(c10::kCPU) : gpu;
      at::Tensor x = x0.to(d).requires_grad_(), w = w0.to(d).requires_grad_();
      at::Tensor y = fused_rms_norm(x, w, 1e-6, s.out, /*gpu_kernels=*/true);
      y.backward(dy.to(d));
      got[side] = {y.cpu(), x.grad().cpu(), w.grad().cpu()};
    }
    EXPECT_LT(rel_err(got[1][0], got[0][0]), tolerance(s.out)) << "output";
    EXPECT_LT(rel_err(got[1][1], got[0][1]), tolerance(s.x)) << "input gradient";
    EXPECT_LT(rel_err(got[1][2], got[0][2]), 1e-5) << "weight gradient";
    EXPECT_FALSE(got[1][1].isnan().any().item<bool>());
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(torch::equal(got[1][i], got[2][i])) << "a second run gave other bits, " << i;
  }
  for (const auto t : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << "swiglu " << t);
    const at::Tensor gu0 = (3 * torch::randn({333, 2 * 688})).to(t), dact = torch::randn({333, 688}).to(t);
    std::vector<at::Tensor> got[2];
    for (int side = 0; side < 2; ++side) {
      const c10::Device d = side == 0 ? c10::Device(c10::kCPU) : gpu;
      at::Tensor gu = gu0.to(d).requires_grad_();
      at::Tensor act = fused_swiglu(gu, /*gpu_kernels=*/true);
      act.backward(dact.to(d));
      got[side] = {act.cpu(), gu.grad().cpu()};
    }
    EXPECT_LT(rel_err(got[1][0], got[0][0]), tolerance(t)) << "activation";
    EXPECT_LT(rel_err(got[1][1], got[0][1]), tolerance(t)) << "gradient";
  }
}

// A Llama run on the kernels follows one on ATen's operators: within 2% at every logged step.
TEST(Cuda, LlamaTrainingOnFrugalKernelsTracksTheAtenPath) {
  if (const std::string why = no_kernels(); !why.empty()) GTEST_SKIP() << why;
  std::vector<std::vector<double>> curves;
  for (const char* k : {"model.kernels=aten", "model.kernels=frugal"}) {
    test::TempDir d;
    test::train_on_gpu(d.path(), {"precision.mode=bf16", "model.arch=llama", "model.heads=4", "model.kv_heads=2",
                                  "model.tie_embeddings=false", "model.dropout=0", k});
    curves.push_back(test::step_losses(d.path() + "/demo/metrics.jsonl"));
  }
  test::expect_curve_tracks(curves[1], curves[0], 0.02, "the Llama kernel path");
}

}  // namespace
}  // namespace frugal::cuda_llama_kernels_test
