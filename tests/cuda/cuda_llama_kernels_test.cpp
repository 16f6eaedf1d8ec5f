// The Llama family's CUDA kernels (src/kernels/llama.cu, model.kernels = "frugal"; CTest label
// `cuda`): RMSNorm forward and backward and SwiGLU forward and backward give what frugal's CPU loops
// give (the same arithmetic; those loops are tested against ATen in tests/model/), the residual add
// fused into the norm what the sum and then the norm give, the rotary embedding into the
// attention's layout what ATen's apply_rope gives; in fp32 and bf16, on fresh inputs; the weight
// gradient is the same bits run after run; the chunked head on the classifier kernel what the full
// logits' cross-entropy gives; a Llama run on the kernels tracks one on ATen's operators, and so do
// LoRA and activation checkpointing on them in both families. Skipped without a GPU the kernels
// run on.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "frugal/core/compat.h"
#include "frugal/core/device.h"
#include "frugal/model/fused_llama.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/model/linear_cross_entropy.h"
#include "frugal/model/rope.h"
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
    // detach(): on the CPU side to(d) returns the input itself, which must stay a plain tensor
    for (int side = 0; side < 3; ++side) {  // the CPU loops, then the kernels twice
      const c10::Device d = side == 0 ? c10::Device(c10::kCPU) : gpu;
      at::Tensor x = x0.to(d).detach().requires_grad_(), w = w0.to(d).detach().requires_grad_();
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
      at::Tensor gu = gu0.to(d).detach().requires_grad_();
      at::Tensor act = fused_swiglu(gu, /*gpu_kernels=*/true);
      act.backward(dact.to(d));
      got[side] = {act.cpu(), gu.grad().cpu()};
    }
    EXPECT_LT(rel_err(got[1][0], got[0][0]), tolerance(t)) << "activation";
    EXPECT_LT(rel_err(got[1][1], got[0][1]), tolerance(t)) << "gradient";
  }
}

// residual_rms_norm: the sum and its norm in one kernel each way give what the sum and the CPU loops
// give, the gradients of x (the sum's and the norm's added), of y (the same, in y's dtype) and of
// the weight.
TEST(Cuda, LlamaKernelsAddTheResidualAndNormInOnePass) {
  if (const std::string why = no_kernels(); !why.empty()) GTEST_SKIP() << why;
  const c10::Device gpu(c10::kCUDA, 0);
  torch::manual_seed(7);
  struct Case {
    at::ScalarType x, y;
    bool normed_only;  // the sum's own output unused: no gradient reaches it
  };
  for (const Case& c : {Case{at::kFloat, at::kBFloat16, false}, Case{at::kFloat, at::kFloat, false},
                        Case{at::kBFloat16, at::kBFloat16, false}, Case{at::kFloat, at::kBFloat16, true}}) {
    SCOPED_TRACE(::testing::Message() << "x " << c.x << " y " << c.y << (c.normed_only ? " normed only" : ""));
    const int64_t rows = 777, C = 768;
    const at::Tensor x0 = torch::randn({rows, C}).to(c.x), y0 = torch::randn({rows, C}).to(c.y);
    const at::Tensor w0 = 1 + 0.2 * torch::randn({C});
    const at::Tensor dh = torch::randn({rows, C}).to(c.x), dn = torch::randn({rows, C}).to(c.y);
    std::vector<at::Tensor> got[2];
    for (int side = 0; side < 2; ++side) {
      const c10::Device d = side == 0 ? c10::Device(c10::kCPU) : gpu;
      at::Tensor x = x0.to(d).detach().requires_grad_(), y = y0.to(d).detach().requires_grad_(),
                 w = w0.to(d).detach().requires_grad_();
      const auto [h, normed] = residual_rms_norm(x, y, w, 1e-5, c.y, /*gpu_kernels=*/true);
      if (c.normed_only)
        normed.backward(dn.to(d));
      else
        torch::autograd::backward({h, normed}, {dh.to(d), dn.to(d)});
      got[side] = {h.cpu(), normed.cpu(), x.grad().cpu(), y.grad().cpu(), w.grad().cpu()};
    }
    EXPECT_EQ(got[1][3].scalar_type(), c.y);
    const char* names[] = {"sum", "normed", "gradient of x", "gradient of y", "weight gradient"};
    const double tol[] = {tolerance(c.x), tolerance(c.y), tolerance(c.x), tolerance(c.y), 1e-5};
    for (int i = 0; i < 5; ++i) EXPECT_LT(rel_err(got[1][i], got[0][i]), tol[i]) << names[i];
  }
}

// rope_split: the rotated queries and keys and the values in (B, heads, T, D), and the packed
// projection's gradient, as ATen's apply_rope on the heads and their transposes give them.
TEST(Cuda, LlamaKernelsRotateIntoTheAttentionsLayout) {
  if (const std::string why = no_kernels(); !why.empty()) GTEST_SKIP() << why;
  const c10::Device gpu(c10::kCUDA, 0);
  torch::manual_seed(6);
  struct Shape {
    int64_t B, T, H, K, D;
  };
  // A row of 128 pairs (under one block's threads) and one of 3072 (the block strides over it).
  for (const auto& [B, T, H, K, D] : {Shape{3, 80, 4, 2, 32}, Shape{2, 40, 32, 8, 128}})
    for (const auto t : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << t << " heads " << H << "/" << K << " of " << D);
      const RopeTables tables = rope_tables(test::rope_model(D), 96, gpu);  // the tables of heads of D
      const at::Tensor x0 = torch::randn({B, T, (H + 2 * K) * D}).to(gpu, t);
      const std::vector<at::Tensor> g = {torch::randn({B, H, T, D}).to(gpu, t), torch::randn({B, K, T, D}).to(gpu, t),
                                         torch::randn({B, K, T, D}).to(gpu, t)};
      ASSERT_TRUE(rope_split_runs(x0, tables.cos, tables.sin, H, K));
      std::vector<at::Tensor> got[2];
      for (int side = 0; side < 2; ++side) {  // ATen's operators, then the kernel
        at::Tensor x = x0.clone().requires_grad_();
        std::vector<at::Tensor> heads;
        if (side == 0) {
          heads = {apply_rope(x.narrow(2, 0, H * D).view({B, T, H, D}), tables, 0).transpose(1, 2),
                   apply_rope(x.narrow(2, H * D, K * D).view({B, T, K, D}), tables, 0).transpose(1, 2),
                   x.narrow(2, (H + K) * D, K * D).view({B, T, K, D}).transpose(1, 2)};
        } else {
          heads = rope_split(x, tables.cos, tables.sin, H, K);
          for (const auto& h : heads) EXPECT_TRUE(h.is_contiguous());
        }
        ((heads[0] * g[0]).sum() + (heads[1] * g[1]).sum() + (heads[2] * g[2]).sum()).backward();
        got[side] = {heads[0], heads[1], heads[2], x.grad()};
      }
      const char* names[] = {"queries", "keys", "values", "gradient of qkv"};
      for (int i = 0; i < 4; ++i) EXPECT_LT(rel_err(got[1][i], got[0][i]), tolerance(t)) << names[i];
      const at::ScalarType bits = t == at::kFloat ? at::kInt : at::kShort;  // equal bits, not only values
      EXPECT_TRUE(torch::equal(got[1][2].view(bits), got[0][2].contiguous().view(bits)))
          << "the values are copied, not changed";
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

// What model.kernels = "auto" leaves on ATen's operators until a GPU check has run it on the
// kernels (train/run_setup.h, choose_kernels): LoRA adapters and activation checkpointing, in both
// families. Each run on the kernels follows the same run on ATen's within 2% at every logged step.
TEST(Cuda, LoraAndActivationCheckpointingOnTheKernelsTrackTheAtenPath) {
  if (const std::string why = no_kernels(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<std::string> gpt = {}, llama = {"model.arch=llama", "model.heads=4", "model.kv_heads=2",
                                                    "model.tie_embeddings=false", "model.dropout=0"};
  for (const auto* family : {&gpt, &llama})
    for (const char* lever : {"lora.rank=4", "memory.activation_checkpointing=blocks"}) {
      SCOPED_TRACE(::testing::Message() << (family == &gpt ? "GPT, " : "Llama, ") << lever);
      std::vector<std::vector<double>> curves;
      for (const char* k : {"model.kernels=aten", "model.kernels=frugal"}) {
        test::TempDir d;
        std::vector<std::string> sets = *family;
        sets.insert(sets.end(), {"precision.mode=bf16", lever, k});
        const auto s = test::train_on_gpu(d.path(), sets);
        EXPECT_EQ(s["levers"]["kernels"], std::string(k).substr(14));
        curves.push_back(test::step_losses(d.path() + "/demo/metrics.jsonl"));
      }
      ASSERT_EQ(curves[1].size(), curves[0].size());
      ASSERT_FALSE(curves[0].empty());
      for (size_t i = 0; i < curves[0].size(); ++i) EXPECT_NEAR(curves[1][i], curves[0][i], 0.02 * curves[0][i]) << i;
    }
}

// Chunks of logits the classifier kernel ran on (RECORD_FUNCTION "frugal::fused_classifier_block").
int classifier_blocks = 0;
std::unique_ptr<at::ObserverContext> count_classifier_blocks(const at::RecordFunction& fn) {
  if (std::string(fn.name()) == "frugal::fused_classifier_block") ++classifier_blocks;
  return nullptr;
}

// The Llama family's chunked head + cross-entropy on a GPU (model/linear_cross_entropy.h), its head
// padded to 64 rows: on the classifier kernel (each chunk's logits in the compute dtype) and on
// ATen's operators, in fp32 and under bf16 autocast, give the cross-entropy of the full logits
// (the CPU in double), ignored targets included; the kernel ran on every chunk.
TEST(Cuda, LlamaHeadOnTheClassifierKernelGivesTheCrossEntropyOfTheFullLogits) {
  if (const std::string why = no_kernels(); !why.empty()) GTEST_SKIP() << why;
  const c10::Device gpu(c10::kCUDA, 0);
  device::set_tf32(false);  // fp32 products in fp32: a run earlier in this process may have turned TF32 on
  torch::manual_seed(8);
  const int64_t N = 300, C = 64, V = 1000, chunk = 128;  // 3 chunks, the last of 44 rows
  const at::Tensor x0 = torch::randn({N, C}), w0 = torch::randn({V, C}) * 0.1;
  at::Tensor t = torch::randint(0, V, {N}, torch::kLong);
  t.index_put_({5}, -100);
  t.index_put_({77}, -100);
  at::Tensor xr = x0.to(at::kDouble).requires_grad_(), wr = w0.to(at::kDouble).requires_grad_();
  const at::Tensor ref = torch::cross_entropy_loss(at::linear(xr, wr), t);
  (ref * 3).backward();
  for (const bool bf16 : {false, true})
    for (const bool kernels : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (bf16 ? "bf16" : "fp32") << (kernels ? ", kernel" : ", ATen"));
      at::Tensor x = x0.to(gpu).detach().requires_grad_(), w = w0.to(gpu).detach().requires_grad_();
      classifier_blocks = 0;
      const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(count_classifier_blocks));
      at::Tensor loss;
      {
        compat::AutocastGuard autocast(c10::DeviceType::CUDA, at::kBFloat16, bf16);
        loss = linear_cross_entropy(x, w, t.to(gpu), chunk, -100, 64, kernels);
      }
      (loss * 3).backward();
      at::removeCallback(handle);
      EXPECT_EQ(classifier_blocks, kernels ? 3 : 0);
      const double tol = bf16 ? 2e-2 : 1e-5;
      EXPECT_NEAR(loss.item<double>(), ref.item<double>(), tol * ref.item<double>());
      EXPECT_LT(rel_err(x.grad(), xr.grad()), bf16 ? 2e-2 : 1e-4) << "input gradient";
      EXPECT_LT(rel_err(w.grad(), wr.grad()), bf16 ? 2e-2 : 1e-4) << "weight gradient";
    }
}

}  // namespace
}  // namespace frugal::cuda_llama_kernels_test
