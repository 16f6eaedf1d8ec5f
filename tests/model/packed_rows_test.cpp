// Packed rows (several documents a row, data.packing = pack; causal_lm.h's positions): frugal's
// CPU attention kernels for both families against the masked formula in double, values and
// gradients, at every x86 level, with the softmax kept and recomputed; no value and no gradient
// crosses a document boundary; a packed row computes, document by document, the logits, losses and
// gradients each document has alone (GPT and Llama, on the kernels in float and on ATen's masked
// path in double, with a sliding window); positions that do not count up are refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "frugal/data/packing.h"
#include "frugal/model/causal_lm.h"
#include "frugal/model/fused_attention.h"
#include "frugal/model/model_family.h"
#include "frugal/model/rope.h"
#include "model/internal/attention_kernel.h"
#include "test_util.h"

namespace frugal::packed_rows_test {
namespace {

// (B, T) positions of rows holding documents of these lengths, each row's rest one more document.
at::Tensor positions_of(const std::vector<std::vector<int64_t>>& rows, int64_t T) {
  at::Tensor p = torch::zeros({static_cast<int64_t>(rows.size()), T}, torch::kLong);
  for (size_t b = 0; b < rows.size(); ++b) {
    int64_t t = 0;
    for (int64_t n : rows[b])
      for (int64_t u = 0; u < n; ++u) p[static_cast<int64_t>(b)][t++] = u;
    for (int64_t u = 0; t < T; ++u) p[static_cast<int64_t>(b)][t++] = u;
  }
  return p;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The GPT's attention by the formula: q, k, v of (B, T, 3, H, D), masked per document.
at::Tensor gpt_reference(const at::Tensor& qkv, int64_t H, const at::Tensor& pos) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / H;
  const auto p = qkv.view({B, T, 3, H, D}).permute({2, 0, 3, 1, 4});
  at::Tensor att = torch::matmul(p[0], p[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  att = att.masked_fill(document_attention_mask(pos).logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(att, -1), p[2]).transpose(1, 2).reshape({B, T, C});
}

// The Llama family's: grouped heads, each token rotated for its place in its document.
at::Tensor gqa_reference(const at::Tensor& qkv, int64_t H, int64_t K, const RopeTables& rope, int64_t window,
                         const at::Tensor& pos) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (H + 2 * K);
  RopeTables r{rope.cos.to(qkv.scalar_type()), rope.sin.to(qkv.scalar_type())};
  at::Tensor q = apply_rope(qkv.narrow(2, 0, H * D).view({B, T, H, D}), r, pos).transpose(1, 2);
  at::Tensor k = apply_rope(qkv.narrow(2, H * D, K * D).view({B, T, K, D}), r, pos).transpose(1, 2);
  at::Tensor v = qkv.narrow(2, (H + K) * D, K * D).view({B, T, K, D}).transpose(1, 2);
  k = k.repeat_interleave(H / K, 1);
  v = v.repeat_interleave(H / K, 1);
  at::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  att = att.masked_fill(document_attention_mask(pos, window).logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(att, -1), v).transpose(1, 2).reshape({B, T, H * D});
}

struct Case {
  int64_t T, H, D;
  std::vector<std::vector<int64_t>> docs;
};

// The fused op at every x86 level against the formula in double: values and the gradient of qkv.
// T > 3 D makes the backward recompute the softmax; T <= 3 D reads the kept one.
TEST(PackedRows, TheGptKernelMatchesTheMaskedFormula) {
  const int saved = internal::attention_level();
  for (const Case& c : {Case{21, 2, 16, {{5, 9, 7}, {1, 20}}}, Case{40, 2, 8, {{13, 1, 26}, {40}}},
                        Case{24, 3, 24, {{8, 8, 8}, {3, 4, 5, 6}}}}) {
    torch::manual_seed(c.T);
    const at::Tensor qkv = torch::randn({2, c.T, 3 * c.H * c.D}) * 1.5, dy = torch::randn({2, c.T, c.H * c.D});
    const at::Tensor pos = positions_of(c.docs, c.T);
    at::Tensor ref_in = qkv.to(torch::kDouble).requires_grad_(true);
    const at::Tensor ref = gpt_reference(ref_in, c.H, pos);
    ref.backward(dy.to(torch::kDouble));
    for (int level : internal::attention_levels()) {
      SCOPED_TRACE(::testing::Message() << "T=" << c.T << " D=" << c.D << " level " << level);
      internal::set_attention_level(level);
      at::Tensor in = qkv.clone().requires_grad_(true);
      const at::Tensor y = fused_causal_attention(in, c.H, pos);
      y.backward(dy);
      EXPECT_LT(max_abs_diff(y, ref), 1e-5);
      EXPECT_LT(max_abs_diff(in.grad(), ref_in.grad()), 2e-5);
    }
  }
  internal::set_attention_level(saved);
}

TEST(PackedRows, TheLlamaKernelMatchesTheMaskedFormulaWithRotationsFromEachDocumentsStart) {
  for (int64_t window : {0, 4}) {
    const int64_t T = 19, H = 4, K = 2, D = 16;
    torch::manual_seed(window + 1);
    const at::Tensor qkv = torch::randn({2, T, (H + 2 * K) * D}), dy = torch::randn({2, T, H * D});
    const at::Tensor pos = positions_of({{6, 7, 6}, {2, 17}}, T);
    const RopeTables rope = rope_tables(test::rope_model(D), 64, c10::kCPU);
    at::Tensor ref_in = qkv.to(torch::kDouble).requires_grad_(true), in = qkv.clone().requires_grad_(true);
    const at::Tensor ref = gqa_reference(ref_in, H, K, rope, window, pos);
    const at::Tensor y = fused_gqa_attention(in, H, K, rope.cos, rope.sin, window, pos);
    ref.backward(dy.to(torch::kDouble));
    y.backward(dy);
    EXPECT_LT(max_abs_diff(y, ref), 1e-5) << "window " << window;
    EXPECT_LT(max_abs_diff(in.grad(), ref_in.grad()), 2e-5) << "window " << window;
    // Without positions the same row is one document: the rotations and the mask differ.
    EXPECT_GT(max_abs_diff(fused_gqa_attention(qkv, H, K, rope.cos, rope.sin, window), ref), 1e-2);
  }
}

// Documents of 6, 7 and 8 tokens in one row: changing the middle one changes nothing in the
// others' outputs (bit for bit), and the last one's outputs have no gradient in the others' inputs.
TEST(PackedRows, NoValueAndNoGradientCrossesADocumentBoundary) {
  const int64_t T = 21, H = 4, K = 2, D = 16;
  const at::Tensor pos = positions_of({{6, 7, 8}}, T);
  const RopeTables rope = rope_tables(test::rope_model(D), 64, c10::kCPU);
  const auto gpt = [&](const at::Tensor& x) { return fused_causal_attention(x, H, pos); };
  const auto llama = [&](const at::Tensor& x) { return fused_gqa_attention(x, H, K, rope.cos, rope.sin, 0, pos); };
  for (int64_t width : {3 * H * D, (H + 2 * K) * D}) {
    const bool is_gpt = width == 3 * H * D;
    const auto op = [&](const at::Tensor& x) { return is_gpt ? gpt(x) : llama(x); };
    torch::manual_seed(width);
    const at::Tensor qkv = torch::randn({1, T, width});
    at::Tensor changed = qkv.clone();
    changed.narrow(1, 6, 7).normal_();
    const at::Tensor a = op(qkv), b = op(changed);
    EXPECT_TRUE(a.narrow(1, 0, 6).equal(b.narrow(1, 0, 6))) << (is_gpt ? "gpt" : "llama");
    EXPECT_TRUE(a.narrow(1, 13, 8).equal(b.narrow(1, 13, 8))) << (is_gpt ? "gpt" : "llama");
    EXPECT_FALSE(a.narrow(1, 6, 7).equal(b.narrow(1, 6, 7)));
    at::Tensor in = qkv.clone().requires_grad_(true);
    op(in).narrow(1, 13, 8).mul(torch::randn({1, 8, H * D})).sum().backward();
    EXPECT_EQ(in.grad().narrow(1, 0, 13).abs().max().item<float>(), 0.0f) << (is_gpt ? "gpt" : "llama");
    EXPECT_GT(in.grad().narrow(1, 13, 8).abs().max().item<float>(), 0.0f);
  }
}

// Three documents packed into one row of model.block positions (the rest padding) against each
// run alone: logits, the loss over the row's targets and the parameters' gradients.
void expect_packed_equals_alone(ModelConfig m, c10::ScalarType dtype, double tol) {
  SCOPED_TRACE(::testing::Message() << "arch " << static_cast<int>(m.arch) << " dtype " << dtype << " window "
                                    << m.sliding_window);
  torch::manual_seed(3);
  CausalLm packed_model = make_causal_lm(m), alone_model = make_causal_lm(m);
  {
    torch::NoGradGuard no_grad;
    const auto src = packed_model->named_parameter_list(), dst = alone_model->named_parameter_list();
    for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  }
  packed_model->to(dtype);
  alone_model->to(dtype);
  const std::vector<int64_t> lengths{5, 6, 4};  // tokens; a document of n trains n - 1 positions
  const int64_t T = m.block;
  at::Tensor x = torch::zeros({1, T}, torch::kLong), y = torch::full({1, T}, kIgnoreIndex, torch::kLong);
  std::vector<at::Tensor> docs;
  int64_t t = 0;
  for (int64_t n : lengths) {
    docs.push_back(torch::randint(1, m.vocab, {1, n}, torch::kLong));
    x.narrow(1, t, n - 1).copy_(docs.back().narrow(1, 0, n - 1));
    y.narrow(1, t, n - 1).copy_(docs.back().narrow(1, 1, n - 1));
    t += n - 1;
  }
  const at::Tensor pos = positions_of({{4, 5, 3}}, T);
  const at::Tensor logits = packed_model->logits(x, pos);
  at::Tensor nll_sum = torch::zeros({}, torch::kDouble);
  int64_t count = 0;
  t = 0;
  for (const at::Tensor& d : docs) {
    const int64_t n = d.size(1);
    const at::Tensor alone = alone_model->forward(d.narrow(1, 0, n - 1));
    EXPECT_LT(max_abs_diff(logits.narrow(1, t, n - 1), alone), tol) << "document at " << t;
    nll_sum = nll_sum + torch::cross_entropy_loss(alone.reshape({n - 1, -1}).to(torch::kDouble),
                                                  d[0].narrow(0, 1, n - 1), {}, at::Reduction::Sum);
    count += n - 1;
    t += n - 1;
  }
  const at::Tensor loss = packed_model->loss(x, y, pos);
  const at::Tensor alone_loss = nll_sum / static_cast<double>(count);
  EXPECT_NEAR(loss.item<double>(), alone_loss.item<double>(), tol);
  loss.backward();
  alone_loss.backward();
  const auto a = packed_model->named_parameter_list(), b = alone_model->named_parameter_list();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LT(max_abs_diff(a[i].second.grad(), b[i].second.grad()), tol) << a[i].first;
}

TEST(PackedRows, APackedRowComputesWhatEachDocumentComputesAlone) {
  for (auto arch : {ModelConfig::Arch::kGpt, ModelConfig::Arch::kLlama}) {
    ModelConfig m = test::tiny_model(arch);
    expect_packed_equals_alone(m, torch::kFloat, 1e-5);   // frugal's CPU kernels
    expect_packed_equals_alone(m, torch::kDouble, 1e-6);  // ATen's attention with the mask
    if (arch == ModelConfig::Arch::kLlama) {
      m.sliding_window = 3;
      expect_packed_equals_alone(m, torch::kFloat, 1e-5);
      expect_packed_equals_alone(m, torch::kDouble, 1e-6);
    }
  }
}

// Activation checkpointing recomputes a block's forward in the backward: with the same positions
// (kept by the recomputation, not a reference to a batch long gone), so the gradients are equal.
TEST(PackedRows, RecomputedBlocksSeeTheSamePositions) {
  for (auto arch : {ModelConfig::Arch::kGpt, ModelConfig::Arch::kLlama}) {
    torch::manual_seed(8);
    const ModelConfig m = test::tiny_model(arch);
    CausalLm plain = make_causal_lm(m), recomputed = make_causal_lm(m);
    {
      torch::NoGradGuard no_grad;
      const auto src = plain->named_parameter_list(), dst = recomputed->named_parameter_list();
      for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
    }
    recomputed->set_recompute({true, false});
    const at::Tensor x = torch::randint(0, m.vocab, {2, m.block}, torch::kLong);
    const at::Tensor y = torch::randint(0, m.vocab, {2, m.block}, torch::kLong);
    const auto loss_of = [&](CausalLm& model) {
      at::Tensor pos = positions_of({{5, 7}, {16}}, m.block);  // dies before the backward
      return model->loss(x, y, pos);
    };
    loss_of(plain).backward();
    loss_of(recomputed).backward();
    const auto a = plain->named_parameter_list(), b = recomputed->named_parameter_list();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LT(max_abs_diff(a[i].second.grad(), b[i].second.grad()), 1e-6) << a[i].first;
  }
}

TEST(PackedRows, PositionsThatDoNotCountUpAreRefusedByRowAndToken) {
  const at::Tensor qkv = torch::randn({1, 4, 3 * 16});
  const at::Tensor bad = torch::tensor({0, 1, 3, 0}, torch::kLong).view({1, 4});
  try {
    fused_causal_attention(qkv, 1, bad);
    FAIL() << "positions 0, 1, 3 were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("row 0 position 2 holds 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fused_causal_attention(qkv, 1, torch::zeros({1, 3}, torch::kLong)), std::invalid_argument);
}

}  // namespace
}  // namespace frugal::packed_rows_test
