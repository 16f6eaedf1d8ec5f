// Divergence guard: one test per transition of next_guard_state().
#include "frugal/train/divergence_guard.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace frugal::divergence_guard_test {
namespace {

GuardConfig cfg(double factor = 2.0, int64_t windows = 2) {
  GuardConfig g;
  g.spike_factor = factor;
  g.spike_windows = windows;
  g.ema_decay = 0.5;
  return g;
}

TEST(DivergenceGuard, FirstWindowSeedsTheAverage) {
  auto v = next_guard_state({}, 4.0, 10, cfg());
  EXPECT_FALSE(v.diverged);
  EXPECT_EQ(v.state.ema, 4.0);
  EXPECT_EQ(v.state.good_step, 10);
}

TEST(DivergenceGuard, NormalWindowMovesTheAverageAndTheGoodStep) {
  auto v = next_guard_state({}, 4.0, 10, cfg());
  v = next_guard_state(v.state, 2.0, 20, cfg());
  EXPECT_DOUBLE_EQ(v.state.ema, 3.0);
  EXPECT_EQ(v.state.good_step, 20);
  EXPECT_EQ(v.state.above, 0);
}

TEST(DivergenceGuard, NonFiniteLossDivergesAtOnce) {
  auto v = next_guard_state({}, 4.0, 10, cfg());
  v = next_guard_state(v.state, NAN, 20, cfg());
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.state.good_step, 10);
  EXPECT_NE(v.reason.find("nan"), std::string::npos) << v.reason;
  EXPECT_TRUE(next_guard_state({}, INFINITY, 5, cfg()).diverged);
}

TEST(DivergenceGuard, SpikeStreakDivergesAfterKWindowsAndKeepsTheAverage) {
  auto v = next_guard_state({}, 1.0, 10, cfg(2.0, 2));
  v = next_guard_state(v.state, 3.0, 20, cfg(2.0, 2));
  EXPECT_FALSE(v.diverged);
  EXPECT_EQ(v.state.above, 1);
  EXPECT_EQ(v.state.ema, 1.0);       // the spike did not move the average
  EXPECT_EQ(v.state.good_step, 10);  // nor the good step
  v = next_guard_state(v.state, 3.5, 30, cfg(2.0, 2));
  EXPECT_TRUE(v.diverged);
  EXPECT_NE(v.reason.find("for 2 log windows"), std::string::npos) << v.reason;
}

TEST(DivergenceGuard, ANormalWindowResetsTheStreak) {
  auto v = next_guard_state({}, 1.0, 10, cfg(2.0, 2));
  v = next_guard_state(v.state, 3.0, 20, cfg(2.0, 2));
  v = next_guard_state(v.state, 1.1, 30, cfg(2.0, 2));
  EXPECT_EQ(v.state.above, 0);
  v = next_guard_state(v.state, 3.0, 40, cfg(2.0, 2));
  EXPECT_FALSE(v.diverged);
}

TEST(DivergenceGuard, FactorZeroWatchesOnlyNonFiniteLosses) {
  auto v = next_guard_state({}, 1.0, 10, cfg(0, 1));
  v = next_guard_state(v.state, 1000.0, 20, cfg(0, 1));
  EXPECT_FALSE(v.diverged);
}

TEST(DivergenceGuard, CallbackRequestsARollbackToTheGoodStep) {
  DivergenceGuard g(cfg(2.0, 1));
  Control ctl;
  StepMetrics m;
  m.logged = true;
  m.step = 5;
  m.loss = 1.0;
  g.on_step_end(m, ctl);
  m.step = 10;
  m.loss = 50.0;
  g.on_step_end(m, ctl);
  EXPECT_TRUE(ctl.rollback_requested());
  EXPECT_EQ(ctl.rollback_max_step(), 5);
  nlohmann::json j;
  g.save_state(j);
  EXPECT_EQ(j["good_step"], 5);
}

}  // namespace
}  // namespace frugal::divergence_guard_test
