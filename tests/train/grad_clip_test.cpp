// Gradient clipping on the global norm, against LibTorch's clip_grad_norm_.
#include "frugal/train/grad_clip.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace frugal::grad_clip_test {
namespace {

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
}  // namespace frugal::grad_clip_test
