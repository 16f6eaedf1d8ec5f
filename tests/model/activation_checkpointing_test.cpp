// Activation checkpointing: gradients equal plain backward bitwise (dropout included), the plan
// picks the documented blocks, and a bad setting is a config error.
#include "frugal/model/activation_checkpointing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/model/gpt.h"
#include "frugal/train/train_step.h"
#include "test_util.h"

namespace frugal::activation_checkpointing_test {
namespace {

ActivationCheckpointing spelled(const std::string& spec) { return parse_activation_checkpointing(spec).value(); }

std::vector<at::Tensor> grads_with(const std::string& spec, double dropout) {
  ModelConfig mc = test::tiny_config().model;
  mc.layers = 4;
  mc.dropout = dropout;
  torch::manual_seed(9);
  Gpt m(mc);
  CausalLm lm = as_causal_lm(m);
  install_activation_checkpointing(lm, spelled(spec));
  torch::manual_seed(10);
  auto x = torch::randint(0, 256, {4, 16}, torch::kLong);
  auto y = torch::randint(0, 256, {4, 16}, torch::kLong);
  m->loss(x, y).backward();
  std::vector<at::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().clone());
  return g;
}

TEST(ActivationCheckpointing, GradientsEqualPlainBackwardBitwiseEvenWithDropout) {
  auto plain = grads_with("none", 0.1);
  for (const char* spec : {"blocks", "every:2"}) {
    auto ck = grads_with(spec, 0.1);
    ASSERT_EQ(plain.size(), ck.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], ck[i])) << spec << " param " << i;
  }
}

TEST(ActivationCheckpointing, PlanSelectsTheDocumentedBlocks) {
  EXPECT_EQ(checkpoint_plan(spelled("none"), 4), std::vector<bool>({false, false, false, false}));
  EXPECT_EQ(checkpoint_plan(spelled("blocks"), 3), std::vector<bool>({true, true, false}));
  EXPECT_EQ(checkpoint_plan(spelled("every:2"), 5), std::vector<bool>({true, false, true, false, false}));
  EXPECT_EQ(checkpoint_plan(spelled("every:2"), 4), std::vector<bool>({true, false, true, false}));
  EXPECT_EQ(checkpoint_plan(spelled("blocks"), 1), std::vector<bool>({false}));
}

TEST(ActivationCheckpointing, BadSpecIsAConfigError) {
  EXPECT_THROW(resolve_config("", {"memory.activation_checkpointing=every:0"}, {}), ConfigError);
  EXPECT_THROW(resolve_config("", {"memory.activation_checkpointing=some"}, {}), ConfigError);
}

}  // namespace
}  // namespace frugal::activation_checkpointing_test
