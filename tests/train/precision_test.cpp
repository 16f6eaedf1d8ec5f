// The precision lever: bf16 tracks fp32, fp16 needs CUDA, and auto decides from measured speeds
// with its reason.
#include "frugal/train/precision.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "frugal/core/errors.h"
#include "frugal/core/machine_cache.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::precision_test {
namespace {

// precision.mode = "auto" on the CPU decides once per machine from alternating rounds and keeps
// the figures: the next decision reads them (the same figures give the same choice, with no new
// noisy probe); figures kept on another machine are not used; doctor's remeasure replaces them.
TEST(Precision, TheCpuAutoDecisionIsMeasuredOnceKeptWithItsEvidenceAndReused) {
  std::remove(machine_cache_path("precision.json").c_str());
  std::string why;
  CpuPrecisionSpeeds first;
  const PrecisionMode measured = cpu_auto_precision(&why, false, &first);
  EXPECT_EQ(first.rounds, 5);
  EXPECT_NE(why.find("kept in " + machine_cache_path("precision.json")), std::string::npos) << why;
  auto j = nlohmann::json::parse(test::read_text(machine_cache_path("precision.json")));
  EXPECT_EQ(j["chosen"], precision_name(measured));
  EXPECT_EQ(j["machine"], machine_identity());
  // Kept figures that say bf16 is 10x faster: read, not measured again.
  j["fp32_gflops"] = 10.0;
  j["bf16_gflops"] = 100.0;
  test::write_text(machine_cache_path("precision.json"), j.dump());
  EXPECT_EQ(cpu_auto_precision(&why), PrecisionMode::kBf16) << why;
  EXPECT_NE(why.find("bf16 matmul 100 GFLOP/s vs fp32 10"), std::string::npos) << why;
  j["fp32_gflops"] = 100.0;
  j["bf16_gflops"] = 10.0;
  test::write_text(machine_cache_path("precision.json"), j.dump());
  EXPECT_EQ(cpu_auto_precision(&why), PrecisionMode::kFp32) << why;
  EXPECT_EQ(PrecisionPolicy(PrecisionMode::kAuto, c10::Device(c10::kCPU)).mode(), PrecisionMode::kFp32);
  // Another machine's figures are measured over.
  j["machine"]["cpu"] = "another CPU";
  test::write_text(machine_cache_path("precision.json"), j.dump());
  CpuPrecisionSpeeds again;
  cpu_auto_precision(&why, false, &again);
  EXPECT_NE(again.fp32_gflops, 100.0);
  EXPECT_EQ(nlohmann::json::parse(test::read_text(machine_cache_path("precision.json")))["machine"],
            machine_identity());
}

TEST(Precision, Bf16LossCurveTracksFp32) {
  test::TempDir a, b;
  for (auto* d : {&a, &b}) {
    auto sets = test::tiny_overrides(d->path());
    sets.push_back("train.steps=60");
    if (d == &b) sets.push_back("precision.mode=bf16");
    Trainer(resolve_config("", sets, {}), test::quiet_run()).fit();
  }
  auto fa = test::step_losses(a.file("demo/metrics.jsonl")), fb = test::step_losses(b.file("demo/metrics.jsonl"));
  ASSERT_EQ(fa.size(), fb.size());
  // bf16 keeps ~3 significant digits in matmuls; over 60 steps the windowed mean losses stay
  // within 0.15 nats of fp32 (measured gaps are ~0.01-0.05) while falling by ~3 nats.
  for (size_t i = 0; i < fa.size(); ++i) EXPECT_NEAR(fa[i], fb[i], 0.15) << "window " << i;
  EXPECT_LT(fb.back(), fb.front() - 1.0);
}

// Evaluation runs in the training step's precision (bf16 autocast here), as a PyTorch loop under
// autocast evaluates: not in fp32, which costs a GPU several times the bf16 forward. With lr 0
// both runs keep the same initial weights, so their validation losses differ by the precision of
// the evaluation alone.
TEST(Precision, EvaluationRunsInTheTrainingPrecision) {
  test::TempDir a, b;
  std::vector<double> val;
  for (auto* d : {&a, &b}) {
    auto sets = test::tiny_overrides(d->path());
    for (const char* s : {"train.steps=2", "train.lr=0", "train.eval_every=2"}) sets.push_back(s);
    sets.push_back(d == &a ? "precision.mode=fp32" : "precision.mode=bf16");
    val.push_back(Trainer(resolve_config("", sets, {}), test::quiet_run()).fit()["final_val_loss"].get<double>());
  }
  EXPECT_NE(val[0], val[1]) << "the bf16 run evaluated in fp32";
  EXPECT_NEAR(val[0], val[1], 0.02 * val[0]);  // bf16 rounding, not another model
}

TEST(Precision, Fp16OnCpuIsAClearConfigError) {
  try {
    PrecisionPolicy p(PrecisionMode::kFp16, torch::kCPU);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos);
  }
}

TEST(Precision, AutoMeasuresAndSaysWhy) {
  PrecisionPolicy p(PrecisionMode::kAuto, torch::kCPU);
  EXPECT_TRUE(p.mode() == PrecisionMode::kBf16 || p.mode() == PrecisionMode::kFp32);
  EXPECT_NE(p.reason().find("GFLOP/s"), std::string::npos) << p.reason();
}

// The decision itself, from injected speeds: bf16 from 1.5x fp32 on, fp32 below.
// On a GPU, auto follows the compute capability: a T4 (7.5) or V100 (7.0) has no bf16 tensor
// cores and gets fp16 with loss scaling; an A100 (8.0) and newer bf16.
TEST(Precision, OnAGpuAutoPicksFp16BelowComputeCapability8AndSaysWhy) {
  std::string why;
  EXPECT_EQ(cuda_auto_precision("Tesla T4", 7, 5, &why), PrecisionMode::kFp16);
  EXPECT_NE(why.find("Tesla T4 (compute capability 7.5)"), std::string::npos) << why;
  EXPECT_NE(why.find("fp16 with dynamic loss scaling"), std::string::npos) << why;
  EXPECT_EQ(cuda_auto_precision("Tesla V100", 7, 0, nullptr), PrecisionMode::kFp16);
  EXPECT_EQ(cuda_auto_precision("A100", 8, 0, &why), PrecisionMode::kBf16);
  EXPECT_NE(why.find("-> bf16"), std::string::npos) << why;
  EXPECT_EQ(cuda_auto_precision("H100", 9, 0, nullptr), PrecisionMode::kBf16);
}

TEST(Precision, AutoChoosesBf16FromOneAndAHalfTimesFp32On) {
  std::string why;
  EXPECT_EQ(auto_precision(149, 100, &why), PrecisionMode::kFp32);
  EXPECT_NE(why.find("1.49x"), std::string::npos) << why;
  EXPECT_NE(why.find("-> fp32"), std::string::npos) << why;
  EXPECT_EQ(auto_precision(150, 100, &why), PrecisionMode::kBf16);
  EXPECT_NE(why.find("-> bf16"), std::string::npos) << why;
  EXPECT_EQ(auto_precision(240, 100, nullptr), PrecisionMode::kBf16);
  EXPECT_EQ(auto_precision(80, 100, nullptr), PrecisionMode::kFp32);
  EXPECT_EQ(auto_precision(80, 0, nullptr), PrecisionMode::kFp32);  // a failed fp32 probe: the safe choice
}

}  // namespace
}  // namespace frugal::precision_test
