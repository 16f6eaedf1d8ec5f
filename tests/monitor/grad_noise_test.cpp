// The gradient noise scale: the estimator recovers a known |G|^2 and tr(Sigma) from synthetic
// micro-batch gradients, the micro-batch probe measures each micro-batch's gradient from the
// running .grad sum exactly, and a run with accumulation reports B_simple.
#include "frugal/monitor/grad_noise.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <fstream>

#include "frugal/core/config_loader.h"
#include "frugal/train/trainer.h"
#include "quiet_trainer.h"
#include "test_util.h"

namespace frugal::grad_noise_test {
namespace {

using test::quiet_overwrite;

TEST(GradNoise, NoNoiseMeansZeroTraceAndTheExactGradientNorm) {
  // Every micro-batch gradient equal to G: small_sq = big_sq = |G|^2.
  GradNoiseEstimate e = estimate_grad_noise(4.0, 4.0, 8, 32);
  EXPECT_DOUBLE_EQ(e.trace_cov, 0.0);
  EXPECT_DOUBLE_EQ(e.g2, 4.0);
}

TEST(GradNoise, EstimatorRecoversKnownVarianceFromSyntheticMicroBatches) {
  // True gradient G (|G|^2 = 1 per unit of dim... set below) and per-sample noise N(0, sigma^2 I)
  // in D dimensions: tr(Sigma) = D sigma^2. A micro-batch of b samples has gradient
  // G + mean of b noise draws, i.e. G + N(0, sigma^2/b I).
  torch::manual_seed(7);
  const int64_t D = 256, b = 4, k = 8;
  const double sigma = 0.5;
  at::Tensor G = torch::full({D}, 0.1, torch::kDouble);  // |G|^2 = 2.56
  const double g2_true = G.pow(2).sum().item<double>();
  const double tr_true = static_cast<double>(D) * sigma * sigma;  // 64
  const double b_simple_true = tr_true / g2_true;                 // 25
  double sum_g2 = 0, sum_tr = 0;
  GradNoiseScale ema(0.99);
  const int trials = 4000;
  for (int t = 0; t < trials; ++t) {
    at::Tensor micro = G + torch::randn({k, D}, torch::kDouble) * (sigma / std::sqrt(static_cast<double>(b)));
    const double small_sq = micro.pow(2).sum(1).mean().item<double>();
    const double big_sq = micro.mean(0).pow(2).sum().item<double>();
    GradNoiseEstimate e = estimate_grad_noise(small_sq, big_sq, b, b * k);
    sum_g2 += e.g2;
    sum_tr += e.trace_cov;
    ema.add(e);
  }
  // Unbiased: the means over 4000 trials land within ~3 standard errors. The standard error of
  // one tr estimate here is about tr x sqrt(2 / (D (k-1))) ~ 0.11 tr (chi-square with D(k-1)
  // degrees of freedom, scaled), so 4000 trials give ~0.2%; 2% is a loose bound.
  EXPECT_NEAR(sum_tr / trials, tr_true, 0.02 * tr_true);
  EXPECT_NEAR(sum_g2 / trials, g2_true, 0.05 * g2_true);
  EXPECT_NEAR(ema.b_simple(), b_simple_true, 0.25 * b_simple_true);  // the EMA sees ~100 trials
  EXPECT_EQ(ema.count(), trials);
}

TEST(GradNoise, ScaleIsUnknownUntilTheMeanGradientEstimateIsPositive) {
  GradNoiseScale s;
  EXPECT_TRUE(std::isnan(s.b_simple()));
  s.add({-1.0, 5.0});  // pure noise: |G|^2 estimated negative
  EXPECT_TRUE(std::isnan(s.b_simple()));
  s.add({3.0, 5.0});
  EXPECT_GT(s.b_simple(), 0);
  GradNoiseScale t;
  t.from_json(s.to_json());
  EXPECT_DOUBLE_EQ(t.b_simple(), s.b_simple());
  EXPECT_EQ(t.count(), 2);
}

TEST(GradNoise, ProbeMeasuresEachMicroBatchGradientFromTheRunningSum) {
  // Two parameters; three micro-batches whose gradients are known. .grad holds the running sum of
  // g_k * scale / accum, as in the training step with a loss scale of 8.
  const double scale = 8, accum = 3;
  std::vector<at::Tensor> g = {torch::tensor({1.0f, 2.0f}), torch::tensor({-1.0f, 0.5f}), torch::tensor({3.0f, 0.0f})};
  std::vector<at::Tensor> h = {torch::tensor({0.5f}), torch::tensor({2.0f}), torch::tensor({-1.0f})};
  at::Tensor ga = torch::zeros({2}), ha = torch::zeros({1});
  MicroBatchGradProbe probe(true);
  double expect = 0;
  for (int k = 0; k < 3; ++k) {
    ga += g[k] * (scale / accum);
    ha += h[k] * (scale / accum);
    probe.after_backward({ga, ha}, accum / scale, k == 2);
    expect += g[k].pow(2).sum().item<double>() + h[k].pow(2).sum().item<double>();
  }
  EXPECT_NEAR(probe.sum_sq().item<double>(), expect, 1e-4 * expect);  // fp32 arithmetic
  MicroBatchGradProbe off(false);
  off.after_backward({ga, ha}, 1, true);
  EXPECT_FALSE(off.sum_sq().defined());
}

TEST(GradNoise, RunWithAccumulationReportsTheNoiseScaleAtLogSteps) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("train.accum=4");
  nlohmann::json s = Trainer(resolve_config("", sets, {}), quiet_overwrite()).fit();
  EXPECT_EQ(s["global_batch"], 32);
  EXPECT_EQ(s["grad_noise_estimates"], 6);  // one per log step: 30 steps / log_every 5
  ASSERT_TRUE(s.contains("grad_noise_hint"));
  std::ifstream in(dir.file("demo/metrics.jsonl"));
  std::string line;
  int with_value = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step" && j["grad_noise_scale"].is_number()) {
      EXPECT_GT(j["grad_noise_scale"].get<double>(), 0);
      ++with_value;
    }
  }
  EXPECT_GT(with_value, 0);
  // Without accumulation there is nothing to compare: no estimate.
  test::TempDir dir2;
  nlohmann::json s2 = Trainer(resolve_config("", test::tiny_overrides(dir2.path()), {}), quiet_overwrite()).fit();
  EXPECT_FALSE(s2.contains("grad_noise_estimates"));
}

}  // namespace
}  // namespace frugal::grad_noise_test
