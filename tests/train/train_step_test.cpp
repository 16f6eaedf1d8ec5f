// The step's maths: accumulation equals the large batch (precision and activation checkpointing
// have their own files: precision_test.cpp, model/activation_checkpointing_test.cpp).
#include "frugal/train/train_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include <fstream>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "frugal/core/errors.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::train_step_test {
namespace {

// Micro-batch i of size B is rows [i*B, (i+1)*B) of a fixed table, so 4 x 4 and 1 x 16 see the
// same sequences in each optimizer step.
class TableSource : public BatchSource {
 public:
  TableSource(int64_t micro, int64_t block) : micro_(micro) {
    torch::manual_seed(11);
    table_ = torch::randint(0, 256, {4096, block + 1}, torch::kLong);
  }
  Batch train_batch(int64_t i) override {
    auto rows = table_.narrow(0, i * micro_, micro_);
    return {rows.narrow(1, 0, rows.size(1) - 1).contiguous(), rows.narrow(1, 1, rows.size(1) - 1).contiguous()};
  }
  Batch val_batch(int64_t i) override { return train_batch(i); }
  std::string describe() const override { return "table"; }
  int64_t train_tokens() const override { return table_.numel(); }
  int64_t val_tokens() const override { return table_.numel(); }

 private:
  int64_t micro_;
  at::Tensor table_;
};

struct Trained {
  std::vector<at::Tensor> weights, grads;  // after the last step; grads as the optimizer saw them
};

Trained train_tiny(Config c, int64_t steps) {
  torch::manual_seed(5);
  Gpt model(c.model);
  TableSource data(c.data.micro_batch, c.model.block);
  TrainStep step(c, model, data, torch::kCPU);
  for (int64_t i = 0; i < steps; ++i) step.run(i, c.train.lr);
  Trained t;
  for (auto& p : model->parameters()) t.weights.push_back(p.detach().clone());
  for (const auto& g : step.optimizer().grads()) t.grads.push_back(g.detach().clone());
  return t;
}

// Gradients are compared, not weights: AdamW is nearly blind to a gradient's scale, so weights
// would agree even with a missing or wrong division by accum. Compared at the first step (same
// weights) and the third (after two updates, so the weights agree as well).
TEST(TrainStep, AccumulatingFourMicroBatchesOfFourGivesTheGradientOfOneBatchOfSixteen) {
  Config a = test::tiny_config(), b = test::tiny_config();
  a.data.micro_batch = 4;
  a.train.global_batch = 16;
  b.data.micro_batch = 16;
  ASSERT_EQ(accumulation_steps(a), 4);
  ASSERT_EQ(accumulation_steps(b), 1);
  a.train.grad_clip = b.train.grad_clip = 0;  // clipping would rescale a wrong gradient to the same norm
  for (int64_t steps : {1, 3}) {
    auto ga = train_tiny(a, steps).grads, gb = train_tiny(b, steps).grads;
    ASSERT_EQ(ga.size(), gb.size());
    double norm_a = 0, norm_b = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      norm_a += ga[i].pow(2).sum().item<double>();
      norm_b += gb[i].pow(2).sum().item<double>();
      // The two sum the same per-sequence gradients in another order (fp32 re-association).
      EXPECT_TRUE(torch::allclose(ga[i], gb[i], /*rtol=*/1e-3, /*atol=*/1e-6))
          << "step " << steps << " tensor " << i << " max diff " << (ga[i] - gb[i]).abs().max().item<double>();
    }
    EXPECT_GT(norm_b, 0);
    EXPECT_NEAR(std::sqrt(norm_a / norm_b), 1.0, 1e-4) << "step " << steps;
  }
  // The weights, what users see, agree too.
  auto wa = train_tiny(a, 5).weights, wb = train_tiny(b, 5).weights;
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_TRUE(torch::allclose(wa[i], wb[i], /*rtol=*/1e-4, /*atol=*/1e-4)) << i;
}

TEST(TrainStep, GlobalBatchMustBeAMultipleOfMicroBatch) {
  test::TempDir dir;
  try {
    resolve_config("", {"data.micro_batch=6", "train.global_batch=16"}, {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of data.micro_batch = 6"), std::string::npos);
  }
}

}  // namespace
}  // namespace frugal::train_step_test
