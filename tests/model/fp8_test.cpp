// FP8 linears (model/fp8.h) against an fp8 emulation written here in double: the casts round to
// the e4m3 and e5m2 grids (nearest, ties to even, saturating), the forward is the product of the
// rounded operands, the backward rounds the output gradient to e5m2; ATen's _scaled_mm (the GPU
// path's operator, which also runs on the CPU) gives the emulated product; only eligible shapes
// run in fp8; an activation-checkpointing recompute runs in fp8 as the forward did.
#include "frugal/model/fp8.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "frugal/core/compat.h"
#include "frugal/model/activation_checkpointing.h"
#include "frugal/model/model_family.h"
#include "test_util.h"

namespace frugal::fp8_test {
namespace {

struct Format {
  int mantissa_bits;
  int min_normal_exponent;
  double max;
};
constexpr Format kE4m3{3, -6, 448.0};
constexpr Format kE5m2{2, -14, 57344.0};

// v rounded to the format's grid: nearest, ties to even, saturating at the largest finite value.
double round_to(double v, const Format& f) {
  const double a = std::fabs(v);
  if (a == 0) return 0;
  const int e = std::max(static_cast<int>(std::floor(std::log2(a))), f.min_normal_exponent);
  const double step = std::ldexp(1.0, e - f.mantissa_bits);
  const double r = std::nearbyint(a / step) * step;  // the default rounding mode: ties to even
  return std::copysign(std::min(r, f.max), v);
}

// The tensorwise scale in double: max / amax.
double scale_in_double(const at::Tensor& t, const Format& f) {
  return f.max / std::max(t.abs().max().item<double>(), 1e-12);
}

// t cast to the format with its own scale, and back: round(t * s) / s, in double. The scale is
// taken as the float32 the implementation keeps.
at::Tensor rounded(const at::Tensor& t, const Format& f) {
  const double s = static_cast<float>(scale_in_double(t, f));
  at::Tensor d = t.to(at::kDouble).contiguous().clone();
  double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < d.numel(); ++i) p[i] = round_to(static_cast<double>(static_cast<float>(p[i] * s)), f) / s;
  return d;
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }
double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return max_abs(a.to(at::kDouble) - b.to(at::kDouble)) / max_abs(b.to(at::kDouble));
}

TEST(Fp8, CastsRoundToTheE4m3AndE5m2GridsAndSaturate) {
  torch::manual_seed(1);
  const at::Tensor t = torch::randn({4096}) * torch::exp(torch::randn({4096}) * 3);  // many binades
  for (const auto& [format, f] : {std::pair{at::kFloat8_e4m3fn, kE4m3}, std::pair{at::kFloat8_e5m2, kE5m2}}) {
    const at::Tensor s = fp8::scale_of(t, format);
    EXPECT_EQ(s.scalar_type(), at::kFloat);
    EXPECT_FLOAT_EQ(s.item<float>(), static_cast<float>(scale_in_double(t, f)));
    const at::Tensor q = fp8::quantize(t, s, format);
    EXPECT_EQ(q.scalar_type(), format);
    EXPECT_DOUBLE_EQ(max_abs(q.to(at::kDouble)), f.max);  // the absolute maximum lands on the largest value
    EXPECT_EQ(max_abs(q.to(at::kDouble) / s.item<double>() - rounded(t, f)), 0.0);
    // A scale 8x too large saturates at the largest finite value: no inf, no NaN.
    const at::Tensor over = fp8::quantize(t, s * 8, format).to(at::kDouble);
    EXPECT_TRUE(over.isfinite().all().item<bool>());
    EXPECT_DOUBLE_EQ(max_abs(over), f.max);
  }
}

TEST(Fp8, ForwardAndBackwardAreTheProductsOfTheRoundedOperands) {
  torch::manual_seed(2);
  const at::Tensor x0 = torch::randn({2, 16, 48}), g = torch::randn({2, 16, 64});
  const at::Tensor w0 = torch::randn({64, 48}) * 0.2, b0 = torch::randn({64});
  at::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  const at::Tensor y = fp8::linear(x, w, b);
  y.backward(g);

  const at::Tensor xr = rounded(x0.reshape({-1, 48}), kE4m3), wr = rounded(w0, kE4m3);
  const at::Tensor gr = rounded(g.reshape({-1, 64}), kE5m2);
  const at::Tensor want_y = xr.mm(wr.t()) + b0.to(at::kDouble);
  EXPECT_LT(rel_diff(y.reshape({-1, 64}), want_y), 1e-5);
  EXPECT_LT(rel_diff(x.grad().reshape({-1, 48}), gr.mm(wr)), 1e-5);
  EXPECT_LT(rel_diff(w.grad(), gr.t().mm(xr)), 1e-5);
  EXPECT_LT(rel_diff(b.grad(), g.reshape({-1, 64}).sum(0)), 1e-5);
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  // Not the fp32 product: the rounding is there (e4m3 keeps 3 mantissa bits).
  EXPECT_GT(rel_diff(y, at::linear(x0, w0, b0)), 1e-3);
  EXPECT_GT(rel_diff(w.grad(), g.reshape({-1, 64}).t().mm(x0.reshape({-1, 48}))), 1e-3);
}

TEST(Fp8, UnderAutocastTheInputIsCastFirstAndTheOutputIsInTheAutocastDtype) {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({32, 48}), w = torch::randn({16, 48});
  at::Tensor y;
  {
    compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16, true);
    y = fp8::linear(x, w, at::Tensor());
  }
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  const at::Tensor want = rounded(x.to(at::kBFloat16), kE4m3).mm(rounded(w, kE4m3).t());
  EXPECT_LT(rel_diff(y, want), 4e-3);  // bf16's own rounding of the output: half a unit, 2^-9
}

// The GPU path calls at::_scaled_mm with the reciprocal scales and the second operand transposed;
// ATen's CPU _scaled_mm gives what the emulation computes.
TEST(Fp8, ScaledMmGivesTheEmulatedProduct) {
  torch::manual_seed(4);
  const at::Tensor a = torch::randn({16, 32}), b = torch::randn({48, 32});
  const at::Tensor sa = fp8::scale_of(a, at::kFloat8_e5m2), sb = fp8::scale_of(b, at::kFloat8_e4m3fn);
  const at::Tensor a8 = fp8::quantize(a, sa, at::kFloat8_e5m2), b8 = fp8::quantize(b, sb, at::kFloat8_e4m3fn);
  const at::Tensor emulated = fp8::scaled_product(a8, sa, b8, sb, at::kFloat);
  const at::Tensor aten =
      at::_scaled_mm(a8, b8.t(), sa.reciprocal(), sb.reciprocal(), c10::nullopt, c10::nullopt, at::kFloat);
  EXPECT_LT(rel_diff(emulated, aten), 1e-6);
}

TEST(Fp8, OnlyShapesInMultiplesOf16RunInFp8) {
  torch::manual_seed(5);
  const at::Tensor w = torch::randn({32, 48}), b = torch::randn({32});
  EXPECT_TRUE(fp8::eligible(torch::randn({2, 8, 48}), w));
  EXPECT_FALSE(fp8::eligible(torch::randn({5, 48}), w));                        // rows
  EXPECT_FALSE(fp8::eligible(torch::randn({16, 40}), torch::randn({32, 40})));  // in_features
  EXPECT_FALSE(fp8::eligible(torch::randn({16, 48}), torch::randn({20, 48})));  // out_features
  const at::Tensor odd = torch::randn({5, 48}), even = torch::randn({16, 48});
  {
    fp8::Scope on(true, true);
    EXPECT_TRUE(fp8::enabled());
    EXPECT_TRUE(fp8::cast_kernels());
    // The cast kernel runs on a GPU only: on the CPU the same call takes ATen's casts.
    const fp8::Cast c = fp8::cast(even, at::kFloat8_e4m3fn, true);
    EXPECT_TRUE(
        torch::equal(c.data.view(at::kByte),
                     fp8::quantize(even, fp8::scale_of(even, at::kFloat8_e4m3fn), at::kFloat8_e4m3fn).view(at::kByte)));
    EXPECT_TRUE(torch::equal(fp8::linear_or_aten(odd, w, b), at::linear(odd, w, b)));
    EXPECT_TRUE(torch::equal(fp8::linear_or_aten(even, w, b), fp8::linear(even, w, b)));
    {
      fp8::Scope off(false);
      EXPECT_TRUE(torch::equal(fp8::linear_or_aten(even, w, b), at::linear(even, w, b)));
      EXPECT_FALSE(fp8::cast_kernels());
    }
    EXPECT_TRUE(fp8::enabled());
    EXPECT_TRUE(fp8::cast_kernels());
  }
  EXPECT_FALSE(fp8::enabled());
  EXPECT_FALSE(fp8::cast_kernels());
}

TEST(Fp8, AFrozenWeightGetsNoGradientAndTheInputStillDoes) {
  torch::manual_seed(6);
  at::Tensor x = torch::randn({16, 32}).requires_grad_();
  const at::Tensor w = torch::randn({16, 32});
  fp8::linear(x, w, at::Tensor()).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

ModelConfig fp8_model(ModelConfig::Arch arch) {
  ModelConfig m = test::tiny_model(arch);
  if (arch == ModelConfig::Arch::kLlama) m.mlp_width = 64;  // every block linear a multiple of 16
  return m;
}

// Gradients of the model's loss: the forward in bf16 autocast with fp8 linears, the backward
// outside both, as the training step runs them.
std::vector<at::Tensor> fp8_grads(ModelConfig::Arch arch, bool recompute, bool fp8) {
  const ModelConfig m = fp8_model(arch);
  torch::manual_seed(7);
  CausalLm model = make_causal_lm(m);
  if (recompute) model->set_recompute(checkpoint_plan(*parse_activation_checkpointing("blocks"), m.layers));
  const at::Tensor x = torch::randint(m.vocab, {2, 16}), y = torch::randint(m.vocab, {2, 16});
  at::Tensor loss;
  {
    compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16, true);
    fp8::Scope linears(fp8);
    loss = model->loss(x, y);
  }
  loss.backward();
  std::vector<at::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
  return out;
}

TEST(Fp8, ActivationCheckpointingRecomputesTheBlocksInFp8) {
  for (auto arch : {ModelConfig::Arch::kGpt, ModelConfig::Arch::kLlama}) {
    const auto plain = fp8_grads(arch, false, true), recomputed = fp8_grads(arch, true, true);
    const auto bf16 = fp8_grads(arch, false, false);
    ASSERT_EQ(plain.size(), recomputed.size());
    bool differs_from_bf16 = false;
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_TRUE(torch::equal(plain[i], recomputed[i])) << "parameter " << i;
      differs_from_bf16 |= !torch::equal(plain[i], bf16[i]);
    }
    EXPECT_TRUE(differs_from_bf16) << "the fp8 scope changed nothing";
  }
}

TEST(Fp8, GpusFromComputeCapability89HaveFp8TensorCores) {
  EXPECT_FALSE(fp8::gpu_supports_fp8(7, 5));
  EXPECT_FALSE(fp8::gpu_supports_fp8(8, 0));
  EXPECT_FALSE(fp8::gpu_supports_fp8(8, 6));
  EXPECT_TRUE(fp8::gpu_supports_fp8(8, 9));
  EXPECT_TRUE(fp8::gpu_supports_fp8(9, 0));
  EXPECT_TRUE(fp8::gpu_supports_fp8(10, 0));
}

}  // namespace
}  // namespace frugal::fp8_test
