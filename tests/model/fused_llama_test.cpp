// The Llama family's fused CPU ops against their ATen references: RMSNorm and SwiGLU
// (fused_llama.h), and the grouped-query attention with rotary positions and a sliding window
// (fused_attention.h's fused_gqa_attention against llama.cpp's formula: apply_rope, repeated
// key/value heads, a masked softmax), values and gradients, float and bfloat16, every CPU level,
// any thread count.
#include "frugal/model/fused_llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "frugal/model/fused_attention.h"
#include "frugal/model/rope.h"
#include "model/internal/attention_kernel.h"
#include "test_util.h"

namespace frugal::fused_llama_test {
namespace {

struct Grads {
  at::Tensor y, dx, dw;
};

Grads run_norm(bool fused, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& dy, c10::ScalarType out) {
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  at::Tensor y = fused ? fused_rms_norm(x, w, 1e-5, out) : rms_norm_reference(x, w, 1e-5).to(out);
  y.backward(dy.to(out));
  return {y.detach().to(at::kFloat), x.grad(), w.grad()};
}

// Weights 1 + noise and rows of different scales, so a mix-up of the scale, the weight or a row
// shows in the values and in both gradients.
TEST(FusedLlama, RmsNormMatchesTheReferenceInFloatAndItsGradients) {
  torch::manual_seed(1);
  const at::Tensor x = torch::randn({3, 5, 72}) * torch::rand({3, 5, 1}) * 4;
  const at::Tensor w = 1 + 0.3 * torch::randn({72});
  const at::Tensor dy = torch::randn({3, 5, 72});
  const Grads a = run_norm(true, x, w, dy, at::kFloat), b = run_norm(false, x, w, dy, at::kFloat);
  EXPECT_TRUE(torch::allclose(a.y, b.y, 1e-5, 1e-6)) << (a.y - b.y).abs().max();
  EXPECT_TRUE(torch::allclose(a.dx, b.dx, 1e-4, 1e-5)) << (a.dx - b.dx).abs().max();
  EXPECT_TRUE(torch::allclose(a.dw, b.dw, 1e-4, 1e-5)) << (a.dw - b.dw).abs().max();
}

// Under autocast the norm's output is bfloat16 from a float residual; the gradient reaching it is
// bfloat16 too. Within bfloat16's rounding of the reference.
TEST(FusedLlama, RmsNormWritesBfloat16FromFloatAndTakesItsGradientBack) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({4, 40}) * 3, w = 1 + 0.2 * torch::randn({40}), dy = torch::randn({4, 40});
  const Grads a = run_norm(true, x, w, dy, at::kBFloat16), b = run_norm(false, x, w, dy, at::kFloat);
  EXPECT_TRUE(torch::allclose(a.y, b.y, 1e-2, 1e-2)) << (a.y - b.y).abs().max();
  EXPECT_EQ(a.dx.scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::allclose(a.dx, b.dx, 2e-2, 2e-2)) << (a.dx - b.dx).abs().max();
}

TEST(FusedLlama, RmsNormGradientsDoNotDependOnTheThreadCount) {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({300, 48}), w = torch::randn({48}), dy = torch::randn({300, 48});
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const Grads one = run_norm(true, x, w, dy, at::kFloat);
  at::set_num_threads(2);
  const Grads two = run_norm(true, x, w, dy, at::kFloat);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.dw, two.dw));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
}

TEST(FusedLlama, SwigluMatchesSiluTimesUpAndItsGradients) {
  torch::manual_seed(4);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor gu0 = (torch::randn({2, 7, 2 * 36}) * 4).to(dtype), dy = torch::randn({2, 7, 36}).to(dtype);
    at::Tensor a = gu0.clone().requires_grad_(true), b = gu0.to(at::kFloat).clone().requires_grad_(true);
    const at::Tensor ya = fused_swiglu(a), yb = swiglu_reference(b);
    ya.backward(dy);
    yb.backward(dy.to(at::kFloat));
    const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_TRUE(torch::allclose(ya.to(at::kFloat), yb, tol, tol)) << dtype;
    EXPECT_TRUE(torch::allclose(a.grad().to(at::kFloat), b.grad(), tol, tol))
        << dtype << " " << (a.grad().to(at::kFloat) - b.grad()).abs().max();
  }
}

// The attention as llama.cpp's reference path computes it: rotated q and k, key/value heads
// repeated to the query heads, scores masked causally (and outside the window), softmax, values.
at::Tensor reference_attention(const at::Tensor& qkv, int64_t H, int64_t K, const RopeTables* rope, int64_t window) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (H + 2 * K);
  at::Tensor q = qkv.narrow(2, 0, H * D).view({B, T, H, D});
  at::Tensor k = qkv.narrow(2, H * D, K * D).view({B, T, K, D});
  at::Tensor v = qkv.narrow(2, (H + K) * D, K * D).view({B, T, K, D});
  if (rope) {
    q = apply_rope(q, *rope, 0);
    k = apply_rope(k, *rope, 0);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2).repeat_interleave(H / K, 1);
  v = v.transpose(1, 2).repeat_interleave(H / K, 1);
  const at::Tensor i = torch::arange(T).unsqueeze(1), j = torch::arange(T).unsqueeze(0);
  at::Tensor blocked = j > i;
  if (window > 0) blocked = blocked.logical_or(j <= i - window);
  at::Tensor s = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(D));
  s = s.masked_fill(blocked, -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(s, -1), v).transpose(1, 2).reshape({B, T, H * D});
}

struct Case {
  int64_t H, K, D, T;
  bool rope;
  int64_t window;
};

// Every case against the formula, forward and backward: GQA groups of 1, 2 and 4, heads of 16
// and 24 channels (the tile width and not), lengths below and across a tile, windows.
void check_case(const Case& c, c10::ScalarType dtype, double tol) {
  torch::manual_seed(c.H * 100 + c.K * 10 + c.T);
  const at::Tensor qkv0 = torch::randn({2, c.T, (c.H + 2 * c.K) * c.D});
  const RopeTables tables = rope_tables(test::rope_model(c.D), 64, c10::kCPU);
  at::Tensor a = qkv0.to(dtype).clone().requires_grad_(true), b = qkv0.clone().requires_grad_(true);
  const at::Tensor ya = fused_gqa_attention(a, c.H, c.K, c.rope ? tables.cos : at::Tensor(),
                                            c.rope ? tables.sin : at::Tensor(), c.window);
  const at::Tensor yb = reference_attention(b, c.H, c.K, c.rope ? &tables : nullptr, c.window);
  const at::Tensor dy = torch::randn(yb.sizes());
  ya.backward(dy.to(dtype));
  yb.backward(dy);
  const std::string what = ::testing::PrintToString(std::vector<int64_t>{c.H, c.K, c.D, c.T, c.rope, c.window});
  EXPECT_TRUE(torch::allclose(ya.to(at::kFloat), yb, tol, tol)) << what << " " << (ya.to(at::kFloat) - yb).abs().max();
  EXPECT_TRUE(torch::allclose(a.grad().to(at::kFloat), b.grad(), tol, tol))
      << what << " " << (a.grad().to(at::kFloat) - b.grad()).abs().max();
}

const Case kCases[] = {{4, 2, 16, 24, true, 0},  {4, 4, 16, 20, true, 0}, {4, 1, 24, 13, true, 0},
                       {2, 2, 16, 40, false, 0}, {4, 2, 16, 30, true, 7}, {6, 2, 24, 9, true, 3}};

TEST(FusedLlama, GqaAttentionMatchesTheFormulaInFloat) {
  for (const Case& c : kCases) check_case(c, at::kFloat, 2e-5);
}

TEST(FusedLlama, GqaAttentionMatchesTheFormulaInBfloat16) {
  for (const Case& c : kCases) check_case(c, at::kBFloat16, 3e-2);
}

TEST(FusedLlama, GqaAttentionAtEveryCpuLevel) {
  const int before = internal::attention_level();
  for (int level : internal::attention_levels()) {
    internal::set_attention_level(level);
    for (const Case& c : kCases) check_case(c, at::kFloat, 2e-5);
  }
  internal::set_attention_level(before);
}

// The key and value gradients of a group are summed in scratch in a fixed order by one task, so
// the thread count changes no bit (a resumed run keeps its thread count; data parallel may not).
TEST(FusedLlama, GqaAttentionGradientsDoNotDependOnTheThreadCount) {
  torch::manual_seed(7);
  const at::Tensor qkv0 = torch::randn({3, 32, (4 + 2 * 2) * 16});
  const RopeTables t = rope_tables(test::rope_model(16), 64, c10::kCPU);
  auto grad_with = [&](int threads) {
    at::set_num_threads(threads);
    at::Tensor x = qkv0.clone().requires_grad_(true);
    fused_gqa_attention(x, 4, 2, t.cos, t.sin, 0).pow(2).sum().backward();
    return x.grad();
  };
  const int before = at::get_num_threads();
  const at::Tensor one = grad_with(1), two = grad_with(2);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one, two));
}

TEST(FusedLlama, GqaAttentionRefusesWhatItCannotRun) {
  EXPECT_FALSE(fused_gqa_attention_supported(torch::zeros({1, 4, 5 * 16}), 4, 3));  // 3 does not divide 4
  EXPECT_FALSE(fused_gqa_attention_supported(torch::zeros({1, 4, 6 * 15}), 4, 1));  // odd head
  EXPECT_FALSE(fused_gqa_attention_supported(torch::zeros({1, 4, 6 * 16}, torch::kDouble), 4, 1));
  EXPECT_TRUE(fused_gqa_attention_supported(torch::zeros({1, 4, 6 * 16}), 4, 1));
  EXPECT_THROW(fused_gqa_attention(torch::zeros({1, 4, 5 * 16}), 4, 3, {}, {}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace frugal::fused_llama_test
