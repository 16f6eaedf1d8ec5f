// The projection's arithmetic with injected figures: every term and count by the trainer's rules,
// the range from the probe's quarters and the margin, Young-Daly, spot against on demand, a zero
// price, and figures scaled to another machine.
#include "frugal/tune/projection.h"

#include <gtest/gtest.h>

#include <cmath>

#include "frugal/ckpt/cadence.h"

namespace frugal::projection_test {
namespace {

// 100 steps of 0.1 s after a 0.5 s first step; no margin, so low = central = high.
ProjectionInputs steady() {
  ProjectionInputs in;
  in.steps = 100;
  in.step_s.assign(20, 0.1);
  in.first_step_s = 0.5;
  in.launch_s = 1;
  in.startup_s = 2;
  in.eval_s = 0.3;
  in.eval_every = 30;
  in.save_s = 0.2;
  in.checkpoint.every_minutes = 0;
  in.checkpoint.every_steps = 25;
  in.finish_s = 0.7;
  in.margin = 0;
  return in;
}

TEST(Projection, EveryTermFollowsTheTrainersRules) {
  const Projection p = project_run(steady());
  EXPECT_EQ(p.evals, 4);  // steps 30, 60, 90 and the final one
  EXPECT_EQ(p.saves, 4);  // steps 25, 50, 75, 100 (the final save is the one at step 100)
  EXPECT_DOUBLE_EQ(p.first_step_s, 0.5);
  EXPECT_NEAR(p.steps_s, 99 * 0.1, 1e-12);
  EXPECT_NEAR(p.evals_s, 4 * 0.3, 1e-12);
  EXPECT_NEAR(p.saves_s, 4 * 0.2, 1e-12);
  const double total = 1 + 2 + 0.5 + 9.9 + 1.2 + 0.8 + 0.7;
  EXPECT_NEAR(p.on_demand.seconds.central, total, 1e-9);
  EXPECT_NEAR(p.on_demand.seconds.low, total, 1e-9);
  EXPECT_NEAR(p.on_demand.seconds.high, total, 1e-9);
  // The trainer's share (summary.json's startup_s + wall_s): no launch, no finish.
  EXPECT_NEAR(p.trainer_seconds.central, total - 1 - 0.7, 1e-9);
  EXPECT_NEAR(p.checkpoint_interval_s, 25 * (0.5 + 9.9 + 1.2) / 100, 1e-12);  // 25 steps, evaluations shared out

  ProjectionInputs in = steady();
  in.steps = 90;  // the last step has an evaluation: no extra final one; a save at 90 is not a multiple of 25
  in.eval_every = 30;
  const Projection q = project_run(in);
  EXPECT_EQ(q.evals, 3);
  EXPECT_EQ(q.saves, 4);  // 25, 50, 75 and the final one at 90
  in.eval_every = 0;
  in.checkpoint.enabled = false;
  const Projection r = project_run(in);
  EXPECT_EQ(r.evals, 1);  // the final one only
  EXPECT_EQ(r.saves, 0);
  EXPECT_EQ(r.saves_s, 0);
  in.checkpoint.enabled = true;
  in.checkpoint.every_steps = 0;
  in.checkpoint.every_minutes = 30;  // longer than the run: the final save only
  EXPECT_EQ(project_run(in).saves, 1);
  EXPECT_EQ(project_run(in).checkpoint_interval_s, 1800);
  // Both rules: the step rule saves first and restarts the time rule's clock, so it alone counts
  // (120 steps, every 60: saves at 60 and 120, however the division of seconds rounds).
  in.steps = 120;
  in.checkpoint.every_steps = 60;
  EXPECT_EQ(project_run(in).saves, 2);
  in.checkpoint.auto_interval = true;  // plus the measuring save after step 1
  EXPECT_EQ(project_run(in).saves, 3);
}

// The step's range: the lowest and highest quarter median, never narrower than the margin; the
// other terms +-margin; the total summed end by end.
TEST(Projection, TheRangeComesFromTheProbesQuartersAndTheMargin) {
  ProjectionInputs in = steady();
  in.step_s = {0.10, 0.10, 0.10, 0.10, 0.12, 0.12, 0.12, 0.12, 0.10, 0.10, 0.10, 0.10, 0.09, 0.09, 0.09, 0.09};
  in.margin = 0.05;
  Projection p = project_run(in);
  EXPECT_DOUBLE_EQ(p.step_s.central, 0.10);
  EXPECT_DOUBLE_EQ(p.step_s.low, 0.09);   // a quarter below the margin's 0.095
  EXPECT_DOUBLE_EQ(p.step_s.high, 0.12);  // a quarter above the margin's 0.105
  EXPECT_NEAR(p.probe_spread, 0.3, 1e-12);
  const double fixed_c = 1 + 2 + 0.5 + 4 * 0.3 + 4 * 0.2 + 0.7;
  EXPECT_NEAR(p.on_demand.seconds.low, fixed_c * 0.95 + 99 * 0.09, 1e-9);
  EXPECT_NEAR(p.on_demand.seconds.high, fixed_c * 1.05 + 99 * 0.12, 1e-9);
  // A steady probe: the margin alone.
  in.step_s.assign(16, 0.1);
  in.margin = 0.2;
  p = project_run(in);
  EXPECT_DOUBLE_EQ(p.probe_spread, 0);
  EXPECT_NEAR(p.step_s.low, 0.08, 1e-12);
  EXPECT_NEAR(p.step_s.high, 0.12, 1e-12);
  EXPECT_LT(p.on_demand.seconds.low, p.on_demand.seconds.central);
  EXPECT_GT(p.on_demand.seconds.high, p.on_demand.seconds.central);
}

// The plan counts the saves the trainer makes: stepping the trainer's own rule (checkpoint_due)
// through the run, as its cadence callback does, gives the same count for every mix of the rules:
// a step rule and a time rule that interleave, a time interval that is no whole number of steps,
// the measuring save of auto_interval. (A closed form missed 8 of these 216 cases.)
TEST(Projection, SavesAreTheTrainersCheckpointDueSteppedThroughTheRun) {
  int checked = 0;
  for (int64_t every_steps : {0, 7, 50})
    for (double every_minutes : {0.0, 0.5, 2.0})
      for (bool auto_interval : {false, true})
        for (int64_t steps : {1, 10, 100, 1000})
          for (double per : {0.25, 0.5, 2.0}) {  // exact in binary: no rounding at a rule's boundary
            ProjectionInputs in;
            in.steps = steps;
            in.step_s.assign(8, per);
            in.first_step_s = per;
            in.eval_s = 0;
            in.eval_every = 0;
            in.save_s = 1;
            in.margin = 0;
            in.checkpoint.every_steps = every_steps;
            in.checkpoint.every_minutes = every_minutes;
            in.checkpoint.auto_interval = auto_interval;
            in.checkpoint.mtbf_minutes = 10;
            CadenceInput c;
            int64_t saves = 0;
            for (int64_t step = 1; step <= steps; ++step) {
              c.step = step;
              c.since_save_s += per;
              if (checkpoint_due(in.checkpoint, c)) {
                ++saves;
                c.last_save_step = step;
                c.since_save_s = 0;
                c.last_stall_s = in.save_s;
              }
            }
            if (c.last_save_step != steps) ++saves;  // the final save
            EXPECT_EQ(project_run(in).saves, saves)
                << "every_steps " << every_steps << ", every_minutes " << every_minutes << ", auto " << auto_interval
                << ", " << steps << " steps of " << per << " s";
            ++checked;
          }
  EXPECT_EQ(checked, 216);
}

// checkpoint.auto_interval: one save after step 1, then one every sqrt(2 x save x MTBF), and the
// final one.
TEST(Projection, YoungDalyCadenceCountsItsSaves) {
  ProjectionInputs in;
  in.steps = 1000;
  in.step_s.assign(8, 1.0);
  in.first_step_s = 1.0;
  in.save_s = 2;
  in.margin = 0;
  in.checkpoint.auto_interval = true;
  in.checkpoint.mtbf_minutes = 120;
  in.mtbf_s = 7200;
  const Projection p = project_run(in);
  const double yd = std::sqrt(2 * 2 * 7200.0);  // 169.7 s
  EXPECT_NEAR(p.checkpoint_interval_s, yd, 1e-9);
  EXPECT_NEAR(p.young_daly_s, yd, 1e-9);
  EXPECT_EQ(p.saves, 1 + static_cast<int64_t>(std::floor(999 / yd)) + 1);  // after step 1, 5 more, the final one
  EXPECT_NEAR(p.saves_s, 2.0 * static_cast<double>(p.saves), 1e-12);
}

// Spot: cheaper per hour, but each preemption costs half an interval and a restart;
// T' = T / (1 - (interval / 2 + restart) / MTBF). On demand has no preemptions.
TEST(Projection, SpotAddsTheExpectedPreemptionLossOnDemandDoesNot) {
  ProjectionInputs in = steady();
  in.steps = 10000;
  in.checkpoint.every_steps = 0;
  in.checkpoint.every_minutes = 10;
  in.prices = {"x", 2.0, 0.5, 300, 400};
  in.mtbf_s = 3600;
  const Projection p = project_run(in);
  const double t = p.on_demand.seconds.central;
  const double per = 600 / 2.0 + (1 + 2 + 0.2);  // half the interval + launch, start-up and a save
  EXPECT_DOUBLE_EQ(p.restart_s, 3.2);
  EXPECT_NEAR(p.spot.seconds.central, t / (1 - per / 3600), 1e-6);
  EXPECT_NEAR(p.spot.expected_preemptions, p.spot.seconds.central / 3600, 1e-9);
  EXPECT_NEAR(p.spot.lost_s, p.spot.seconds.central - t, 1e-9);
  EXPECT_DOUBLE_EQ(p.spot.seconds.low, p.on_demand.seconds.low);  // the lucky case: no preemption
  EXPECT_GT(p.spot.seconds.high, p.spot.seconds.central);
  // Money and carbon follow the time at each scenario's price; the same watts.
  EXPECT_NEAR(p.on_demand.usd.central, t / 3600 * 2.0, 1e-9);
  EXPECT_NEAR(p.spot.usd.central, p.spot.seconds.central / 3600 * 0.5, 1e-9);
  EXPECT_NEAR(p.on_demand.kwh.central, t / 3600 * 0.3, 1e-9);
  EXPECT_NEAR(p.on_demand.kg_co2.central, t / 3600 * 0.3 * 0.4, 1e-9);
  EXPECT_NEAR(p.spot.usd.high, p.spot.seconds.high / 3600 * 0.5, 1e-9);
  // Without an MTBF, spot takes as long as on demand.
  in.mtbf_s = 0;
  const Projection q = project_run(in);
  EXPECT_DOUBLE_EQ(q.spot.seconds.central, q.on_demand.seconds.central);
  EXPECT_EQ(q.spot.expected_preemptions, 0);
}

// With checkpoints off a preemption loses half the run; when that plus a restart exceeds the
// MTBF, the run never finishes on spot.
TEST(Projection, APreemptionCostlierThanTheMtbfNeverFinishes) {
  ProjectionInputs in = steady();
  in.checkpoint.enabled = false;
  in.prices.spot_usd_per_hour = 1;
  in.mtbf_s = 5;  // shorter than half the ~16 s run
  const Projection p = project_run(in);
  EXPECT_FALSE(p.spot.converges);
  EXPECT_TRUE(std::isinf(p.spot.seconds.central));
  EXPECT_TRUE(p.on_demand.converges);
  in.mtbf_s = 1000;
  const Projection q = project_run(in);
  EXPECT_TRUE(q.spot.converges);
  const double t = q.on_demand.seconds.central;
  // The interval is the whole run; the restart has no checkpoint to read: launch + start-up.
  EXPECT_DOUBLE_EQ(q.restart_s, 3);
  EXPECT_NEAR(q.spot.seconds.central, t / (1 - (t / 2 + 3) / 1000), 1e-9);
}

TEST(Projection, AZeroPriceProjectsTheTimeButNoMoney) {
  ProjectionInputs in = steady();
  const Projection p = project_run(in);
  EXPECT_FALSE(p.on_demand.priced);
  EXPECT_FALSE(p.spot.priced);
  EXPECT_EQ(p.on_demand.usd.central, 0);
  EXPECT_EQ(p.on_demand.kwh.central, 0);
  EXPECT_GT(p.on_demand.seconds.central, 0);
  in.prices.usd_per_hour = 1;
  EXPECT_TRUE(project_run(in).on_demand.priced);
  EXPECT_FALSE(project_run(in).spot.priced);
}

// Onto a machine with 10x the peak: steps and evaluations x 0.1 with the range widened 3x each
// way; start-up, saves and the end stay as measured.
TEST(Projection, ScalingToAnotherMachineScalesComputeAndWidensItsRange) {
  ProjectionInputs in = steady();
  in.compute_scale = 0.1;
  in.scale_spread = 3;
  const Projection p = project_run(in);
  EXPECT_NEAR(p.step_s.central, 0.01, 1e-12);
  EXPECT_NEAR(p.step_s.low, 0.01 / 3, 1e-12);
  EXPECT_NEAR(p.step_s.high, 0.03, 1e-12);
  EXPECT_NEAR(p.first_step_s, 0.05, 1e-12);
  EXPECT_NEAR(p.evals_s, 4 * 0.03, 1e-12);
  EXPECT_DOUBLE_EQ(p.startup_s, 2);
  EXPECT_NEAR(p.saves_s, 4 * 0.2, 1e-12);
  const double compute = 0.05 + 99 * 0.01 + 4 * 0.03, fixed = 1 + 2 + 0.8 + 0.7;
  EXPECT_NEAR(p.on_demand.seconds.central, compute + fixed, 1e-9);
  EXPECT_NEAR(p.on_demand.seconds.low, compute / 3 + fixed, 1e-9);
  EXPECT_NEAR(p.on_demand.seconds.high, compute * 3 + fixed, 1e-9);
}

TEST(Projection, HelpersCountAndSummarise) {
  EXPECT_EQ(evaluation_count(100, 0), 1);
  EXPECT_EQ(evaluation_count(100, 25), 4);
  EXPECT_EQ(evaluation_count(101, 25), 5);
  EXPECT_EQ(poisson_quantile(0, 0.9), 0);
  EXPECT_EQ(poisson_quantile(1, 0.9), 2);    // P(<= 1) = 0.736, P(<= 2) = 0.920
  EXPECT_EQ(poisson_quantile(10, 0.9), 14);  // P(<= 13) = 0.864, P(<= 14) = 0.917
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 2, 3}), 2.5);
  const auto [lo, hi] = part_median_range({1, 1, 5, 5, 2, 2, 3, 3});
  EXPECT_DOUBLE_EQ(lo, 1);
  EXPECT_DOUBLE_EQ(hi, 5);
  const auto [a, b] = part_median_range({7});
  EXPECT_DOUBLE_EQ(a, 7);
  EXPECT_DOUBLE_EQ(b, 7);
}

}  // namespace
}  // namespace frugal::projection_test
