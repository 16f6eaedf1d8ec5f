// The fused GELU against torch::gelu: values and gradients, float and bfloat16, vector tails,
// non-contiguous inputs and non-finite values; and linear_gelu (bias, GELU and its derivative in
// one pass) against the formula in double; bias_gelu's arithmetic (the GPU kernels' GELU and its
// derivative, and its ATen body) against ATen's GELU of the sum.
#include "frugal/model/fused_gelu.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "kernels/kernel_math.h"

namespace frugal::fused_gelu_test {
namespace {

// Values across GELU's whole range (both tails, the bend near 0), an odd count so the vector
// loops' scalar tails run too.
at::Tensor inputs(int64_t n = 100003) {
  torch::manual_seed(3);
  auto x = torch::randn({n}) * 4;
  x.narrow(0, 0, 9).copy_(torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, 8.0f, -8.0f, 30.0f, -30.0f, -100.0f}));
  return x;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// GELU in double with the C library's erf: the reference both float implementations approximate.
at::Tensor exact_gelu(const at::Tensor& x) {
  auto d = x.to(torch::kDouble);
  return d * 0.5 * (1 + torch::erf(d / std::sqrt(2.0)));
}

TEST(FusedGelu, ForwardMatchesTorchGeluInFloat) {
  auto x = inputs();
  // Abramowitz & Stegun 7.1.26 (|erf error| <= 1.5e-7) plus float rounding of values up to ~16.
  EXPECT_LT(max_abs_diff(fused_gelu(x), exact_gelu(x)), 1e-6);
  // ATen's float GELU carries its own erf approximation: the two agree to a few float ulps.
  EXPECT_LT(max_abs_diff(fused_gelu(x), torch::gelu(x)), 2e-6);
  // Far below zero: exactly 0 (true values are below 1e-38), not NaN.
  EXPECT_EQ(fused_gelu(torch::tensor({-30.0f, -100.0f})).abs().max().item<float>(), 0.0f);
}

TEST(FusedGelu, GradientMatchesTorchGeluInFloat) {
  auto x = inputs();
  auto dy = torch::randn_like(x);
  auto a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
  fused_gelu(a).backward(dy);
  torch::gelu(b).backward(dy);
  EXPECT_LT(max_abs_diff(a.grad(), b.grad()), 2e-6);
}

TEST(FusedGelu, BFloat16IsTheFloatResultRoundedOnce) {
  auto x = inputs().to(torch::kBFloat16);
  auto dy = torch::randn(x.sizes()).to(torch::kBFloat16);
  auto a = x.clone().requires_grad_(true);
  auto y = fused_gelu(a);
  y.backward(dy);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(a.grad().scalar_type(), torch::kBFloat16);
  // Exact maths in float, then one rounding to bfloat16 (half an ulp: 2^-8 relative), plus the
  // float kernel's own 1e-6.
  auto xf = x.to(torch::kFloat).requires_grad_(true);
  auto yf = torch::gelu(xf);
  yf.backward(dy.to(torch::kFloat));
  auto within_half_ulp = [](const at::Tensor& got, const at::Tensor& want) {
    auto err = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs();
    return (err <= want.to(torch::kDouble).abs() * (1.0 / 256) + 2e-6).all().item<bool>();
  };
  EXPECT_TRUE(within_half_ulp(y, yf.detach()));
  EXPECT_TRUE(within_half_ulp(a.grad(), xf.grad()));
  // And never more than one bfloat16 step from ATen's own bfloat16 GELU (give or take 2e-6:
  // ATen computes 0.5 * (1 + erf) and loses the far negative tail, -5.9e-9 at x = -6, to 0).
  auto ref = torch::gelu(x).to(torch::kFloat);
  auto ulp = (ref.abs() * (1.0 / 128)).clamp_min(2e-6);
  EXPECT_TRUE(((y.to(torch::kFloat) - ref).abs() <= ulp).all().item<bool>());
}

TEST(FusedGelu, NonContiguousInputsAndNoGradGiveTheSameValues) {
  auto x = torch::randn({64, 37}) * 3;
  auto t = x.t();  // non-contiguous view
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_TRUE(torch::equal(fused_gelu(t), fused_gelu(t.contiguous())));
  auto g = t.clone().requires_grad_(true);
  auto with_grad = fused_gelu(g);
  at::Tensor without;
  {
    torch::NoGradGuard ng;
    without = fused_gelu(g);
  }
  EXPECT_TRUE(torch::equal(with_grad.detach(), without));
  auto dy = torch::randn({64, 37}).t();  // a non-contiguous incoming gradient too
  with_grad.backward(dy);
  auto ref = t.clone().requires_grad_(true);
  torch::gelu(ref).backward(dy);
  EXPECT_LT(max_abs_diff(g.grad(), ref.grad()), 2e-6);
}

TEST(FusedGelu, NonFiniteValuesBehaveAsInTorchGelu) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto y = fused_gelu(torch::tensor({nan, inf}));
  EXPECT_TRUE(std::isnan(y[0].item<float>()));
  EXPECT_EQ(y[1].item<float>(), inf);
  auto a = torch::tensor({nan, 1.0f}).requires_grad_(true);
  fused_gelu(a).sum().backward();
  EXPECT_TRUE(std::isnan(a.grad()[0].item<float>()));  // a NaN is never hidden from the scaler
  EXPECT_TRUE(std::isfinite(a.grad()[1].item<float>()));
}

TEST(FusedGelu, OtherDtypesFallBackToTorchGelu) {
  auto x = torch::randn({100}, torch::kDouble);
  EXPECT_TRUE(torch::equal(fused_gelu(x), torch::gelu(x)));
}

TEST(FusedGelu, EveryElementIsComputedWhenTheCountDoesNotSplitEvenly) {
  // 2 x 16384 + 1 elements over two threads: the second span must reach the last element.
  auto x = inputs(2 * 16384 + 1);
  auto dy = torch::randn_like(x);
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  auto a = x.clone().requires_grad_(true);
  auto y = fused_gelu(a);
  y.backward(dy);
  at::set_num_threads(before);
  auto b = x.clone().requires_grad_(true);
  torch::gelu(b).backward(dy);
  EXPECT_LT(max_abs_diff(y, torch::gelu(x)), 2e-6);
  EXPECT_LT(max_abs_diff(a.grad(), b.grad()), 2e-6);
}

TEST(FusedGelu, ResultsDoNotDependOnTheThreadCount) {
  auto x = inputs(1 << 17);  // large enough to be split over two threads
  auto dy = torch::randn_like(x);
  const int before = at::get_num_threads();
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    auto a = x.clone().requires_grad_(true);
    auto y = fused_gelu(a);
    y.backward(dy);
    return std::make_pair(y.detach(), a.grad());
  };
  auto one = run(1), two = run(2);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.first, two.first));
  EXPECT_TRUE(torch::equal(one.second, two.second));
}

// linear_gelu's three inputs, double copies of them, and GELU(x W^T + b) with its gradients in
// double (C library erf): the reference.
struct LinearGeluCase {
  at::Tensor x, w, b, dy;
};

LinearGeluCase linear_gelu_case(std::vector<int64_t> x_sizes, int64_t out) {
  torch::manual_seed(11);
  const int64_t in = x_sizes.back();
  std::vector<int64_t> y_sizes = x_sizes;
  y_sizes.back() = out;
  return {torch::randn(x_sizes), torch::randn({out, in}) / std::sqrt(static_cast<double>(in)) * 3, torch::randn({out}),
          torch::randn(y_sizes)};
}

struct Grads {
  at::Tensor y, dx, dw, db;
};

Grads run_linear_gelu(const LinearGeluCase& c, bool reference) {
  const auto type = reference ? torch::kDouble : torch::kFloat;
  auto leaf = [&](const at::Tensor& t) { return t.detach().to(type).clone().requires_grad_(true); };
  auto x = leaf(c.x), w = leaf(c.w), b = leaf(c.b);
  at::Tensor y = reference ? exact_gelu(at::linear(x, w, b)) : linear_gelu(x, w, b);
  y.backward(c.dy.to(type));
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

double max_rel_diff(const at::Tensor& got, const at::Tensor& want) {
  auto w = want.to(torch::kDouble);
  return ((got.to(torch::kDouble) - w).abs() / (w.abs() + 1)).max().item<double>();
}

TEST(LinearGelu, MatchesTheFormulaInDouble) {
  // 3-D like the model's activations; 7 x 37 = 259 rows (not a multiple of the 64-row blocks the
  // bias gradient is summed in) and 83 columns (vector tails).
  for (auto sizes : {std::vector<int64_t>{7, 37, 48}, std::vector<int64_t>{300, 16}}) {
    const auto c = linear_gelu_case(sizes, 83);
    const Grads got = run_linear_gelu(c, false), want = run_linear_gelu(c, true);
    ASSERT_EQ(got.y.sizes(), want.y.sizes());
    EXPECT_LT(max_rel_diff(got.y, want.y), 2e-6);
    EXPECT_LT(max_rel_diff(got.dx, want.dx), 2e-5);
    EXPECT_LT(max_rel_diff(got.dw, want.dw), 2e-5);
    EXPECT_LT(max_rel_diff(got.db, want.db), 2e-5);  // summed over every row, blocks and tail
  }
}

TEST(LinearGelu, AgreesWithLinearThenFusedGelu) {
  const auto c = linear_gelu_case({5, 64, 32}, 128);
  auto x = c.x.clone().requires_grad_(true), w = c.w.clone().requires_grad_(true), b = c.b.clone().requires_grad_(true);
  auto y = fused_gelu(at::linear(x, w, b));
  y.backward(c.dy);
  const Grads got = run_linear_gelu(c, false);
  EXPECT_LT(max_abs_diff(got.y, y), 1e-5);
  EXPECT_LT(max_abs_diff(got.dx, x.grad()), 1e-4);
  EXPECT_LT(max_abs_diff(got.dw, w.grad()), 1e-3);  // sums over 320 rows
  EXPECT_LT(max_abs_diff(got.db, b.grad()), 1e-3);
}

TEST(LinearGelu, BiasGradientDoesNotDependOnTheThreadCount) {
  // 2000 rows x 640 columns: enough work to be split over two threads.
  const auto c = linear_gelu_case({2000, 32}, 640);
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const Grads one = run_linear_gelu(c, false);
  at::set_num_threads(2);
  const Grads two = run_linear_gelu(c, false);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
  EXPECT_TRUE(torch::equal(one.db, two.db));
}

TEST(LinearGelu, WithoutGradientsOrInOtherDtypesItIsFusedGeluOfLinear) {
  const auto c = linear_gelu_case({4, 9, 24}, 40);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(linear_gelu(c.x, c.w, c.b), fused_gelu(at::linear(c.x, c.w, c.b))));
  }
  auto xd = c.x.to(torch::kDouble).requires_grad_(true);
  auto wd = c.w.to(torch::kDouble), bd = c.b.to(torch::kDouble);
  EXPECT_TRUE(torch::equal(linear_gelu(xd, wd, bd), fused_gelu(at::linear(xd, wd, bd))));
  // No bias: the plain product, then GELU.
  auto x = c.x.clone().requires_grad_(true);
  EXPECT_TRUE(torch::equal(linear_gelu(x, c.w, at::Tensor()).detach(), fused_gelu(at::linear(c.x, c.w))));
  // A bias of the wrong length is ATen's error, not a read past its end.
  EXPECT_THROW(linear_gelu(x, c.w, torch::zeros({39})), c10::Error);
}

TEST(LinearGelu, ANanReachesTheOutputAndEveryGradient) {
  auto c = linear_gelu_case({3, 16}, 24);
  c.x[1][5] = std::numeric_limits<float>::quiet_NaN();
  const Grads got = run_linear_gelu(c, false);
  EXPECT_TRUE(got.y[1].isnan().all().item<bool>());
  EXPECT_FALSE(got.y[0].isnan().any().item<bool>());
  EXPECT_TRUE(got.db.isnan().all().item<bool>());  // the scaler must see it
  EXPECT_TRUE(got.dw.isnan().any().item<bool>());
}

TEST(GeluMath, TheKernelsValueAndDerivativeAreAtensInBothForms) {
  // kernel_math.h's gelu_value / gelu_derivative, what each GPU thread computes, against ATen's
  // gelu and gelu_backward in float: both forms, both tails and the bend.
  const at::Tensor x = inputs(4001);
  for (const bool tanh_form : {false, true}) {
    const char* approx = tanh_form ? "tanh" : "none";
    const at::Tensor want = at::gelu(x, approx), want_d = at::gelu_backward(torch::ones_like(x), x, approx);
    at::Tensor got = torch::empty_like(x), got_d = torch::empty_like(x);
    for (int64_t i = 0; i < x.numel(); ++i) {
      got[i] = kernels::gelu_value(x[i].item<float>(), tanh_form);
      got_d[i] = kernels::gelu_derivative(x[i].item<float>(), tanh_form);
    }
    EXPECT_LT(max_abs_diff(got, want), 2e-6) << approx;
    EXPECT_LT(max_abs_diff(got_d, want_d), 2e-6) << approx;
  }
  // The forms differ (by up to ~5e-4, near |x| = 2.7): a kernel that ignored the flag would show.
  EXPECT_GT(std::abs(kernels::gelu_value(2.7f, true) - kernels::gelu_value(2.7f, false)), 4e-4);
}

TEST(BiasGelu, TheAtenBodyIsGeluOfTheSumWithItsGradients) {
  torch::manual_seed(8);
  for (const bool tanh_form : {false, true}) {
    const at::Tensor u0 = torch::randn({3, 5, 33}) * 2, b0 = torch::randn({33});
    const at::Tensor u = u0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    const at::Tensor ur = u0.clone().requires_grad_(), br = b0.clone().requires_grad_();
    const at::Tensor dy = torch::randn({3, 5, 33});
    const at::Tensor y = bias_gelu(u, b, tanh_form, /*gpu_kernels=*/true);  // the CPU: the ATen body
    const at::Tensor yr = at::gelu(ur + br, tanh_form ? "tanh" : "none");
    EXPECT_EQ(y.sizes(), u.sizes());
    EXPECT_LT(max_abs_diff(y, yr), 1e-6);
    y.backward(dy);
    yr.backward(dy);
    EXPECT_LT(max_abs_diff(u.grad(), ur.grad()), 1e-6);
    EXPECT_LT(max_abs_diff(b.grad(), br.grad()), 1e-5);  // a sum of 15 rows
    // Which form ran: the other one's value differs.
    EXPECT_GT(max_abs_diff(y, at::gelu(u0 + b0, tanh_form ? "none" : "tanh")), 1e-5);
  }
}

TEST(BiasGelu, BFloat16IsTheFloatResultRoundedOnceAndTheBiasGradientStaysFloat) {
  torch::manual_seed(9);
  const at::Tensor u = (torch::randn({64, 24}) * 3).to(torch::kBFloat16).requires_grad_();
  const at::Tensor b = torch::randn({24}).requires_grad_();
  const at::Tensor y = bias_gelu(u, b, true, false);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y, at::gelu(u.detach().to(torch::kFloat) + b.detach(), "tanh").to(torch::kBFloat16)));
  y.sum().backward();
  EXPECT_EQ(u.grad().scalar_type(), torch::kBFloat16);
  ASSERT_EQ(b.grad().scalar_type(), torch::kFloat);
  // The bias gradient sums the float values, not the bf16-rounded ones.
  const at::Tensor d = at::gelu_backward(torch::ones({64, 24}), u.detach().to(torch::kFloat) + b.detach(), "tanh");
  EXPECT_TRUE(torch::allclose(b.grad(), d.sum(0), 1e-6, 1e-6));
}

TEST(BiasGelu, ABiasOfAnotherSizeIsRefusedByName) {
  try {
    bias_gelu(torch::zeros({4, 8}), torch::zeros({7}), true, false);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias_gelu: the bias must be 1-D of the input's last size 8"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace frugal::fused_gelu_test
