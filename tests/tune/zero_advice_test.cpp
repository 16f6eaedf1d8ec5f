// zero_advice: what one rank holds at each ZeRO stage and which built stage fits (tune/zero_advice.h).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/tune/zero_advice.h"
#include "test_util.h"

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
  ASSERT_EQ(a.levels.size(), 8u);  // stages 0-3, then 0-3 with the optimizer in host memory
  EXPECT_NEAR(a.activations_gb, 2, 1e-9);
  EXPECT_NEAR(a.levels[0].total_gb, 130, 1e-6);
  EXPECT_NEAR(a.levels[1].total_gb, 74, 1e-6);
  EXPECT_NEAR(a.levels[2].total_gb, 46, 1e-6);
  EXPECT_NEAR(a.levels[3].total_gb, 4 + 4 + 8 + 2, 1e-6);
  EXPECT_FALSE(a.levels[1].fits) << "74 GB is over 90% of 80 GB";
  EXPECT_EQ(a.recommended, 2);
  EXPECT_NE(a.table().find("use dist.zero = 2"), std::string::npos) << a.table();
  // The command that applies it, with the numbers the advice knows (--set after the command).
  EXPECT_NE(a.table().find("frugal launch -n 8 -- train CONFIG --set dist.zero=2"), std::string::npos) << a.table();
  EXPECT_EQ(a.to_json()["recommended"], 2);
  EXPECT_EQ(a.recommended_with_offload, -1) << "offload is advised only where nothing else fits";
  EXPECT_EQ(a.table().find("offload"), std::string::npos) << a.table();

  // 8 x 96 GB (86.4 usable): stage 1 fits and communicates less than stage 2.
  EXPECT_EQ(zero_advice(eight_billion(), 8, 96).recommended, 1);
  // One 192 GB GPU: nothing to shard.
  EXPECT_EQ(zero_advice(eight_billion(), 1, 192).recommended, 0);
}

TEST(ZeroAdvice, WhereOnlyZero3FitsItIsAdvisedWithItsWholeEmbeddingsSaid) {
  // 8 x 40 GB (36 usable): stage 2 needs 46, stage 3 18.
  const ZeroAdvice a = zero_advice(eight_billion(), 8, 40);
  EXPECT_EQ(a.recommended, 3);
  EXPECT_NEAR(a.levels[3].parameters_gb, 4, 1e-6);
  EXPECT_NE(a.table().find("use dist.zero = 3"), std::string::npos) << a.table();
  EXPECT_NE(a.table().find("keeps the embeddings and the output head whole"), std::string::npos) << a.table();
  EXPECT_EQ(a.to_json()["recommended"], 3);
  // Frozen parameters are not sharded: 8B frozen in fp32 (32 GB) stay whole on each rank.
  PlanFigures frozen = eight_billion();
  frozen.trainable_params = 0;
  EXPECT_NEAR(zero_advice(frozen, 8, 40).levels[3].parameters_gb, 32, 1e-6);
}

TEST(ZeroAdvice, WhereOnlyTheOptimizerInHostMemoryFitsItIsAdvisedWithItsHostBytes) {
  // 2 x 48 GB (43.2 usable): stage 3 needs 16 + 16 + 32 + 2 = 66; with its 32 GB of moments and
  // its 16 GB fp32 master shard in host memory, 34 (the GPU's fp32 shard as its gathers send it).
  // Offloaded stage 2 needs 32 + 16 + 2 = 50.
  const ZeroAdvice a = zero_advice(eight_billion(), 2, 48);
  EXPECT_EQ(a.recommended, -1);
  ASSERT_EQ(a.recommended_with_offload, 3);
  const ZeroLevel& l = a.levels[7];
  EXPECT_TRUE(l.offload);
  EXPECT_EQ(l.stage, 3);
  EXPECT_NEAR(l.total_gb, 16 + 16 + 2, 1e-6);
  // As summary.json's state_bytes_per_rank: nothing on the GPU, the moments and master in host memory.
  EXPECT_EQ(l.optimizer_gb, 0.0);
  EXPECT_NEAR(l.optimizer_host_gb, 32 + 16, 1e-6);
  EXPECT_NEAR(l.total_gb, l.parameters_gb + l.gradients_gb + l.optimizer_gb + a.activations_gb, 1e-9);
  EXPECT_FALSE(a.levels[6].fits) << "stage 2 with offload: 32 + 16 + 2 = 50";
  EXPECT_NEAR(a.levels[6].optimizer_host_gb, 32, 1e-6) << "below stage 3 the master is the GPU's parameters";
  const std::string t = a.table();
  EXPECT_NE(t.find("use dist.zero = 3 with dist.offload = \"optimizer\": AdamW's moments and the fp32 master "
                   "weights (48 GB a rank)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("3 + offload"), std::string::npos) << t;
  EXPECT_NE(t.find("0 (host 48 GB)"), std::string::npos) << "the column the total counts: " << t;
  EXPECT_EQ(a.to_json()["levels"][7]["optimizer_gb"], 0.0);
  EXPECT_EQ(a.to_json()["levels"][7]["optimizer_host_gb"], 48.0);
  EXPECT_EQ(a.to_json()["recommended_with_offload"], 3);
  // Under bf16 the GPU keeps the shard as its bf16 copy: 8 GB of parameters instead of 16.
  PlanFigures bf16 = eight_billion();
  bf16.bf16 = true;
  const ZeroAdvice b = zero_advice(bf16, 2, 48);
  EXPECT_NEAR(b.levels[7].parameters_gb, 8, 1e-6);
  EXPECT_NEAR(b.levels[7].optimizer_host_gb, 48, 1e-6);
  EXPECT_NEAR(b.levels[3].parameters_gb, 16, 1e-6) << "not offloaded, the fp32 master shard is on the GPU";
  // 8 x 48 GB: stage 3 fits on the GPUs (18 GB); offload is not advised.
  EXPECT_EQ(zero_advice(eight_billion(), 8, 48).recommended, 3);
  EXPECT_EQ(zero_advice(eight_billion(), 8, 48).recommended_with_offload, -1);
  // 2 x 32 GB (28.8 usable): 34 GB is over it, with or without offload.
  EXPECT_EQ(zero_advice(eight_billion(), 2, 32).recommended_with_offload, -1);
}

// ZeRO-3 shards a 12B model (48 GB in fp32) to 6 + 6 + 12 + 2 = 26 GB a rank on 8 GPUs, but every
// rank holds the whole model once at start-up, before sharding: on 48 GB cards (43.2 usable) it
// cannot start, and the table says why; on 64 GB cards it can (and stage 2 still cannot).
// Stage 3 starts from host memory: a GPU holds only the shards at start-up, so a 12B model (48 GB
// in fp32) trains on 8 x 48 GB cards at stage 3, and the advice names the host memory it needs.
TEST(ZeroAdvice, Zero3StartsFromHostMemorySoItFitsWhereItsShardsDo) {
  PlanFigures f = eight_billion();
  f.params = 12'000'000'000;
  f.trainable_params = f.params;
  f.param_bytes = 4 * f.params;
  f.optimizer_state_mb = 96'000;
  f.peak_tensor_mb = (48 + 48 + 96 + 2) * 1e3;
  const ZeroAdvice a = zero_advice(f, 8, 48);
  EXPECT_NEAR(a.levels[3].total_gb, 6 + 6 + 12 + 2, 1e-6);
  EXPECT_NEAR(a.levels[3].startup_gb, 6, 1e-6);
  EXPECT_NEAR(a.levels[3].startup_host_gb, 48, 1e-6);
  EXPECT_NEAR(a.levels[2].startup_gb, 48, 1e-6);  // stages 0-2 move the whole model to the GPU
  EXPECT_EQ(a.levels[2].startup_host_gb, 0.0);
  EXPECT_FALSE(a.levels[2].fits);  // 48 + 6 + 12 + 2 = 68 > 43.2 usable
  EXPECT_TRUE(a.levels[3].fits);
  EXPECT_EQ(a.recommended, 3);
  EXPECT_NE(a.table().find("each rank holds the whole model (48 GB) there"), std::string::npos) << a.table();
  EXPECT_EQ(a.to_json()["levels"][3]["startup_host_gb"], 48.0);
  EXPECT_EQ(a.to_json()["levels"][3]["startup_gb"], 6.0);
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

// The 8B model under Muon: its probe measured 40 GB of state, one fp32 momentum for 6B parameters
// of hidden matrices (24 GB) and AdamW's moments for the other 2B (16 GB).
PlanFigures eight_billion_muon() {
  PlanFigures f = eight_billion();
  f.source = "probe";
  f.optimizer = "muon";
  f.optimizer_state_mb = 40'000;
  f.peak_tensor_mb = (32 + 32 + 40 + 2) * 1e3;
  return f;
}

size_t rows_starting(const std::string& table, const std::string& start) {
  size_t n = 0;
  for (size_t at = table.find("\n" + start); at != std::string::npos; at = table.find("\n" + start, at + 1)) ++n;
  return n;
}

TEST(ZeroAdvice, MuonIsNeverAdvisedZero2Or3OrTheOffloadAndItsStateIsWhatItHolds) {
  // 8 x 40 GB (36 usable): stage 1 needs 32 + 32 + 5 + 2 = 71, stage 2 43; stage 3 (15) fits but
  // Muon refuses it, and the offload.
  const ZeroAdvice a = zero_advice(eight_billion_muon(), 8, 40);
  EXPECT_NEAR(a.activations_gb, 2, 1e-9);
  EXPECT_NEAR(a.levels[0].optimizer_gb, 40, 1e-6) << "Muon's measured state, not AdamW's 64 GB";
  EXPECT_NEAR(a.levels[1].optimizer_gb, 5, 1e-6);
  EXPECT_TRUE(a.levels[3].fits);
  EXPECT_EQ(a.levels[2].refused, "refused with muon");
  EXPECT_EQ(a.levels[3].refused, "refused with muon");
  EXPECT_EQ(a.levels[1].refused, "");
  EXPECT_EQ(a.recommended, -1);
  EXPECT_EQ(a.recommended_with_offload, -1);
  EXPECT_EQ(a.refused_but_fits, 3);
  const std::string t = a.table();
  EXPECT_EQ(t.find("use dist.zero"), std::string::npos) << t;
  EXPECT_NE(t.find("refused with muon"), std::string::npos) << t;
  EXPECT_NE(t.find("dist.zero = 3 would, with its state, but is refused with muon"), std::string::npos) << t;
  EXPECT_NE(t.find("dist.offload = \"optimizer\" (the state in host memory): refused with muon"), std::string::npos)
      << t;
  EXPECT_EQ(rows_starting(t, "  0 + offload"), 0u) << t;
  EXPECT_NE(t.find("about 6,000M parameters of the hidden matrices"), std::string::npos) << t;
  const nlohmann::json j = a.to_json();
  EXPECT_EQ(j["levels"][3]["refused"], "refused with muon");
  EXPECT_TRUE(j["levels"][1]["refused"].is_null());
  EXPECT_TRUE(j["recommended"].is_null());
  // 8 x 80 GB (72 usable): Muon's smaller state lets stage 1 fit (71 GB), where AdamW needed stage 2.
  EXPECT_EQ(zero_advice(eight_billion_muon(), 8, 80).recommended, 1);
  // 8 x 48 GB (43.2 usable): stage 2 fits (43 GB) but is refused: nothing is advised.
  const ZeroAdvice b = zero_advice(eight_billion_muon(), 8, 48);
  EXPECT_EQ(b.recommended, -1);
  EXPECT_EQ(b.refused_but_fits, 2);
  // Wherever it fits, never 2 or 3, with or without the offload.
  for (double gb : {24.0, 40.0, 48.0, 80.0, 141.0, 192.0})
    for (int64_t gpus : {2, 4, 8, 64}) {
      const ZeroAdvice z = zero_advice(eight_billion_muon(), gpus, gb);
      EXPECT_LT(z.recommended, 2) << gpus << " x " << gb;
      EXPECT_EQ(z.recommended_with_offload, -1) << gpus << " x " << gb;
    }
}

TEST(ZeroAdvice, MuonsStateIsWholeFromARunsShareAndAnUpperBoundWhereUnmeasured) {
  PlanFigures run = eight_billion_muon();  // a ZeRO-1 run of 8 ranks: one rank's 5 GB
  run.source = "run";
  run.optimizer_state_mb = 5'000;
  run.optimizer_state_ranks = 8;
  const ZeroAdvice a = zero_advice(run, 8, 80);
  EXPECT_NEAR(a.levels[0].optimizer_gb, 40, 1e-6);
  EXPECT_NE(a.table().find("as the run measured it (40 GB, its 8 ranks' shares together)"), std::string::npos)
      << a.table();
  PlanFigures unmeasured = eight_billion_muon();
  unmeasured.optimizer_state_mb = -1;
  const ZeroAdvice b = zero_advice(unmeasured, 8, 80);
  EXPECT_NEAR(b.levels[0].optimizer_gb, 64, 1e-6);
  EXPECT_NE(b.table().find("Muon's state was not measured"), std::string::npos) << b.table();
  EXPECT_NE(b.table().find("an upper bound"), std::string::npos) << b.table();
  EXPECT_EQ(b.to_json()["optimizer"], "muon");
}

TEST(ZeroAdvice, Torch_adamwTakesOneProcessOnly) {
  PlanFigures f = eight_billion();
  f.optimizer = "torch_adamw";
  const ZeroAdvice a = zero_advice(f, 8, 80);
  EXPECT_EQ(a.recommended, -1);
  EXPECT_EQ(a.refused_but_fits, 2);
  EXPECT_NE(a.table().find("torch_adamw: one process only"), std::string::npos) << a.table();
  EXPECT_EQ(zero_advice(f, 1, 192).recommended, 0);
  EXPECT_EQ(zero_advice(f, 1, 96).recommended_with_offload, -1) << "torch_adamw has no offload";
}

TEST(ZeroAdvice, OneGpuPrintsOneRowSinceNothingIsSharded) {
  const ZeroAdvice a = zero_advice(eight_billion(), 1, 192);
  ASSERT_EQ(a.levels.size(), 8u);
  for (int k = 1; k <= 3; ++k) EXPECT_NEAR(a.levels[k].total_gb, a.levels[0].total_gb, 1e-9);
  const std::string t = a.table();
  EXPECT_EQ(rows_starting(t, "  0 "), 1u) << t;
  for (const char* row : {"  1 ", "  2 ", "  3 "}) EXPECT_EQ(rows_starting(t, row), 0u) << t;
  EXPECT_NE(t.find("one GPU: every dist.zero holds the same"), std::string::npos) << t;
  EXPECT_NE(t.find("use dist.zero = 0: it fits on the one GPU"), std::string::npos) << t;
  // One 96 GB GPU (86.4 usable): 130 GB does not fit; with the moments in host memory 66 does.
  const ZeroAdvice b = zero_advice(eight_billion(), 1, 96);
  EXPECT_EQ(b.recommended_with_offload, 0);
  EXPECT_EQ(rows_starting(b.table(), "  0 + offload"), 1u) << b.table();
  EXPECT_EQ(rows_starting(b.table(), "  1 + offload"), 0u) << b.table();
  EXPECT_EQ(rows_starting(b.table(), "  0  "), 1u) << b.table();
}

TEST(ZeroAdvice, MemoryIsPrintedInTheUnitThatFits) {
  PlanFigures f;  // a small model: 100k parameters in fp32, no peak measured
  f.params = 100'000;
  f.trainable_params = f.params;
  f.param_bytes = 4 * f.params;
  const std::string t = zero_advice(f, 2, 80).table();
  EXPECT_EQ(t.find("e-0"), std::string::npos) << "no exponents: " << t;
  EXPECT_NE(t.find("2 GPU(s) of 80 GB (72 GB usable"), std::string::npos) << t;
  EXPECT_NE(t.find("400 KB"), std::string::npos) << t;  // parameters; gradients at stages 0-1
  EXPECT_NE(t.find("200 KB"), std::string::npos) << t;  // gradients at stages 2-3; stage 3's parameters
  EXPECT_NE(t.find("1.6 MB"), std::string::npos) << t;  // stage 0's total
  PlanFigures lora;  // 999.7 MB of frozen parameters and 40M trainable: 160 MB of gradients
  lora.params = 1'000'000'000;
  lora.trainable_params = 40'000'000;
  lora.param_bytes = 999'700'000;
  const std::string u = zero_advice(lora, 1, 24).table();
  EXPECT_NE(u.find(" 1 GB "), std::string::npos) << "999.7 MB to 3 digits: " << u;
  EXPECT_NE(u.find("160 MB"), std::string::npos) << u;
  EXPECT_NE(u.find("320 MB"), std::string::npos) << u;
}

// A run directory of the tiny model (34,688 parameters, all training, fused_adamw) trained on 2
// ranks at `zero`, with what a rank held as its summary.json records it and 2 MB of activations.
std::string fake_two_rank_run(const test::TempDir& dir, int zero) {
  const std::string run = dir.file("z" + std::to_string(zero));
  std::filesystem::create_directories(run);
  test::write_text(run + "/metrics.jsonl",
                   "{\"event\":\"step\",\"step\":5,\"elapsed_s\":0.5}\n"
                   "{\"event\":\"step\",\"step\":10,\"elapsed_s\":1.0}\n");
  const int64_t params = 34688, sharded = zero >= 3 ? 87936 : 4 * params;  // ZeRO-3: the blocks' half
  const int64_t grads = zero >= 2 ? 2 * params : 4 * params, moments = zero >= 1 ? 4 * params : 8 * params;
  const int64_t total = sharded + grads + moments;
  const nlohmann::json summary = {
      {"steps", 10},
      {"tokens", 5120},
      {"params", params},
      {"trainable_params", params},
      {"optimizer_state_mb", static_cast<double>(moments) / 1e6},
      {"peak_tensor_mb", static_cast<double>(total) / 1e6 + 2.0},
      {"state_bytes_per_rank",
       {{"parameters", sharded}, {"gradients", grads}, {"optimizer", moments}, {"total", total}}},
      {"levers",
       {{"zero", zero}, {"optimizer", {{"kind", "fused_adamw"}}}, {"batch", {{"world_size", 2}, {"micro_batch", 8}}}}},
      {"dist", {{"world_size", 2}, {"zero", zero}}}};
  test::write_text(run + "/summary.json", summary.dump());
  return run;
}

// A ZeRO-3 run's summary.json counts one rank's shard of the parameters: the memory table made
// from it is the one made from the same model trained at ZeRO-0 (the whole model's parameters,
// the same activations), not a table that shards the parameters twice.
TEST(ZeroAdvice, TheTableFromAZero3RunIsTheOneFromTheSameModelAtZero0) {
  test::TempDir dir;
  const PlanFigures whole = run_dir_figures(fake_two_rank_run(dir, 0));
  const PlanFigures shard = run_dir_figures(fake_two_rank_run(dir, 3));
  EXPECT_EQ(shard.param_bytes, 4 * 34688);
  const ZeroAdvice a = zero_advice(whole, 2, 80), b = zero_advice(shard, 2, 80);
  EXPECT_NEAR(a.activations_gb, 2e-3, 1e-12);
  EXPECT_NEAR(b.activations_gb, a.activations_gb, 1e-12);
  ASSERT_EQ(a.levels.size(), b.levels.size());
  for (size_t i = 0; i < a.levels.size(); ++i) {
    EXPECT_NEAR(b.levels[i].parameters_gb, a.levels[i].parameters_gb, 1e-15) << "level " << i;
    EXPECT_NEAR(b.levels[i].total_gb, a.levels[i].total_gb, 1e-15) << "level " << i;
  }
  EXPECT_EQ(b.table(), a.table());
}

}  // namespace
}  // namespace frugal::zero_advice_test
