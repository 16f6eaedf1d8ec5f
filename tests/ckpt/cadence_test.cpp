// Checkpoint cadence: each rule of checkpoint_due() and the Young/Daly interval.
#include "frugal/ckpt/cadence.h"

#include <gtest/gtest.h>

#include <cmath>

namespace frugal::cadence_test {
namespace {

CheckpointConfig steps_only(int64_t n) {
  CheckpointConfig c;
  c.every_steps = n;
  c.every_minutes = 0;
  return c;
}

TEST(Cadence, YoungDalyIsSqrtOfTwiceCostTimesMtbf) {
  EXPECT_DOUBLE_EQ(young_daly_interval_s(2, 7200), std::sqrt(2.0 * 2 * 7200));  // ~170 s
}

TEST(Cadence, EveryStepsFiresOnMultiplesOnly) {
  auto c = steps_only(5);
  EXPECT_FALSE(checkpoint_due(c, {4, 0, 0, -1}));
  EXPECT_TRUE(checkpoint_due(c, {5, 0, 0, -1}));
  EXPECT_FALSE(checkpoint_due(c, {6, 5, 0, -1}));
  EXPECT_FALSE(checkpoint_due(c, {5, 5, 0, -1}));  // already saved at this step
}

TEST(Cadence, EveryMinutesFiresAfterTheIntervalSinceTheLastSave) {
  CheckpointConfig c;
  c.every_minutes = 2;
  EXPECT_FALSE(checkpoint_due(c, {3, 0, 119, -1}));
  EXPECT_TRUE(checkpoint_due(c, {3, 0, 120, -1}));
}

TEST(Cadence, AutoMeasuresFirstThenUsesYoungDaly) {
  CheckpointConfig c;
  c.auto_interval = true;
  c.every_minutes = 0;
  c.mtbf_minutes = 60;
  EXPECT_TRUE(checkpoint_due(c, {1, 0, 0.1, -1}));           // no measurement yet: save to measure
  const double interval = young_daly_interval_s(0.5, 3600);  // 60 s
  EXPECT_FALSE(checkpoint_due(c, {50, 1, interval - 1, 0.5}));
  EXPECT_TRUE(checkpoint_due(c, {50, 1, interval + 1, 0.5}));
}

TEST(Cadence, DisabledNeverFires) {
  auto c = steps_only(1);
  c.enabled = false;
  EXPECT_FALSE(checkpoint_due(c, {1, 0, 1e9, 1}));
}

TEST(Cadence, CallbackRequestsAndLearnsFromTheSave) {
  CheckpointCadence cad(steps_only(2));
  Control ctl;
  StepMetrics m;
  m.step = 2;
  cad.on_step_end(m, ctl);
  EXPECT_TRUE(ctl.checkpoint_requested());
  cad.on_checkpoint({2, "p", 0.1, false});
  Control again;
  cad.on_step_end(m, again);  // same step: already saved
  EXPECT_FALSE(again.checkpoint_requested());
}

}  // namespace
}  // namespace frugal::cadence_test
