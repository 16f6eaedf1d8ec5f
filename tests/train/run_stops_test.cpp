// How runs stop, end to end, in-process: a target reached, a stop signal without checkpoints,
// early stopping across a resume, the divergence guard's rollbacks and its give-up, max_minutes
// and a budget already spent; each with its stop_kind, its files and its bill.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "resume_util.h"
#include "signal_at.h"
#include "test_util.h"

namespace frugal::run_stops_test {
namespace {
namespace fs = std::filesystem;

using test::expect_identical_runs;
using test::interrupted_then_resumed;

// train.target_loss: a target the first evaluation meets ends the run there as a success, with
// what it took; one never met leaves the run to complete and says so.
TEST(Stops, TargetLossEndsTheRunAsASuccessAndRecordsWhatItTook) {
  test::TempDir dir;
  auto s = test::train_tiny(dir.path(), {"train.target_loss=50", "budget.usd_per_hour=3.6", "budget.watts=360"});
  EXPECT_EQ(s["stop_kind"], "target_reached");
  EXPECT_EQ(s["steps"], 15);  // the first evaluation (train.eval_every = 15)
  EXPECT_NE(s["stop_reason"].get<std::string>().find("target reached"), std::string::npos) << s["stop_reason"];
  const auto& t = s["to_target"];
  EXPECT_TRUE(t["reached"].get<bool>());
  EXPECT_EQ(t["step"], 15);
  EXPECT_EQ(t["tokens"].get<int64_t>(), 15 * s["tokens"].get<int64_t>() / s["steps"].get<int64_t>());
  EXPECT_LE(t["val_loss"].get<double>(), 50.0);
  const double wall = t["wall_s"].get<double>();
  EXPECT_GT(wall, 0);
  EXPECT_NEAR(t["usd"].get<double>(), wall / 3600 * 3.6, 1e-9);
  EXPECT_NEAR(t["kwh"].get<double>(), wall / 3600 * 0.36, 1e-9);
  EXPECT_EQ(s["tokens_to_target"], t["tokens"]);
  EXPECT_TRUE(fs::exists(dir.path() + "/demo/final/model.safetensors"));

  test::TempDir never;
  auto n = test::train_tiny(never.path(), {"train.target_loss=0.0001"});
  EXPECT_EQ(n["stop_kind"], "completed");
  EXPECT_FALSE(n["to_target"]["reached"].get<bool>());
  EXPECT_FALSE(n.contains("tokens_to_target"));
}

TEST(Stops, PreemptionWritesACheckpointAndSkipsTheFinalWeights) {
  test::TempDir dir;
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(9, SIGINT)};
  auto s = test::train_tiny(dir.path(), {"checkpoint.enabled=false"}, o);
  EXPECT_EQ(s["stop_kind"], "preempted");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("signal"), std::string::npos);
  EXPECT_EQ(verify_checkpoint(dir.path() + "/demo/checkpoints/step-00000009"), "");
  EXPECT_FALSE(fs::exists(dir.path() + "/demo/final"));
  EXPECT_TRUE(fs::exists(dir.path() + "/demo/summary.json"));
}

// A dropped ssh session sends SIGHUP: it used to end the run with the default action (exit 129,
// no checkpoint). It is a stop signal now, unless it was ignored when the run began (`nohup`):
// then the run goes on to its end.
TEST(Stops, AHangUpCheckpointsUnlessItWasIgnoredAsUnderNohup) {
  test::TempDir dir;
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(6, SIGHUP)};
  auto s = test::train_tiny(dir.path(), {"checkpoint.enabled=false"}, o);
  EXPECT_EQ(s["stop_kind"], "preempted");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("Hangup"), std::string::npos) << s["stop_reason"];
  EXPECT_EQ(verify_checkpoint(dir.path() + "/demo/checkpoints/step-00000006"), "");

  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, &before);
  test::TempDir nohup;
  auto n = test::train_tiny(nohup.path(), {"checkpoint.enabled=false"}, o);
  struct sigaction after {};
  sigaction(SIGHUP, &before, &after);
  clear_preemption();
  EXPECT_EQ(n["stop_kind"], "completed");
  EXPECT_EQ(after.sa_handler, SIG_IGN) << "the trainer must leave an ignored SIGHUP ignored";
}

TEST(Stops, EarlyStopLandsInSummaryAndAResumedRunStopsAtTheSameStep) {
  // min_delta is huge: after the first evaluation none counts as an improvement.
  std::vector<std::string> x = {"early_stop.enabled=true", "early_stop.patience=2", "early_stop.min_delta=100",
                                "train.eval_every=3", "train.steps=40"};
  test::TempDir a, b;
  auto s = test::train_tiny(a.path(), x);
  EXPECT_EQ(s["stop_kind"], "early_stop");
  EXPECT_EQ(s["steps"], 9);  // evaluations at 3 (best), 6 and 9 (stalls)
  EXPECT_NE(s["stop_reason"].get<std::string>().find("did not improve"), std::string::npos);
  interrupted_then_resumed(b.path(), x, 7, "early_stop");  // the patience counter (1 stall) is in the checkpoint
  auto r = nlohmann::json::parse(test::read_text(b.path() + "/demo/summary.json"));
  EXPECT_EQ(r["stop_kind"], "early_stop");
  EXPECT_EQ(r["steps"], 9);
  expect_identical_runs(a.path(), b.path());
}

TEST(Stops, GuardRollsBackWithALowerLrThenGivesUp) {
  // spike_factor 0.5 makes every window after the first a "spike": a forced divergence.
  test::TempDir dir;
  auto s = test::train_tiny(dir.path(), {"guard.spike_factor=0.5", "guard.spike_windows=1", "guard.max_rollbacks=2",
                                         "checkpoint.every_steps=5"});
  EXPECT_EQ(s["stop_kind"], "guard");
  ASSERT_EQ(s["rollbacks"].size(), 2u);
  EXPECT_EQ(s["rollbacks"][0]["to_step"], 5);
  EXPECT_DOUBLE_EQ(s["lr_scale"].get<double>(), 0.25);
  EXPECT_NE(s["stop_reason"].get<std::string>().find("after 2 rollback"), std::string::npos) << s["stop_reason"];
  EXPECT_FALSE(fs::exists(dir.path() + "/demo/final"));
}

// checkpoint.best_metric = "grad_norm" was accepted but never recorded, so keep_best kept nothing:
// each checkpoint at a log step records the gradient norm of that step, and keep_best keeps the
// smallest.
TEST(Checkpoints, GradNormAsTheBestMetricIsRecordedAndRanked) {
  test::TempDir dir;
  auto s = test::train_tiny(dir.path(), {"checkpoint.every_steps=5", "checkpoint.keep_last=1", "checkpoint.keep_best=1",
                                         "checkpoint.best_metric=grad_norm", "train.log_every=5"});
  std::map<int64_t, double> norms;  // step -> grad_norm, from metrics.jsonl
  std::ifstream in(dir.path() + "/demo/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("grad_norm") && j["grad_norm"].is_number()) norms[j["step"].get<int64_t>()] = j["grad_norm"];
  }
  ASSERT_GE(norms.size(), 4u);
  int64_t best_step = -1;
  for (const auto& [step, g] : norms)
    if (step % 5 == 0 && (best_step < 0 || g < norms[best_step])) best_step = step;
  std::vector<int64_t> kept;
  for (const auto& c : list_checkpoints(dir.path() + "/demo/checkpoints")) {
    kept.push_back(c.step);
    ASSERT_TRUE(c.metric.has_value()) << c.path;
    EXPECT_DOUBLE_EQ(*c.metric, norms.at(c.step)) << c.path;
  }
  // The newest, and the one with the smallest gradient norm.
  EXPECT_NE(std::find(kept.begin(), kept.end(), s["steps"].get<int64_t>()), kept.end());
  EXPECT_NE(std::find(kept.begin(), kept.end(), best_step), kept.end()) << best_step;
}

TEST(Stops, ARollbackBillsTheDivergedStepsOnce) {
  // The checkpoint rolled back to records the time up to it; taking that as the time billed so far
  // would count it twice (wall_s above the time fit() took).
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  for (const char* s :
       {"guard.spike_factor=0.5", "guard.spike_windows=1", "guard.max_rollbacks=2", "checkpoint.every_steps=5"})
    sets.push_back(s);
  TrainerOptions o;
  o.quiet = true;
  Trainer t(resolve_config("", sets, {}), o);
  const auto t0 = std::chrono::steady_clock::now();
  auto s = t.fit();
  const double fit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  clear_preemption();
  ASSERT_EQ(s["rollbacks"].size(), 2u);
  EXPECT_LE(s["wall_s"].get<double>(), fit_s);
}

TEST(Stops, GuardWithoutACheckpointStopsAndSaysSo) {
  test::TempDir dir;
  auto s =
      test::train_tiny(dir.path(), {"guard.spike_factor=0.5", "guard.spike_windows=1", "checkpoint.every_steps=0"});
  EXPECT_EQ(s["stop_kind"], "guard");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("no sound checkpoint"), std::string::npos) << s["stop_reason"];
}

TEST(Stops, MaxMinutesStopsWithACheckpoint) {
  test::TempDir dir;
  auto s = test::train_tiny(dir.path(), {"train.max_minutes=0.000001"});
  EXPECT_EQ(s["stop_kind"], "max_minutes");
  EXPECT_EQ(s["steps"], 1);
  EXPECT_EQ(verify_checkpoint(dir.path() + "/demo/checkpoints/step-00000001"), "");
}

// Resuming a run that stopped at its time limit or its budget trains no step and bills none:
// the uninterrupted run stopped there too (each resume used to train and bill one more step).
TEST(Stops, AResumedRunAlreadyPastItsTimeLimitOrBudgetTrainsNoMoreSteps) {
  for (const std::vector<std::string>& limit :
       {std::vector<std::string>{"train.max_minutes=0.000001"},
        std::vector<std::string>{"budget.usd_per_hour=360000", "budget.limit_usd=0.5", "train.log_every=1"}}) {
    SCOPED_TRACE(limit[0]);
    test::TempDir dir;
    auto first = test::train_tiny(dir.path(), limit);
    ASSERT_NE(first["stop_kind"], "completed");
    const int64_t steps = first["steps"].get<int64_t>();
    const std::string latest = first["checkpoint"]["latest"].get<std::string>();
    ASSERT_FALSE(latest.empty());
    TrainerOptions r;
    r.resume = "auto";
    for (int again = 0; again < 2; ++again) {
      auto resumed = test::train_tiny(dir.path(), limit, r);
      EXPECT_EQ(resumed["steps"].get<int64_t>(), steps) << "resume " << again + 1 << " trained another step";
      EXPECT_EQ(resumed["stop_kind"], first["stop_kind"]);
      EXPECT_EQ(resumed["checkpoint"]["latest"].get<std::string>(), latest) << "a checkpoint of no new step";
    }
  }
}

}  // namespace
}  // namespace frugal::run_stops_test
