// precision.mode = "fp8" through the Trainer (model/fp8.h): GPT and Llama runs train with their
// blocks' linears in fp8 and track bf16; the final weights are the plain ones (the same tensors as
// a bf16 run's, nothing fp8 kept); a run stopped and resumed reproduces the uninterrupted one
// bitwise; LoRA and scripted modules are refused by name. The layer itself: tests/model/fp8_test.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/errors.h"
#include "resume_util.h"
#include "test_util.h"

namespace frugal::fp8_run_test {
namespace {

const std::vector<std::string> kLlama = {"model.arch=llama", "model.layers=2",     "model.heads=4",
                                         "model.kv_heads=2", "model.mlp_width=64", "model.tie_embeddings=false",
                                         "model.dropout=0"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Fp8Run, GptAndLlamaRunsTrainInFp8AndTrackBf16) {
  for (const auto& family : {std::vector<std::string>{}, kLlama}) {
    test::TempDir a, b;
    const auto fp8 = test::train_tiny(a.path(), with(family, {"precision.mode=fp8"}));
    const auto bf16 = test::train_tiny(b.path(), with(family, {"precision.mode=bf16"}));
    EXPECT_EQ(fp8["precision"], "fp8");
    EXPECT_NE(fp8["levers"]["precision"]["reason"].get<std::string>().find("fp8 linears"), std::string::npos);
    const auto l8 = test::step_losses(a.path() + "/demo/metrics.jsonl");
    const auto l16 = test::step_losses(b.path() + "/demo/metrics.jsonl");
    ASSERT_EQ(l8.size(), l16.size());
    ASSERT_GE(l8.size(), 2u);
    EXPECT_LT(l8.back(), 0.8 * l8.front()) << "the fp8 run did not learn";
    EXPECT_NEAR(l8.back(), l16.back(), 0.05 * l16.back());
    EXPECT_NE(l8, l16) << "fp8 computed what bf16 computes: the linears did not run in fp8";
    // The final weights are plain fp32 tensors, the same names and shapes as the bf16 run's.
    const auto w8 = load_safetensors(a.path() + "/demo/final/model.safetensors").tensors;
    const auto w16 = load_safetensors(b.path() + "/demo/final/model.safetensors").tensors;
    ASSERT_EQ(w8.size(), w16.size());
    for (size_t i = 0; i < w8.size(); ++i) {
      EXPECT_EQ(w8[i].first, w16[i].first);
      EXPECT_EQ(w8[i].second.sizes(), w16[i].second.sizes()) << w8[i].first;
      EXPECT_EQ(w8[i].second.scalar_type(), at::kFloat) << w8[i].first;
    }
  }
}

TEST(Fp8Run, AStoppedFp8RunResumesBitwise) {
  for (const auto& x :
       {std::vector<std::string>{"precision.mode=fp8", "train.accum=2", "memory.activation_checkpointing=blocks"},
        with(kLlama, {"precision.mode=fp8"})}) {
    test::TempDir a, b;
    test::train_tiny(a.path(), x);
    test::interrupted_then_resumed(b.path(), x, 12);
    test::expect_identical_runs(a.path(), b.path());
  }
}

TEST(Fp8Run, LoraWithFp8IsRefusedByName) {
  test::TempDir d;
  try {
    test::train_tiny(d.path(), {"precision.mode=fp8", "lora.rank=4"});
    FAIL() << "fp8 with LoRA trained";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lora.rank = 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("precision.mode = \"bf16\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::fp8_run_test
