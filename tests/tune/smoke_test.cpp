// The smoke test: passes on a sound pipeline with its figures filled in, builds a LoRA model as
// the run builds it, and on failure names the stage and the cause and keeps its kind.
#include "frugal/tune/smoke.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "frugal/core/exit_code.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::smoke_test {
namespace {

ResolvedConfig tiny(const std::string& out, std::vector<std::string> extra = {}) {
  auto sets = test::tiny_overrides(out);
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config("", sets, {});
}

TEST(Smoke, PassesEveryStageAndReportsTheFigures) {
  test::TempDir dir;
  SmokeReport r = run_smoke(tiny(dir.path(), {"model.dropout=0.1"}));
  ASSERT_TRUE(r.ok) << r.describe();
  EXPECT_EQ(r.passed, (std::vector<std::string>{"config", "data", "forward", "memory", "train", "checkpoint", "resume",
                                                "compare"}));
  EXPECT_EQ(r.batch_shape, "[2, 16]");
  EXPECT_EQ(r.logits_shape, "[2, 16, 256]");
  EXPECT_GT(r.params, 0);
  EXPECT_GT(r.step_s, 0);
  EXPECT_GT(r.bytes_per_sample, 0);
  EXPECT_EQ(r.micro_batch, 8);
  EXPECT_GT(r.estimated_bytes, r.static_bytes);
  EXPECT_EQ(r.loss_resumed, r.loss_uninterrupted);
  EXPECT_NE(r.describe().find("compare     ok"), std::string::npos) << r.describe();
}

// A smoke test killed before its cleanup leaves its folder in the temp directory; the next one
// removes the folders of smoke tests whose process is gone (and its own when it ends).
TEST(Smoke, RemovesTheFoldersOfKilledSmokeTests) {
  test::TempDir dir;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path();
  const std::string dead = (tmp / "frugal-smoke-999999999-7").string();  // beyond any pid_max
  const std::string live = (tmp / fmt::format("frugal-smoke-{}-7", ::getpid())).string();
  for (const auto& d : {dead, live}) {
    std::filesystem::create_directories(d + "/smoke");
    test::write_text(d + "/smoke/x", "left behind");
  }
  SmokeReport r = run_smoke(tiny(dir.path(), {}));
  EXPECT_TRUE(r.ok) << r.describe();
  EXPECT_FALSE(std::filesystem::exists(dead)) << "a dead smoke test's folder was kept";
  EXPECT_TRUE(std::filesystem::exists(live)) << "a running process's folder was removed";
  std::filesystem::remove_all(live);
}

TEST(Smoke, MissingDataFailsAtTheDataStageNamingTheFile) {
  test::TempDir dir;
  SmokeReport r = run_smoke(tiny(dir.path(), {"data.source=text:" + dir.file("absent.txt")}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.stage, "data");
  EXPECT_NE(r.error.find("absent.txt"), std::string::npos) << r.error;
  EXPECT_NE(r.describe().find("data        FAILED"), std::string::npos) << r.describe();
}

// A LoRA config is smoke-tested as it trains: adapters over a frozen base. The parameters that
// train are the run's, and the memory estimate has gradients and moments for them only (it had the
// full fine-tune's count and 16 bytes for each of its parameters).
TEST(Smoke, ALoraConfigCountsTheRunsTrainableParametersAndTheirMemory) {
  test::TempDir dir;
  const std::vector<std::string> lora = {"lora.rank=4", "lora.targets=c_attn,c_fc"};
  const SmokeReport full = run_smoke(tiny(dir.path()));
  const SmokeReport r = run_smoke(tiny(dir.path(), lora));
  ASSERT_TRUE(full.ok) << full.describe();
  ASSERT_TRUE(r.ok) << r.describe();
  // One block: c_attn (in 32, out 96) and c_fc (in 32, out 128), rank 4.
  EXPECT_EQ(r.trainable_params, 4 * (32 + 96) + 4 * (32 + 128));
  EXPECT_EQ(r.params, full.params + r.trainable_params);
  EXPECT_EQ(full.trainable_params, full.params);
  EXPECT_DOUBLE_EQ(full.static_bytes, 16.0 * static_cast<double>(full.params));
  EXPECT_LT(r.static_bytes, 0.5 * full.static_bytes) << r.describe();
  EXPECT_GT(r.static_bytes, 12.0 * static_cast<double>(r.trainable_params));
  EXPECT_NE(r.describe().find(fmt::format("parameters {} ({} train", r.params, r.trainable_params)), std::string::npos)
      << r.describe();

  Trainer t(tiny(dir.path(), lora), test::quiet_run());
  const nlohmann::json s = t.fit();
  EXPECT_EQ(s["params"].get<int64_t>(), r.params);
  EXPECT_EQ(s["trainable_params"].get<int64_t>(), r.trainable_params);
}

// A [lora] key the model cannot take is bad input found at the config stage, before any data or
// forward pass (it failed the memory stage, after "forward ok", as a failure: exit 1).
TEST(Smoke, ABadLoraTargetFailsTheConfigStageAsBadInput) {
  test::TempDir dir;
  const SmokeReport r = run_smoke(tiny(dir.path(), {"lora.rank=4", "lora.targets=c_atn"}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.stage, "config");
  EXPECT_TRUE(r.passed.empty());
  EXPECT_NE(r.error.find("lora.targets: \"c_atn\" names no projection"), std::string::npos) << r.error;
  EXPECT_EQ(r.exit_code(), ExitCode::kBadInput);
  // A failure of frugal's own stays exit 1.
  EXPECT_EQ(run_smoke(tiny(dir.path()), "config").exit_code(), ExitCode::kFailure);
}

// A failure injected at each stage stops the test there: the stages before it passed, the report
// names the stage, and nothing after it ran.
TEST(Smoke, EveryStageReportsItsOwnFailure) {
  test::TempDir dir;
  const std::vector<std::string> order = {"config", "data",       "forward", "memory",
                                          "train",  "checkpoint", "resume",  "compare"};
  for (size_t i = 0; i < order.size(); ++i) {
    SmokeReport r = run_smoke(tiny(dir.path()), order[i]);
    EXPECT_FALSE(r.ok) << order[i];
    EXPECT_EQ(r.stage, order[i]);
    EXPECT_NE(r.error.find(order[i]), std::string::npos) << r.error;
    EXPECT_EQ(r.passed, std::vector<std::string>(order.begin(), order.begin() + static_cast<long>(i)));
    EXPECT_NE(r.describe().find("FAILED"), std::string::npos);
  }
}

}  // namespace
}  // namespace frugal::smoke_test
