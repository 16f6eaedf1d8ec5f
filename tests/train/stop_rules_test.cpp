// The time limit and the non-finite loss stop, as callbacks.
#include "frugal/train/stop_rules.h"

#include <gtest/gtest.h>

#include <cmath>

namespace frugal {
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

TEST(TimeLimit, ZeroMeansNoLimit) {
  TimeLimit limit(0);
  Control c;
  StepMetrics m;
  m.elapsed_s = 1e9;
  limit.on_step_end(m, c);
  EXPECT_FALSE(c.should_stop());
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

}  // namespace
}  // namespace frugal
