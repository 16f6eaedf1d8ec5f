// The dynamic loss scaler, one test per transition, plus a real run that overflows.
#include "frugal/train/loss_scaler.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "frugal/ckpt/safetensors.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::loss_scaler_test {
namespace {

PrecisionConfig cfg() {
  PrecisionConfig c;
  c.init_scale = 1024;
  c.growth_factor = 2;
  c.backoff_factor = 0.5;
  c.growth_interval = 3;
  c.min_scale = 64;
  return c;
}

TEST(LossScaler, FiniteStepsCountTowardGrowthWithoutChangingTheScale) {
  ScaleState s{1024, 0, 0, 0};
  s = next_scale_state(s, false, cfg());
  EXPECT_EQ(s.scale, 1024);
  EXPECT_EQ(s.growth_tracker, 1);
  s = next_scale_state(s, false, cfg());
  EXPECT_EQ(s.growth_tracker, 2);
  EXPECT_EQ(s.skipped, 0);
}

TEST(LossScaler, GrowsAfterGrowthIntervalFiniteStepsAndResetsTheTracker) {
  ScaleState s{1024, 2, 0, 0};
  s = next_scale_state(s, false, cfg());
  EXPECT_EQ(s.scale, 2048);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScaler, InfBacksOffSkipsAndResetsTheTracker) {
  ScaleState s{1024, 2, 0, 0};
  s = next_scale_state(s, true, cfg());
  EXPECT_EQ(s.scale, 512);
  EXPECT_EQ(s.growth_tracker, 0);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_EQ(s.skipped_at_floor, 0);
}

TEST(LossScaler, ScaleNeverFallsBelowTheFloorAndFloorSkipsAreCounted) {
  ScaleState s{128, 0, 0, 0};
  s = next_scale_state(s, true, cfg());
  EXPECT_EQ(s.scale, 64);
  EXPECT_EQ(s.skipped_at_floor, 0);  // it was above the floor when this step overflowed
  s = next_scale_state(s, true, cfg());
  EXPECT_EQ(s.scale, 64);
  EXPECT_EQ(s.skipped_at_floor, 1);
  s = next_scale_state(s, true, cfg());
  EXPECT_EQ(s.skipped_at_floor, 2);
  s = next_scale_state(s, false, cfg());
  EXPECT_EQ(s.skipped_at_floor, 0);  // a finite step ends the streak
  EXPECT_EQ(s.skipped, 3);
}

TEST(LossScaler, DisabledScalerIsTheIdentity) {
  LossScaler off(false, cfg());
  auto loss = torch::tensor(2.0f);
  EXPECT_TRUE(torch::equal(off.scale_loss(loss), loss));
  EXPECT_FALSE(off.update(true));
  EXPECT_EQ(off.scale(), 1.0);
}

TEST(LossScaler, UnscaleDividesByTheScale) {
  LossScaler on(true, cfg());
  auto g = torch::full({3}, 2048.0f);
  on.unscale({g});
  EXPECT_TRUE(torch::allclose(g, torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(on.scale_loss(torch::tensor(1.0f)), torch::tensor(1024.0f)));
}

TEST(LossScaler, OverflowingRunSkipsStepsBacksOffAndNeverPutsNanInTheWeights) {
  // A scale of 1e38 overflows fp32 gradients: the first step(s) must be skipped (the scale backs
  // off by 1e-4 each time) until the scale is sane; then training proceeds.
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  for (const char* s : {"precision.loss_scaling=dynamic", "precision.init_scale=1e38", "precision.backoff_factor=1e-4",
                        "precision.growth_interval=5", "train.steps=20", "train.log_every=1"})
    sets.push_back(s);
  Trainer t(resolve_config("", sets, {}), test::quiet_run());
  auto s = t.fit();
  const int64_t skipped = s["skipped_steps"].get<int64_t>();
  EXPECT_GE(skipped, 1);
  EXPECT_LT(skipped, 20);
  EXPECT_EQ(s["optimizer_steps"].get<int64_t>() + skipped, 20);
  auto w = load_safetensors(dir.file("demo/final/model.safetensors"));
  for (const auto& [name, tensor] : w.tensors) EXPECT_TRUE(torch::isfinite(tensor).all().item<bool>()) << name;
  // The LR schedule did not advance on skipped steps: the first logged lr values repeat while skipping.
  std::ifstream in(dir.file("demo/metrics.jsonl"));
  std::string line;
  std::vector<double> lrs;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") lrs.push_back(j["lr"].get<double>());
  }
  ASSERT_GE(lrs.size(), 3u);
  EXPECT_EQ(lrs[0], lrs[1]);  // step 2 reused step 1's lr: step 1 was skipped
}

TEST(LossScaler, UnscaleAndCheckUnscalesFiniteGradientsAndFlagsNonFiniteOnes) {
  PrecisionConfig c = cfg();
  LossScaler scaler(true, c);  // scale 1024
  std::vector<at::Tensor> finite = {torch::full({3}, 2048.0), torch::full({2, 2}, -512.0)};
  at::Tensor flag = scaler.unscale_and_check(finite);
  ASSERT_TRUE(flag.defined());
  EXPECT_EQ(flag.item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(finite[0], torch::full({3}, 2.0)));
  EXPECT_TRUE(torch::equal(finite[1], torch::full({2, 2}, -0.5)));
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<at::Tensor> g = {torch::ones({4}), torch::ones({5}).to(torch::kBFloat16)};
    g[1][3] = bad;  // one element of the second dtype group
    EXPECT_NE(scaler.unscale_and_check(g).item<float>(), 0.0f) << bad;
  }
  LossScaler off(false, c);
  std::vector<at::Tensor> g = {torch::full({2}, 8.0)};
  EXPECT_FALSE(off.unscale_and_check(g).defined());
  EXPECT_TRUE(torch::equal(g[0], torch::full({2}, 8.0)));  // untouched when disabled
}

}  // namespace
}  // namespace frugal::loss_scaler_test
