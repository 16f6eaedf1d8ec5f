// make_step_metrics: the log window's arithmetic, and what carries over between log steps.
#include "frugal/train/step_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace frugal::step_metrics_test {
namespace {

StepReadings logged_step() {
  StepReadings r;
  r.step = 10;
  r.total_steps = 100;
  r.logged = true;
  r.lr = 0.01;
  r.step_s = 0.5;
  r.phases = {0.1, 0.2, 0.15, 0.05};
  r.tokens = 4000;
  r.elapsed_s = 7;
  r.window_steps = 4;
  r.window_tokens = 1600;
  r.window_s = 2;
  r.window_loss_sum = 10;
  r.grad_norm = 3;
  r.micro_grad_sq_sum = 12;
  r.accum = 4;
  r.samples_per_step = 8;
  r.rss_mb = 123;
  r.eval_s = 0.25;
  r.checkpoint_s = 0.75;
  return r;
}

TEST(StepMetrics, ALogStepAveragesItsWindow) {
  const StepMetrics m = make_step_metrics(logged_step(), StepMetrics{});
  EXPECT_TRUE(m.logged);
  EXPECT_DOUBLE_EQ(m.loss, 2.5);          // 10 over 4 steps, not the last step's loss
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 800);  // 1600 tokens in 2 s, not the cumulative 4000
  EXPECT_DOUBLE_EQ(m.samples_per_s, 16);  // 4 steps x 8 sequences in 2 s
  EXPECT_DOUBLE_EQ(m.micro_grad_sq, 3);   // the mean over the 4 micro-batches
  EXPECT_DOUBLE_EQ(m.grad_norm, 3);
  EXPECT_DOUBLE_EQ(m.eval_s, 0.25);
  EXPECT_DOUBLE_EQ(m.checkpoint_s, 0.75);
  EXPECT_DOUBLE_EQ(m.phases.forward_s, 0.2);
  EXPECT_EQ(m.tokens, 4000);
  EXPECT_EQ(m.step, 10);
  EXPECT_DOUBLE_EQ(m.mfu, 0);                   // for the MFU meter to fill
  EXPECT_TRUE(std::isnan(m.grad_noise_scale));  // for the noise-scale meter to fill
}

TEST(StepMetrics, StepsBetweenLogStepsKeepTheNewestLogFigures) {
  StepMetrics logged = make_step_metrics(logged_step(), StepMetrics{});
  logged.mfu = 0.4;  // as a producer filled them
  logged.grad_noise_scale = 64;
  logged.cost_usd = 0.5;
  StepReadings next;
  next.step = 11;
  next.total_steps = 100;
  next.lr = 0.009;
  next.step_s = 0.4;
  next.phases = {0.01, 0.2, 0.15, 0.04};
  next.tokens = 4400;
  next.elapsed_s = 7.4;
  next.window_loss_sum = 99;  // an open window is never read
  const StepMetrics m = make_step_metrics(next, logged);
  EXPECT_FALSE(m.logged);
  EXPECT_EQ(m.step, 11);
  EXPECT_DOUBLE_EQ(m.lr, 0.009);
  EXPECT_EQ(m.tokens, 4400);
  EXPECT_DOUBLE_EQ(m.phases.data_s, 0.01);
  EXPECT_DOUBLE_EQ(m.loss, 2.5);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 800);
  EXPECT_DOUBLE_EQ(m.mfu, 0.4);
  EXPECT_DOUBLE_EQ(m.grad_noise_scale, 64);
  EXPECT_DOUBLE_EQ(m.cost_usd, 0.5);         // until the cost meter updates it
  EXPECT_TRUE(std::isnan(m.micro_grad_sq));  // measured at log steps only: never carried over
}

TEST(StepMetrics, AnUnmeasuredOrSkippedStepHasNoMicroBatchFigure) {
  StepReadings r = logged_step();
  r.micro_grad_sq_sum = std::nan("");
  EXPECT_TRUE(std::isnan(make_step_metrics(r, StepMetrics{}).micro_grad_sq));
  r = logged_step();
  r.grad_norm = INFINITY;  // inf/NaN gradients say nothing about the noise
  EXPECT_TRUE(std::isnan(make_step_metrics(r, StepMetrics{}).micro_grad_sq));
}

TEST(PhaseTimes, AddsPhaseByPhase) {
  PhaseTimes a{1, 2, 3, 4};
  a += PhaseTimes{0.5, 0.25, 0.125, 1};
  EXPECT_DOUBLE_EQ(a.data_s, 1.5);
  EXPECT_DOUBLE_EQ(a.forward_s, 2.25);
  EXPECT_DOUBLE_EQ(a.backward_s, 3.125);
  EXPECT_DOUBLE_EQ(a.optimizer_s, 5);
}

}  // namespace
}  // namespace frugal::step_metrics_test
