// frugal's CUDA kernel layer, as far as a machine without a GPU can check it:
//   - the arithmetic the kernels share with the host (src/kernels/kernel_math.h): bfloat16
//     rounding against c10's, the softmax merge in the classifier kernel's own grouping against
//     ATen's logsumexp, the per-element gradients against autograd;
//   - the autograd Functions of model/kernel_ops.h through their ATen body (the reference the
//     CUDA tests hold the kernels to): values against ATen, gradcheck in double, the padding
//     columns, ignored and out-of-range targets, the in-place gradient, the argument checks;
//   - the GPT's kernel path wired through those Functions on the CPU gives ATen's loss and
//     gradients, and model.kernels = "frugal" is refused where it cannot run.
// The kernels themselves run in tests/cuda/cuda_kernels_test.cpp (label cuda).
#include "frugal/model/kernel_ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "frugal/core/errors.h"
#include "frugal/data/packing.h"
#include "frugal/model/gpt.h"
#include "kernels/kernel_math.h"

namespace frugal::kernel_ops_test {
namespace {
namespace k = frugal::kernels;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(KernelMath, Bf16RoundingMatchesC10ForEveryKindOfValue) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               1e-40f,
                               -1e-40f,
                               3.4e38f,
                               -3.4e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max()};
  // Exact ties between two bfloat16 values (the low 16 bits 0x8000), below and above: ties go to even.
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0x4049u, 0xc049u, 0x7f7fu}) {
    values.push_back(float_of(hi << 16 | 0x8000u));
    values.push_back(float_of(hi << 16 | 0x7fffu));
    values.push_back(float_of(hi << 16 | 0x8001u));
  }
  torch::manual_seed(7);
  const auto r = (torch::randn({20000}) * torch::exp(torch::randn({20000}) * 20)).contiguous();
  for (int64_t i = 0; i < r.numel(); ++i) values.push_back(r[i].item<float>());
  for (float f : values) {
    const uint16_t mine = k::float_to_bf16_bits(f);
    const uint16_t theirs = c10::BFloat16(f).x;
    ASSERT_EQ(mine, theirs) << "float bits 0x" << std::hex << bits_of(f);
    EXPECT_EQ(bits_of(k::bf16_bits_to_float(mine)), bits_of(static_cast<float>(c10::BFloat16(f))));
  }
  // NaN stays NaN, whatever its payload.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f80ffffu})
    EXPECT_TRUE(std::isnan(k::bf16_bits_to_float(k::float_to_bf16_bits(float_of(nan)))));
}

// The classifier kernel's order: thread t of `threads` adds elements t, t + threads, ...; each warp
// merges its 32 states by xor-shuffle; warp 0 merges the warps' results the same way.
float logsumexp_in_kernel_order(const std::vector<float>& row, int threads) {
  std::vector<k::SoftmaxState> st(threads, k::softmax_empty());
  for (size_t j = 0; j < row.size(); ++j) st[j % threads] = k::softmax_add(st[j % threads], row[j]);
  auto warp_merge = [](std::vector<k::SoftmaxState> lanes) {
    for (int o = 16; o > 0; o >>= 1) {
      std::vector<k::SoftmaxState> next(32);
      for (int l = 0; l < 32; ++l) next[l] = k::softmax_merge(lanes[l], lanes[l ^ o]);
      lanes = next;
    }
    return lanes[0];
  };
  std::vector<k::SoftmaxState> partial(32, k::softmax_empty());
  for (int w = 0; w < threads / 32; ++w)
    partial[w] = warp_merge(std::vector<k::SoftmaxState>(st.begin() + w * 32, st.begin() + (w + 1) * 32));
  return k::softmax_logsumexp(warp_merge(partial));
}

TEST(KernelMath, SoftmaxStatesMergedInTheKernelsOrderGiveLogSumExp) {
  torch::manual_seed(11);
  for (int64_t n : {1, 31, 256, 50257}) {
    for (double spread : {1.0, 30.0}) {
      auto x = (torch::randn({n}) * spread).contiguous();
      if (n > 10) x[n / 2] = 1e4f;  // one logit far above the rest: exp of the others underflows
      std::vector<float> row(x.data_ptr<float>(), x.data_ptr<float>() + n);
      const double want = torch::logsumexp(x.to(torch::kDouble), 0).item<double>();
      for (int threads : {32, 1024}) {
        const float got = logsumexp_in_kernel_order(row, threads);
        EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::abs(want))) << "n " << n << " threads " << threads;
      }
    }
  }
  // A row of -inf logits but one: its lse is that logit; states with nothing in them merge as identities.
  EXPECT_EQ(logsumexp_in_kernel_order({-INFINITY, 2.5f, -INFINITY}, 32), 2.5f);
}

TEST(KernelMath, PerElementGradientsMatchAutograd) {
  torch::manual_seed(5);
  // Cross-entropy of one row: d loss / d logit_j = softmax_j - [j == t].
  auto z = torch::randn({300}, torch::kDouble).requires_grad_();
  const int64_t t = 17;
  torch::nn::functional::cross_entropy(z.unsqueeze(0), torch::tensor({t})).backward();
  const float lse = static_cast<float>(torch::logsumexp(z.detach(), 0).item<double>());
  for (int64_t j = 0; j < 300; ++j) {
    const float d = k::classifier_dlogit(static_cast<float>(z[j].item<double>()), lse, j == t, 0.5f);
    EXPECT_NEAR(d, 0.5 * z.grad()[j].item<double>(), 1e-6) << j;
  }
  // LayerNorm's input gradient of one row.
  const int64_t C = 96;
  auto x = (torch::randn({1, C}, torch::kDouble) * 3 + 1).requires_grad_();
  auto w = torch::randn({C}, torch::kDouble), dout = torch::randn({1, C}, torch::kDouble);
  torch::layer_norm(x, {C}, w, {}, 1e-5).backward(dout);
  const double mean = x.detach().mean().item<double>();
  const double rstd = 1.0 / std::sqrt(x.detach().var(false).item<double>() + 1e-5);
  double mg = 0, mgx = 0;
  for (int64_t c = 0; c < C; ++c) {
    const double g = dout[0][c].item<double>() * w[c].item<double>();
    mg += g / C;
    mgx += g * (x[0][c].item<double>() - mean) * rstd / C;
  }
  for (int64_t c = 0; c < C; ++c) {
    const float g = static_cast<float>(dout[0][c].item<double>() * w[c].item<double>());
    const float xhat = static_cast<float>((x[0][c].item<double>() - mean) * rstd);
    EXPECT_NEAR(k::layernorm_dx(g, xhat, static_cast<float>(mg), static_cast<float>(mgx), static_cast<float>(rstd)),
                x.grad()[0][c].item<double>(), 2e-5)
        << c;
  }
}

// Logits (rows, width) whose first `vocab` columns are classes, with ignored targets mixed in.
struct ClassifierCase {
  at::Tensor logits, targets;
  int64_t vocab;
};

ClassifierCase classifier_case(at::ScalarType dt, int64_t rows = 37, int64_t vocab = 250, int64_t width = 256) {
  torch::manual_seed(23);
  ClassifierCase c;
  c.vocab = vocab;
  c.logits = (torch::randn({rows, width}) * 3).to(dt);
  c.targets = torch::randint(0, vocab, {rows}, torch::kLong);
  c.targets.index_put_({torch::arange(0, rows, 5)}, kIgnoreIndex);
  return c;
}

TEST(KernelOps, CrossEntropyMatchesAtenOverTheUnpaddedColumns) {
  auto c = classifier_case(torch::kFloat);
  auto a = c.logits.clone().requires_grad_();
  auto b = c.logits.clone().requires_grad_();
  const auto mine = fused_cross_entropy(a, c.targets, c.vocab, kIgnoreIndex);
  const auto ref = torch::nn::functional::cross_entropy(
      b.narrow(1, 0, c.vocab), c.targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex));
  EXPECT_NEAR(mine.item<double>(), ref.item<double>(), 1e-6);
  (mine * 3).backward();
  (ref * 3).backward();
  EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), 1e-6, 1e-7));
  // The padding columns: no gradient at all.
  EXPECT_EQ(a.grad().narrow(1, c.vocab, 6).abs().max().item<float>(), 0.0f);
}

TEST(KernelOps, CrossEntropyPassesGradcheckInDouble) {
  auto c = classifier_case(torch::kDouble, 9, 13, 16);
  auto x = c.logits.requires_grad_();
  auto f = [&](const std::vector<at::Tensor>& in) {
    return fused_cross_entropy(in[0], c.targets, c.vocab, kIgnoreIndex);
  };
  auto y = f({x});
  // Numerical against analytical gradient, by central differences.
  auto g = torch::autograd::grad({y}, {x})[0];
  const double h = 1e-6;
  auto xd = x.detach();
  for (int64_t r = 0; r < xd.size(0); ++r) {
    for (int64_t j = 0; j < xd.size(1); ++j) {
      auto p = xd.clone(), m = xd.clone();
      p[r][j] += h;
      m[r][j] -= h;
      const double num = (f({p}).item<double>() - f({m}).item<double>()) / (2 * h);
      EXPECT_NEAR(g[r][j].item<double>(), num, 1e-7) << r << "," << j;
    }
  }
}

TEST(KernelOps, EveryTargetIgnoredGivesZeroLossAndZeroGradientNotNan) {
  auto c = classifier_case(torch::kFloat, 6);
  c.targets.fill_(kIgnoreIndex);
  auto x = c.logits.clone().requires_grad_();
  auto loss = fused_cross_entropy(x, c.targets, c.vocab, kIgnoreIndex);
  EXPECT_EQ(loss.item<float>(), 0.0f);
  loss.backward();
  EXPECT_EQ(x.grad().abs().max().item<float>(), 0.0f);
}

TEST(KernelOps, ATargetOutsideTheVocabularyGivesANanLoss) {
  auto c = classifier_case(torch::kFloat, 4);
  c.targets[1] = c.vocab;  // a padding column is not a class
  EXPECT_TRUE(std::isnan(fused_cross_entropy(c.logits, c.targets, c.vocab, kIgnoreIndex).item<float>()));
  c.targets[1] = -3;
  EXPECT_TRUE(std::isnan(fused_cross_entropy(c.logits, c.targets, c.vocab, kIgnoreIndex).item<float>()));
}

TEST(KernelOps, ScratchLogitsReceiveTheGradientInPlace) {
  auto c = classifier_case(torch::kFloat);
  auto plain = c.logits.clone().requires_grad_();
  fused_cross_entropy(plain, c.targets, c.vocab, kIgnoreIndex).backward();
  // As the GPT uses it: the logits are an intermediate result whose memory the gradient takes over.
  auto leaf = c.logits.clone().requires_grad_();
  auto logits = leaf * 1.0;
  auto loss = fused_cross_entropy(logits, c.targets, c.vocab, kIgnoreIndex, /*logits_are_scratch=*/true);
  loss.backward();
  EXPECT_TRUE(torch::equal(leaf.grad(), plain.grad()));
  EXPECT_TRUE(torch::equal(logits.detach(), plain.grad())) << "the gradient was not written over the logits";
  // Without scratch, the caller's logits are left as they were.
  auto kept = c.logits.clone().requires_grad_();
  auto l2 = kept * 1.0;
  fused_cross_entropy(l2, c.targets, c.vocab, kIgnoreIndex).backward();
  EXPECT_TRUE(torch::equal(l2.detach(), c.logits));
}

TEST(KernelOps, LayerNormMatchesAtenInEachOutputDtype) {
  torch::manual_seed(3);
  auto x = torch::randn({2, 5, 48}) * 2 + 0.5;
  auto w = torch::randn({48}), b = torch::randn({48});
  const auto ref = torch::layer_norm(x, {48}, w, b, 1e-5);
  EXPECT_TRUE(torch::allclose(fused_layer_norm(x, w, b, 1e-5, torch::kFloat), ref, 1e-5, 1e-6));
  const auto low = fused_layer_norm(x, w, b, 1e-5, torch::kBFloat16);
  EXPECT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(low, ref.to(torch::kBFloat16)));
}

// Central differences of sum(f(in) * probe) against autograd, for every input element.
void expect_gradients_match(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
                            std::vector<at::Tensor> inputs) {
  for (auto& t : inputs) t.requires_grad_();
  torch::manual_seed(99);
  const auto probe = torch::randn(f(inputs).sizes(), torch::kDouble);
  const auto grads = torch::autograd::grad({(f(inputs) * probe).sum()}, inputs);
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto flat = inputs[i].detach().reshape({-1});
    for (int64_t e = 0; e < flat.numel(); ++e) {
      auto value = [&](double delta) {
        std::vector<at::Tensor> moved;
        for (auto& t : inputs) moved.push_back(t.detach().clone());
        moved[i].view({-1})[e] += delta;
        return (f(moved) * probe).sum().item<double>();
      };
      const double num = (value(h) - value(-h)) / (2 * h);
      EXPECT_NEAR(grads[i].reshape({-1})[e].item<double>(), num, 1e-6) << "input " << i << " element " << e;
    }
  }
}

TEST(KernelOps, LayerNormGradientsPassGradcheckInDouble) {
  torch::manual_seed(4);
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  expect_gradients_match(
      [](const std::vector<at::Tensor>& in) { return fused_layer_norm(in[0], in[1], in[2], 1e-5, torch::kDouble); },
      {torch::randn({3, 7}, opts) * 2, torch::randn({7}, opts), torch::randn({7}, opts)});
}

TEST(KernelOps, ResidualLayerNormGivesTheSumAndItsNormWithBothGradients) {
  torch::manual_seed(8);
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto r = torch::randn({2, 3, 6}, opts), y = torch::randn({2, 3, 6}, opts);
  auto w = torch::randn({6}, opts), b = torch::randn({6}, opts);
  auto [h, out] = fused_residual_layer_norm(r, y, w, b, 1e-5, torch::kDouble);
  EXPECT_TRUE(torch::allclose(h, r + y));
  EXPECT_TRUE(torch::allclose(out, torch::layer_norm(r + y, {6}, w, b, 1e-5)));
  // Both outputs carry gradient: h goes on down the residual stream, the norm into the next layer.
  expect_gradients_match(
      [](const std::vector<at::Tensor>& in) {
        auto ho = fused_residual_layer_norm(in[0], in[1], in[2], in[3], 1e-5, torch::kDouble);
        return torch::cat({ho.first * 0.7, ho.second}, -1);
      },
      {r, y, w, b});
  // A lower-precision y (a bf16 matmul's output on an fp32 stream) gets its gradient in its own dtype.
  auto rf = torch::randn({4, 8}).requires_grad_(), yb = torch::randn({4, 8}).to(torch::kBFloat16).requires_grad_();
  auto wf = torch::ones({8}), bf = torch::zeros({8});
  auto [h2, o2] = fused_residual_layer_norm(rf, yb, wf, bf, 1e-5, torch::kBFloat16);
  EXPECT_EQ(h2.scalar_type(), torch::kFloat);
  EXPECT_EQ(o2.scalar_type(), torch::kBFloat16);
  (h2.sum() + o2.to(torch::kFloat).sum()).backward();
  EXPECT_EQ(yb.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(yb.grad().to(torch::kFloat), rf.grad(), 1e-2, 1e-2));
}

TEST(KernelOps, BadArgumentsAreRefusedNamingTheArgument) {
  auto logits = torch::randn({4, 10});
  auto t = torch::zeros({4}, torch::kLong);
  auto expect_message = [](const std::function<void()>& call, const std::string& part) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one saying '" << part << "'";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_message([&] { fused_cross_entropy(logits.view({2, 2, 10}), t, 10, -100); }, "logits must be 2-D");
  expect_message([&] { fused_cross_entropy(logits, t.narrow(0, 0, 3), 10, -100); }, "one entry per logits row");
  expect_message([&] { fused_cross_entropy(logits, t.to(torch::kInt), 10, -100); }, "targets must be int64");
  expect_message([&] { fused_cross_entropy(logits, t, 11, -100); }, "vocab = 11 must be in [1, 10]");
  auto x = torch::randn({3, 8});
  expect_message([&] { fused_layer_norm(x, torch::ones({7}), torch::zeros({8}), 1e-5, torch::kFloat); },
                 "weight and bias must be 1-D of the input's last size 8");
  expect_message(
      [&] {
        fused_residual_layer_norm(x, torch::randn({3, 4}), torch::ones({8}), torch::zeros({8}), 1e-5, torch::kFloat);
      },
      "y must have the residual's shape");
}

TEST(KernelOps, FrugalKernelsAreRefusedWhereTheyCannotRun) {
  ModelConfig m;
  m.kernels = ModelConfig::Kernels::kFrugal;
  try {
    check_model_kernels(m, torch::Device("cpu"), PrecisionMode::kFp32);
    ADD_FAILURE() << "model.kernels = frugal on the CPU was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.kernels = \"frugal\""), std::string::npos) << what;
    EXPECT_NE(what.find(cuda_kernels_built() ? "the run's device is cpu" : "no CUDA kernels"), std::string::npos)
        << what;
  }
  m.kernels = ModelConfig::Kernels::kAten;
  EXPECT_NO_THROW(check_model_kernels(m, torch::Device("cpu"), PrecisionMode::kFp16));
  m.kernels = ModelConfig::Kernels::kAuto;
  EXPECT_NO_THROW(check_model_kernels(m, torch::Device("cpu"), PrecisionMode::kBf16));
}

// The GPT with its kernel path switched on for CPU tensors: the Functions' ATen bodies stand in
// for the kernels, so this checks the wiring (which LayerNorm takes the residual, the padded head,
// the in-place gradient, the MLP's bias and GELU form) against the ATen path, value and gradient.
void check_kernel_path(ModelConfig::Activation act) {
  SCOPED_TRACE(act == ModelConfig::Activation::kGelu ? "gelu" : "gelu_tanh");
  ModelConfig mc;
  mc.activation = act;
  mc.layers = 2;
  mc.heads = 2;
  mc.embd = 32;
  mc.block = 16;
  mc.vocab = 50;
  mc.head_multiple = 64;  // the classifier sees 64 columns, 50 of them classes
  torch::manual_seed(1);
  Gpt aten(mc);
  mc.kernels = ModelConfig::Kernels::kFrugal;
  Gpt fused(mc);
  {
    torch::NoGradGuard ng;
    auto a = aten->named_parameters(), f = fused->named_parameters();
    // The MLP's inputs to GELU of order 1 (not GPT-2's initial 0.1), where its two forms differ.
    for (const auto& p : a)
      if (p.key().find("fc.weight") != std::string::npos) p.value().mul_(40);
    for (const auto& p : a) f[p.key()].copy_(p.value());
  }
  auto idx = torch::randint(0, 50, {3, 16}, torch::kLong);
  auto y = torch::randint(0, 50, {3, 16}, torch::kLong);
  y[0][3] = kIgnoreIndex;
  test_hooks::run_kernel_path_on_cpu(true);
  const auto lf = fused->loss(idx, y);
  lf.backward();
  test_hooks::run_kernel_path_on_cpu(false);
  const auto la = aten->loss(idx, y);
  la.backward();
  EXPECT_NEAR(lf.item<double>(), la.item<double>(), 1e-5);
  auto fa = fused->named_parameters();
  for (const auto& p : aten->named_parameters())
    EXPECT_TRUE(torch::allclose(fa[p.key()].grad(), p.value().grad(), 1e-4, 1e-6)) << p.key();
}

TEST(KernelOps, GptOnTheKernelPathGivesTheAtenPathsLossAndGradients) {
  // Both GELU forms: the MLP's bias and GELU run bias_gelu on the kernel path.
  for (const auto act : {ModelConfig::Activation::kGelu, ModelConfig::Activation::kGeluTanh}) check_kernel_path(act);
}

}  // namespace
}  // namespace frugal::kernel_ops_test
