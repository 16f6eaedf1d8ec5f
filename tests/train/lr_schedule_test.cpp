// Warm-up + cosine schedule, and gradient clipping against LibTorch's reference.
#include "frugal/train/lr_schedule.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/train/grad_clip.h"

namespace frugal {
namespace {

TEST(LrSchedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(lr_at(99, 100, 10, 1.0, 0.1), 0.1, 1e-12);
  // Halfway through the decay the cosine is at its midpoint.
  EXPECT_NEAR(lr_at(10 + 89 / 2.0, 100, 10, 1.0, 0.1), 0.55, 0.02);
  for (int s = 11; s < 100; ++s) EXPECT_LE(lr_at(s, 100, 10, 1.0, 0.1), lr_at(s - 1, 100, 10, 1.0, 0.1));
}

TEST(GradClip, MatchesTorchClipGradNorm) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> a, b;
  for (int i = 0; i < 4; ++i) {
    auto p = torch::randn({5, 7}, torch::requires_grad());
    p.mutable_grad() = torch::randn({5, 7}) * 3;
    auto q = p.detach().clone().requires_grad_();
    q.mutable_grad() = p.grad().clone();
    a.push_back(p);
    b.push_back(q);
  }
  double ref = torch::nn::utils::clip_grad_norm_(b, 1.0);
  auto norm = clip_grad_norm(a, 1.0);
  EXPECT_NEAR(norm.item<double>(), ref, 1e-4 * ref);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::allclose(a[i].grad(), b[i].grad(), 1e-5, 1e-6));
  // Below the threshold nothing changes.
  auto before = a[0].grad().clone();
  clip_grad_norm(a, 100.0);
  EXPECT_TRUE(torch::equal(before, a[0].grad()));
}

}  // namespace
}  // namespace frugal
