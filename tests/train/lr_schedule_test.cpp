// Warm-up + cosine and warmup-stable-decay schedules, and gradient clipping against LibTorch's
// reference.
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

// WSD: the same warm-up, the peak held until the last decay_fraction of the run, then a linear
// decay that ends at the floor on the last step; lengthening the run while still stable changes no
// rate of the steps before the shorter run's decay (what a resume with a larger train.steps does).
TEST(LrSchedule, WarmupStableDecayHoldsThePeakThenDecaysLinearlyToTheFloor) {
  for (int s = 0; s < 10; ++s) EXPECT_DOUBLE_EQ(wsd_lr_at(s, 100, 10, 1.0, 0.1, 0.2), lr_at(s, 100, 10, 1.0, 0.1));
  EXPECT_EQ(wsd_decay_start(100, 10, 0.2), 80);
  for (int s = 10; s < 80; ++s) EXPECT_DOUBLE_EQ(wsd_lr_at(s, 100, 10, 1.0, 0.1, 0.2), 1.0) << s;
  EXPECT_LT(wsd_lr_at(80, 100, 10, 1.0, 0.1, 0.2), 1.0);
  EXPECT_DOUBLE_EQ(wsd_lr_at(99, 100, 10, 1.0, 0.1, 0.2), 0.1);
  for (int s = 81; s < 100; ++s) {
    const double step_down = wsd_lr_at(s - 1, 100, 10, 1.0, 0.1, 0.2) - wsd_lr_at(s, 100, 10, 1.0, 0.1, 0.2);
    EXPECT_NEAR(step_down, 0.9 / 20, 1e-12) << s;  // linear: equal steps down
  }
  for (int s = 0; s < 80; ++s)
    EXPECT_DOUBLE_EQ(wsd_lr_at(s, 100, 10, 1.0, 0.1, 0.2), wsd_lr_at(s, 150, 10, 1.0, 0.1, 0.2)) << s;
  // A decay longer than the run after its warm-up starts right after the warm-up.
  EXPECT_EQ(wsd_decay_start(20, 10, 0.9), 10);
  // train.schedule picks the schedule.
  TrainConfig t;
  t.steps = 100;
  t.warmup_steps = 10;
  t.lr = 1.0;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(schedule_lr(50, t), lr_at(50, 100, 10, 1.0, 0.1));
  t.schedule = LrSchedule::kWsd;
  EXPECT_DOUBLE_EQ(schedule_lr(50, t), 1.0);
}

}  // namespace
}  // namespace frugal::lr_schedule_test
