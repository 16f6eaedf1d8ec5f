// zero_advice: what one rank holds at each ZeRO stage and which built stage fits (tune/zero_advice.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/tune/zero_advice.h"

namespace frugal::zero_advice_test {
namespace {

// An 8B-parameter model trained whole in fp32 master weights: 32 GB of parameters, 32 GB of
// gradients, 64 GB of AdamW moments; 2 GB of activations measured by a probe.
PlanFigures eight_billion() {
  PlanFigures f;
  f.params = 8'000'000'000;
  f.trainable_params = f.params;
  f.param_bytes = 4 * f.params;
  f.optimizer_state_mb = 64'000;
  f.peak_tensor_mb = (32 + 32 + 64 + 2) * 1e3;
  return f;
}

TEST(ZeroAdvice, EachStageShardsWhatItNamesAndTheLeastThatFitsIsAdvised) {
  // 8 x 80 GB (72 usable): stage 0 needs 130, stage 1 32 + 32 + 8 + 2 = 74, stage 2 32 + 4 + 8 + 2 = 46.
  const ZeroAdvice a = zero_advice(eight_billion(), 8, 80);
  ASSERT_EQ(a.levels.size(), 7u);  // stages 0-3, then 0-2 with the optimizer in host memory
  EXPECT_NEAR(a.activations_gb, 2, 1e-9);
  EXPECT_NEAR(a.levels[0].total_gb, 130, 1e-6);
  EXPECT_NEAR(a.levels[1].total_gb, 74, 1e-6);
  EXPECT_NEAR(a.levels[2].total_gb, 46, 1e-6);
  EXPECT_NEAR(a.levels[3].total_gb, 4 + 4 + 8 + 2, 1e-6);
  EXPECT_FALSE(a.levels[1].fits) << "74 GB is over 90% of 80 GB";
  EXPECT_EQ(a.recommended, 2);
  EXPECT_NE(a.table().find("use dist.zero = 2"), std::string::npos) << a.table();
  EXPECT_EQ(a.to_json()["recommended"], 2);
  EXPECT_EQ(a.recommended_with_offload, -1) << "offload is advised only where nothing else fits";
  EXPECT_EQ(a.table().find("offload"), std::string::npos) << a.table();

  // 8 x 96 GB (86.4 usable): stage 1 fits and communicates less than stage 2.
  EXPECT_EQ(zero_advice(eight_billion(), 8, 96).recommended, 1);
  // One 192 GB GPU: nothing to shard.
  EXPECT_EQ(zero_advice(eight_billion(), 1, 192).recommended, 0);
}

TEST(ZeroAdvice, WhenOnlyZero3WouldFitItSaysSoAndAdvisesNoBuiltStage) {
  // 8 x 40 GB (36 usable): stage 2 needs 46, stage 3 18.
  const ZeroAdvice a = zero_advice(eight_billion(), 8, 40);
  EXPECT_EQ(a.recommended, -1);
  EXPECT_TRUE(a.levels[3].fits);
  EXPECT_FALSE(a.levels[3].built);
  EXPECT_NE(a.table().find("ZeRO-3 would (not built yet)"), std::string::npos) << a.table();
  EXPECT_TRUE(a.to_json()["recommended"].is_null());
}

TEST(ZeroAdvice, WhereOnlyTheOptimizerInHostMemoryFitsItIsAdvisedWithItsHostBytes) {
  // 8 x 48 GB (43.2 usable): stage 2 needs 46; with its 8 GB of moments in host memory, 38.
  const ZeroAdvice a = zero_advice(eight_billion(), 8, 48);
  EXPECT_EQ(a.recommended, -1);
  ASSERT_EQ(a.recommended_with_offload, 2);
  const ZeroLevel& l = a.levels[6];
  EXPECT_TRUE(l.offload);
  EXPECT_EQ(l.stage, 2);
  EXPECT_NEAR(l.total_gb, 32 + 4 + 2, 1e-6);
  EXPECT_NEAR(l.optimizer_gb, 8, 1e-6);
  EXPECT_FALSE(a.levels[5].fits) << "stage 1 with offload: 32 + 32 + 2 = 66";
  const std::string t = a.table();
  EXPECT_NE(t.find("use dist.zero = 2 with dist.offload = \"optimizer\": AdamW's moments (8 GB a rank)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("2 + offload"), std::string::npos) << t;
  EXPECT_EQ(a.to_json()["recommended_with_offload"], 2);
  // 8 x 40 GB: 38 GB is over 36 usable, with or without offload.
  EXPECT_EQ(zero_advice(eight_billion(), 8, 40).recommended_with_offload, -1);
}

TEST(ZeroAdvice, FrozenParametersNeedNoGradientOrMomentsAndUnknownActivationsAreSaid) {
  PlanFigures f;  // LoRA: 8B frozen in bf16 (16 GB), 40M trainable; no peak measured
  f.params = 8'040'000'000;
  f.trainable_params = 40'000'000;
  f.param_bytes = 16'000'000'000 + 4 * 40'000'000;
  const ZeroAdvice a = zero_advice(f, 1, 24);
  EXPECT_FALSE(a.activations_measured);
  EXPECT_NEAR(a.levels[0].gradients_gb, 0.16, 1e-9);
  EXPECT_NEAR(a.levels[0].optimizer_gb, 0.32, 1e-9);
  EXPECT_EQ(a.recommended, 0);
  EXPECT_NE(a.table().find("not measured"), std::string::npos) << a.table();
  EXPECT_THROW(zero_advice(f, 0, 24), ConfigError);
  EXPECT_THROW(zero_advice(f, 2, 0), ConfigError);
}

}  // namespace
}  // namespace frugal::zero_advice_test
