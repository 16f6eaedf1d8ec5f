// The fused causal attention against the textbook formula in plain ATen ops: values and
// gradients in float and bfloat16 (with the softmax kept for the backward and recomputed), shapes
// whose rows are not a multiple of the vector width, thread-count independence, non-finite
// values, and what it refuses.
#include "frugal/model/fused_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "model/internal/attention_kernel.h"

namespace frugal::fused_attention_test {
namespace {

// softmax(q k^T / sqrt(D) with -inf above the diagonal) v, heads interleaved back into (B, T, C).
at::Tensor reference(const at::Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  auto p = qkv.view({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});
  auto att = torch::matmul(p[0], p[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  att = att.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(att, -1), p[2]).transpose(1, 2).reshape({B, T, C});
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

struct Grads {
  at::Tensor y, dqkv;
};

Grads run(const at::Tensor& qkv, const at::Tensor& dy, int64_t heads, bool fused) {
  auto x = qkv.clone().requires_grad_(true);
  auto y = fused ? fused_causal_attention(x, heads) : reference(x, heads);
  y.backward(dy);
  return {y.detach(), x.grad()};
}

// (B, T, 3C) with scores of a realistic spread (softmax neither uniform nor one-hot).
at::Tensor make_qkv(int64_t B, int64_t T, int64_t heads, int64_t D, at::ScalarType dtype = at::kFloat) {
  return (torch::randn({B, T, 3 * heads * D}) * 1.5).to(dtype);
}

// The fused op's values and gradients against the formula in double, for one float input (and
// with also_bf16, its values for the same input rounded to bfloat16).
void expect_matches_formula(int64_t B, int64_t T, int64_t H, int64_t D, bool also_bf16 = false) {
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " H=" << H << " D=" << D);
  auto qkv = make_qkv(B, T, H, D);
  auto dy = torch::randn({B, T, H * D});
  auto ref = run(qkv.to(torch::kDouble), dy.to(torch::kDouble), H, false);
  auto fused = run(qkv, dy, H, true);
  EXPECT_LT(max_abs_diff(fused.y, ref.y), 1e-5);
  EXPECT_LT(max_abs_diff(fused.dqkv, ref.dqkv), 2e-5);
  if (also_bf16) {
    EXPECT_LT(max_abs_diff(run(qkv.to(at::kBFloat16), dy.to(at::kBFloat16), H, true).y, ref.y), 0.05);
  }
}

TEST(FusedAttention, MatchesTheFormulaInFloat) {
  torch::manual_seed(1);
  // The demo's shape (read and written in place), then rows and head sizes that leave scalar
  // tails in every loop, the last with T > 3 D, so that its backward recomputes the softmax
  // instead of reading it back; then two more in-place shapes: one whose kept softmax rows need
  // padding, one that recomputes.
  for (auto [B, T, H, D] : {std::array<int64_t, 4>{4, 64, 4, 32},
                            {3, 37, 3, 24},
                            {2, 1, 2, 8},
                            {1, 130, 2, 5},
                            {2, 40, 3, 32},
                            {2, 104, 2, 16}})
    expect_matches_formula(B, T, H, D);
}

TEST(FusedAttention, MatchesTheFormulaInBfloat16) {
  torch::manual_seed(2);
  // T <= 3 D: the softmax is kept for the backward; T > 3 D: recomputed from the row statistics.
  for (auto [B, T, H, D] : {std::array<int64_t, 4>{2, 48, 4, 16}, {2, 70, 2, 8}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " D=" << D);
    auto qkv = make_qkv(B, T, H, D, at::kBFloat16);
    auto dy = torch::randn({B, T, H * D}).to(at::kBFloat16);
    auto fused = run(qkv, dy, H, true);
    EXPECT_EQ(fused.y.scalar_type(), at::kBFloat16);
    EXPECT_EQ(fused.dqkv.scalar_type(), at::kBFloat16);
    // Exact maths on the same bf16 inputs: the kernel computes in float and rounds once, so it
    // is within one bf16 rounding (2^-8 relative) of the result plus float noise.
    auto ref = run(qkv.to(torch::kDouble), dy.to(torch::kDouble), H, false);
    auto tol = [](const at::Tensor& r) { return r.abs() * (1.0 / 256) + 1e-4; };
    EXPECT_TRUE(((fused.y.to(torch::kDouble) - ref.y).abs() <= tol(ref.y)).all().item<bool>());
    EXPECT_TRUE(((fused.dqkv.to(torch::kDouble) - ref.dqkv).abs() <= tol(ref.dqkv)).all().item<bool>());
  }
}

// The loops are compiled once per x86-64 level with a register tile of that level's width; each
// level this CPU can run (the baseline always) computes the formula, values and gradients, on a
// shape whose rows and head size leave tails in every tile.
TEST(FusedAttention, EveryCpuLevelMatchesTheFormula) {
  const int before = internal::attention_level();
  const auto levels = internal::attention_levels();
  ASSERT_EQ(levels.front(), 1);
  EXPECT_EQ(before, levels.back()) << "the best level is the one in use";
  for (int level : levels) {
    SCOPED_TRACE(::testing::Message() << "x86-64 level " << level);
    internal::set_attention_level(level);
    torch::manual_seed(7);
    // bf16 too: its loops are separate entry points per level.
    for (auto [B, T, H, D] : {std::array<int64_t, 4>{2, 64, 4, 32}, {2, 45, 3, 20}})
      expect_matches_formula(B, T, H, D, /*also_bf16=*/true);
  }
  internal::set_attention_level(before);
  EXPECT_THROW(internal::set_attention_level(2), std::invalid_argument);
}

TEST(FusedAttention, ResultsDoNotDependOnTheThreadCount) {
  torch::manual_seed(3);
  auto qkv = make_qkv(3, 40, 4, 16);
  auto dy = torch::randn({3, 40, 64});
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  auto one = run(qkv, dy, 4, true);
  at::set_num_threads(2);
  auto two = run(qkv, dy, 4, true);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dqkv, two.dqkv));
}

TEST(FusedAttention, WithoutGradientGivesTheSameValues) {
  torch::manual_seed(4);
  auto qkv = make_qkv(2, 20, 2, 8);
  at::Tensor plain;
  {
    torch::NoGradGuard no_grad;
    plain = fused_causal_attention(qkv, 2);
  }
  EXPECT_TRUE(torch::equal(plain, fused_causal_attention(qkv.clone().requires_grad_(true), 2).detach()));
}

TEST(FusedAttention, NonContiguousInputIsRead) {
  torch::manual_seed(5);
  auto wide = make_qkv(2, 24, 2, 8).repeat({1, 1, 2});  // (2, 24, 96): take every other column block
  auto qkv = wide.narrow(2, 48, 48);
  ASSERT_FALSE(qkv.is_contiguous());
  EXPECT_LT(max_abs_diff(fused_causal_attention(qkv, 2), reference(qkv.to(torch::kDouble), 2)), 1e-5);
}

TEST(FusedAttention, NanReachesTheOutputOfItsRowsOnly) {
  torch::manual_seed(6);
  auto qkv = make_qkv(1, 8, 1, 4);
  qkv[0][5][4] = std::numeric_limits<float>::quiet_NaN();  // key 5's first component
  auto y = fused_causal_attention(qkv, 1);
  // Queries 0..4 never see key 5; queries 5..7 do.
  EXPECT_FALSE(torch::isnan(y.narrow(1, 0, 5)).any().item<bool>());
  EXPECT_TRUE(torch::isnan(y.narrow(1, 5, 3)).all().item<bool>());
}

TEST(FusedAttention, RefusesWhatItCannotRun) {
  EXPECT_FALSE(fused_attention_supported(torch::zeros({2, 4, 10}), 2));  // 10 is not 3 * 2 * D
  EXPECT_FALSE(fused_attention_supported(torch::zeros({2, 4, 12}, torch::kDouble), 2));
  EXPECT_FALSE(fused_attention_supported(torch::zeros({4, 12}), 2));
  EXPECT_TRUE(fused_attention_supported(torch::zeros({2, 4, 12}), 2));
  try {
    fused_causal_attention(torch::zeros({2, 4, 10}), 2);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4, 10]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::fused_attention_test
