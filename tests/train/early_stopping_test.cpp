// Early stopping: one test per transition of next_early_stop(), and the callback's state survives
// save_state/load_state.
#include "frugal/train/early_stopping.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace frugal::early_stopping_test {
namespace {

EarlyStopConfig cfg(int64_t patience, double delta = 0, int64_t warmup = 0, MetricMode mode = MetricMode::kMin) {
  EarlyStopConfig c;
  c.enabled = true;
  c.patience = patience;
  c.min_delta = delta;
  c.warmup = warmup;
  c.mode = mode;
  return c;
}

// An evaluation at `step` with these losses (no time, no task metrics).
EvalMetrics eval_at(int64_t step, double val_loss, double best_val_loss) {
  EvalMetrics m;
  m.step = step;
  m.val_loss = val_loss;
  m.best_val_loss = best_val_loss;
  return m;
}

TEST(EarlyStopping, WarmupValuesAreIgnored) {
  auto c = cfg(1, 0, 2);
  EarlyStopState s;
  auto d = next_early_stop(s, 5.0, 1, c);
  EXPECT_FALSE(d.state.has_best);
  d = next_early_stop(d.state, 9.0, 2, c);
  EXPECT_FALSE(d.state.has_best);
  EXPECT_FALSE(d.stop);
  d = next_early_stop(d.state, 7.0, 3, c);  // first counted
  EXPECT_TRUE(d.state.has_best);
  EXPECT_EQ(d.state.best, 7.0);
}

TEST(EarlyStopping, FirstCountedValueBecomesTheBest) {
  auto d = next_early_stop({}, 3.0, 10, cfg(2));
  EXPECT_TRUE(d.state.has_best);
  EXPECT_EQ(d.state.best, 3.0);
  EXPECT_EQ(d.state.best_step, 10);
  EXPECT_EQ(d.state.bad, 0);
  EXPECT_FALSE(d.stop);
}

TEST(EarlyStopping, ImprovementBeyondMinDeltaResetsTheCounter) {
  auto c = cfg(3, 0.1);
  auto d = next_early_stop({}, 3.0, 1, c);
  d = next_early_stop(d.state, 2.95, 2, c);  // within min_delta: a stall
  EXPECT_EQ(d.state.bad, 1);
  EXPECT_EQ(d.state.best, 3.0);
  d = next_early_stop(d.state, 2.8, 3, c);  // beyond: improvement
  EXPECT_EQ(d.state.bad, 0);
  EXPECT_EQ(d.state.best, 2.8);
  EXPECT_EQ(d.state.best_step, 3);
}

TEST(EarlyStopping, PatienceStallsStopWithAReason) {
  auto c = cfg(2);
  auto d = next_early_stop({}, 1.0, 1, c);
  d = next_early_stop(d.state, 1.5, 2, c);
  EXPECT_FALSE(d.stop);
  d = next_early_stop(d.state, 1.2, 3, c);
  EXPECT_TRUE(d.stop);
  EXPECT_NE(d.reason.find("val_loss did not improve"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("step 1"), std::string::npos) << d.reason;
}

TEST(EarlyStopping, MaxModeTreatsLargerAsBetter) {
  auto c = cfg(1, 0, 0, MetricMode::kMax);
  auto d = next_early_stop({}, 0.5, 1, c);
  d = next_early_stop(d.state, 0.7, 2, c);
  EXPECT_EQ(d.state.best, 0.7);
  EXPECT_FALSE(d.stop);
  d = next_early_stop(d.state, 0.6, 3, c);
  EXPECT_TRUE(d.stop);
}

TEST(EarlyStopping, NanCountsAsAStallAndNeverBecomesBest) {
  auto c = cfg(2);
  auto d = next_early_stop({}, NAN, 1, c);
  EXPECT_FALSE(d.state.has_best);
  EXPECT_EQ(d.state.bad, 1);
  d = next_early_stop(d.state, NAN, 2, c);
  EXPECT_TRUE(d.stop);
  EXPECT_NE(d.reason.find("not finite"), std::string::npos);
}

TEST(EarlyStopping, CallbackStateSurvivesSaveAndLoad) {
  auto c = cfg(3);
  EarlyStopping a(c);
  Control ctl;
  a.on_eval_end(eval_at(1, 2.0, 2.0), ctl);
  a.on_eval_end(eval_at(2, 2.5, 2.0), ctl);
  nlohmann::json j;
  a.save_state(j);
  EarlyStopping b(c);
  b.load_state(j);
  EXPECT_EQ(b.state().bad, 1);
  EXPECT_EQ(b.state().best, 2.0);
  b.on_eval_end(eval_at(3, 2.6, 2.0), ctl);
  EXPECT_FALSE(ctl.should_stop());
  b.on_eval_end(eval_at(4, 2.7, 2.0), ctl);
  EXPECT_TRUE(ctl.should_stop());
  EXPECT_EQ(ctl.stop_kind(), StopKind::kEarlyStop);
}

TEST(EarlyStopping, StepMetricCountsLogStepsOnly) {
  auto c = cfg(1);
  c.metric = Metric::kLoss;
  EarlyStopping e(c);
  Control ctl;
  StepMetrics m;
  m.logged = false;
  m.loss = 100;
  e.on_step_end(m, ctl);
  EXPECT_EQ(e.state().seen, 0);
  m.logged = true;
  m.loss = 1;
  e.on_step_end(m, ctl);
  EXPECT_EQ(e.state().seen, 1);
  e.on_eval_end(eval_at(1, 0.1, 0.1), ctl);  // val_loss is not the metric
  EXPECT_EQ(e.state().seen, 1);
}

}  // namespace
}  // namespace frugal::early_stopping_test
