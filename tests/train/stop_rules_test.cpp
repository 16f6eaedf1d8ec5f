// The time limit, the non-finite loss stop and the target loss, as callbacks.
#include "frugal/train/stop_rules.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace frugal::stop_rules_test {
namespace {

TEST(TimeLimit, StopsWhenBilledTimeReachesTheLimitAfterAStepOrAnEvaluation) {
  TimeLimit limit(2.0);  // minutes
  Control c;
  StepMetrics m;
  m.elapsed_s = 119.9;
  limit.on_step_end(m, c);
  EXPECT_FALSE(c.should_stop());
  EvalMetrics e;
  e.elapsed_s = 120.0;  // the evaluation after that step crossed it
  limit.on_eval_end(e, c);
  ASSERT_TRUE(c.should_stop());
  EXPECT_EQ(c.stop_kind(), StopKind::kMaxMinutes);
  EXPECT_EQ(c.stop_reason(), "train.max_minutes = 2 reached");
  Control after_step;
  m.elapsed_s = 121;
  limit.on_step_end(m, after_step);
  EXPECT_EQ(after_step.stop_kind(), StopKind::kMaxMinutes);
}

// At a step with an evaluation due the evaluation runs first, so early stopping (or any stop it
// causes) decides, and the limit is checked after it, as the time it took counts.
TEST(TimeLimit, AtAnEvaluationStepTheLimitWaitsForTheEvaluation) {
  TimeLimit limit(1.0, /*eval_every=*/10);
  StepMetrics m;
  m.elapsed_s = 61;
  m.step = 20;
  Control at_eval_step;
  limit.on_step_end(m, at_eval_step);
  EXPECT_FALSE(at_eval_step.should_stop());
  EvalMetrics e;
  e.elapsed_s = 62;
  limit.on_eval_end(e, at_eval_step);
  EXPECT_EQ(at_eval_step.stop_kind(), StopKind::kMaxMinutes);
  m.step = 21;
  Control between;
  limit.on_step_end(m, between);
  EXPECT_EQ(between.stop_kind(), StopKind::kMaxMinutes);
}

TEST(TimeLimit, ZeroMeansNoLimit) {
  TimeLimit limit(0);
  Control c;
  StepMetrics m;
  m.elapsed_s = 1e9;
  limit.on_step_end(m, c);
  EXPECT_FALSE(c.should_stop());
}

// While the loss scaler runs it skips inf/NaN steps itself; after an fp16 run fell back to bf16 it
// does not, and a NaN loss must stop the run.
TEST(NonFiniteLossStop, LeavesNaNToTheLossScalerOnlyWhileItRuns) {
  NonFiniteLossStop stop;
  StepMetrics m;
  m.logged = true;
  m.loss = std::nan("");
  m.loss_scaling = true;
  Control scaled;
  stop.on_step_end(m, scaled);
  EXPECT_FALSE(scaled.should_stop());
  m.loss_scaling = false;  // fell back to bf16
  Control after_fallback;
  stop.on_step_end(m, after_fallback);
  EXPECT_TRUE(after_fallback.should_stop());
}

TEST(NonFiniteLossStop, StopsOnANaNOrInfiniteLogWindowOnly) {
  NonFiniteLossStop stop;
  StepMetrics m;
  m.step = 7;
  m.loss = std::nan("");
  Control between_logs;
  stop.on_step_end(m, between_logs);  // not a log step: the loss is the newest log step's
  EXPECT_FALSE(between_logs.should_stop());
  m.logged = true;
  m.loss = 2.0;
  Control finite;
  stop.on_step_end(m, finite);
  EXPECT_FALSE(finite.should_stop());
  for (double bad : {std::nan(""), static_cast<double>(INFINITY)}) {
    m.loss = bad;
    Control c;
    stop.on_step_end(m, c);
    ASSERT_TRUE(c.should_stop());
    EXPECT_EQ(c.stop_kind(), StopKind::kCallback);
    EXPECT_NE(c.stop_reason().find("at step 7"), std::string::npos) << c.stop_reason();
  }
}

// Stops requested at one step: the one that must decide what happens next wins (a guard that gave
// up over the time limit, a stop signal over the time limit, the budget over a stop signal).
TEST(Control, AStopOfHigherSeverityReplacesAnEarlierOne) {
  Control time_then_guard;
  time_then_guard.request_stop("train.max_minutes = 1 reached", StopKind::kMaxMinutes);
  time_then_guard.request_stop("divergence guard: gave up", StopKind::kGuard);
  EXPECT_EQ(time_then_guard.stop_kind(), StopKind::kGuard);
  EXPECT_EQ(time_then_guard.stop_reason(), "divergence guard: gave up");
  Control time_then_signal;
  time_then_signal.request_stop("time", StopKind::kMaxMinutes);
  time_then_signal.request_stop("stop signal 15", StopKind::kPreempted);
  EXPECT_EQ(time_then_signal.stop_kind(), StopKind::kPreempted);
  Control budget_then_signal;
  budget_then_signal.request_stop("budget", StopKind::kBudget);
  budget_then_signal.request_stop("stop signal 15", StopKind::kPreempted);
  EXPECT_EQ(budget_then_signal.stop_kind(), StopKind::kBudget);
  Control early_then_time;
  early_then_time.request_stop("early stop", StopKind::kEarlyStop);
  early_then_time.request_stop("time", StopKind::kMaxMinutes);
  EXPECT_EQ(early_then_time.stop_kind(), StopKind::kEarlyStop);
  EXPECT_GT(stop_severity(StopKind::kGuard), stop_severity(StopKind::kBudget));
}

TEST(Control, TheFirstStopWinsAndAnAgreedStopReplacesIt) {
  Control c;
  EXPECT_EQ(c.stop_kind(), StopKind::kCompleted);
  c.request_stop("budget", StopKind::kBudget);
  c.request_stop("early stop", StopKind::kEarlyStop);
  EXPECT_EQ(c.stop_kind(), StopKind::kBudget);
  EXPECT_EQ(c.stop_reason(), "budget");
  c.agree_stop("rank 1: stop signal", StopKind::kPreempted);
  EXPECT_EQ(c.stop_kind(), StopKind::kPreempted);
  EXPECT_EQ(c.stop_reason(), "rank 1: stop signal");
  c.request_checkpoint();
  c.request_rollback("spike", 40);
  EXPECT_TRUE(c.checkpoint_requested());
  EXPECT_EQ(c.rollback_max_step(), 40);
  c.clear_checkpoint_request();
  c.clear_rollback_request();
  EXPECT_FALSE(c.checkpoint_requested());
  EXPECT_FALSE(c.rollback_requested());
}

// train.target_loss: an evaluation at or below the target stops the run as a success, once; the
// summary says what it took (without a cost meter, $ and kWh are unknown: null), and a resumed run
// keeps the record.
TEST(TargetLoss, AnEvaluationAtTheTargetStopsTheRunAsASuccessAndTheSummarySaysWhatItTook) {
  TargetLoss t(2.5, nullptr);
  RunInfo info;
  info.tokens_per_step = 1000;
  t.on_train_begin(info);
  Control c;
  EvalMetrics e;
  e.step = 10;
  e.val_loss = 2.6;
  e.elapsed_s = 30;
  t.on_eval_end(e, c);
  EXPECT_FALSE(c.should_stop());
  e.step = 20;
  e.val_loss = std::nan("");  // a NaN never counts as reached
  t.on_eval_end(e, c);
  EXPECT_FALSE(c.should_stop());
  e.val_loss = 2.5;
  e.elapsed_s = 61;
  t.on_eval_end(e, c);
  ASSERT_TRUE(c.should_stop());
  EXPECT_EQ(c.stop_kind(), StopKind::kTarget);
  EXPECT_STREQ(stop_kind_name(StopKind::kTarget), "target_reached");
  nlohmann::ordered_json s;
  t.add_to_summary(s);
  EXPECT_TRUE(s["to_target"]["reached"].get<bool>());
  EXPECT_EQ(s["to_target"]["step"], 20);
  EXPECT_EQ(s["to_target"]["tokens"], 20000);
  EXPECT_EQ(s["to_target"]["wall_s"], 61.0);
  EXPECT_TRUE(s["to_target"]["usd"].is_null());
  EXPECT_EQ(s["tokens_to_target"], 20000);
  // A later, lower evaluation does not move the record.
  e.step = 30;
  e.val_loss = 1.0;
  Control later;
  t.on_eval_end(e, later);
  EXPECT_FALSE(later.should_stop());
  nlohmann::json saved;
  t.save_state(saved);
  TargetLoss resumed(2.5, nullptr);
  resumed.on_train_begin(info);
  resumed.load_state(saved);
  nlohmann::ordered_json s2;
  resumed.add_to_summary(s2);
  EXPECT_EQ(s2["to_target"], s["to_target"]);
  // Resumed after the target: nothing left to train; it stops at once, saying so, a success.
  Control at_start;
  StepMetrics now;
  now.step = 20;
  resumed.on_resume(now, at_start);
  ASSERT_TRUE(at_start.should_stop());
  EXPECT_EQ(at_start.stop_kind(), StopKind::kTarget);
  EXPECT_NE(at_start.stop_reason().find("target already reached"), std::string::npos) << at_start.stop_reason();
  // Resumed with a lower target: it trains on toward it.
  TargetLoss lower(2.0, nullptr);
  lower.load_state(saved);
  Control go_on;
  lower.on_resume(now, go_on);
  EXPECT_FALSE(go_on.should_stop());
}

}  // namespace
}  // namespace frugal::stop_rules_test
