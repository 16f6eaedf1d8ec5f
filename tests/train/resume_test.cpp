// Resume and stops end to end, in-process: a run stopped by a signal and resumed reproduces the
// uninterrupted run bitwise (weights and metrics.jsonl minus timing fields) in fp32 and bf16,
// also from an older checkpoint and past a corrupt newest one; early stopping, the divergence
// guard and max_minutes stop with their stop_kind.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/safetensors.h"
#include "frugal/core/errors.h"
#include "frugal/train/lr_schedule.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "signal_at.h"
#include "test_util.h"

namespace frugal::resume_test {
namespace {
namespace fs = std::filesystem;

// metrics.jsonl without the fields that measure time.
std::vector<nlohmann::json> metrics_without_timing(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* k :
         {"tokens_per_s", "step_s", "elapsed_s", "eval_s", "data_s", "forward_s", "backward_s", "optimizer_s",
          "data_wait_s", "rss_mb", "cost_usd", "energy_kwh", "kg_co2", "samples_per_s", "mfu", "checkpoint_s"})
      j.erase(k);
    out.push_back(j);
  }
  return out;
}

nlohmann::json train(const std::string& out, std::vector<std::string> extra, TrainerOptions o = {}) {
  auto sets = test::tiny_overrides(out);
  // Dropout draws from the CPU generator; a checkpoint every 7 steps splits log windows of 5.
  for (const char* s : {"model.dropout=0.1", "checkpoint.every_steps=7", "checkpoint.keep_last=5"}) sets.push_back(s);
  sets.insert(sets.end(), extra.begin(), extra.end());
  o.quiet = true;
  Trainer t(resolve_config("", sets, {}), o);
  auto s = t.fit();
  clear_preemption();
  return s;
}

void expect_identical_runs(const std::string& a, const std::string& b) {
  EXPECT_EQ(test::read_text(a + "/demo/final/model.safetensors"), test::read_text(b + "/demo/final/model.safetensors"))
      << "final weights differ";
  auto ma = metrics_without_timing(a + "/demo/metrics.jsonl");
  auto mb = metrics_without_timing(b + "/demo/metrics.jsonl");
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) EXPECT_EQ(ma[i], mb[i]) << "metrics line " << i + 1;
}

void interrupted_then_resumed(const std::string& dir, std::vector<std::string> extra, int64_t stop_at,
                              const std::string& final_kind = "completed") {
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(stop_at, SIGUSR1)};
  auto s = train(dir, extra, o);
  ASSERT_EQ(s["stop_kind"], "preempted");
  ASSERT_EQ(s["steps"], stop_at);
  EXPECT_FALSE(fs::exists(dir + "/demo/final"));
  TrainerOptions r;
  r.resume = "auto";
  auto done = train(dir, extra, r);
  EXPECT_EQ(done["stop_kind"], final_kind);
  EXPECT_EQ(done["checkpoint"]["resumed_from"].get<std::string>(),
            dir + "/demo/checkpoints/" + checkpoint_dir_name(stop_at));
}

TEST(Resume, ResumedRunMatchesUninterruptedRunBitwiseFp32) {
  test::TempDir a, b;
  train(a.path(), {});
  interrupted_then_resumed(b.path(), {}, 16);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, ResumedRunMatchesUninterruptedRunBitwiseBf16WithAccumulation) {
  test::TempDir a, b;
  std::vector<std::string> x = {"precision.mode=bf16", "train.accum=2", "checkpoint.weights_dtype=bf16"};
  train(a.path(), x);
  interrupted_then_resumed(b.path(), x, 12);
  expect_identical_runs(a.path(), b.path());
}

// Muon's momentum buffers and the WSD schedule resume bitwise too.
TEST(Resume, ResumedRunMatchesUninterruptedRunBitwiseWithMuonAndWsd) {
  test::TempDir a, b;
  std::vector<std::string> x = {"train.optimizer=muon", "train.schedule=wsd", "train.decay_fraction=0.3"};
  train(a.path(), x);
  interrupted_then_resumed(b.path(), x, 16);
  expect_identical_runs(a.path(), b.path());
}

// The Llama family resumes bitwise too: grouped-query attention on frugal's kernel (no dropout),
// an untied head, the chunked loss; then bf16 with accumulation, recomputed blocks, attention
// dropout (the reference path) and Muon.
const std::vector<std::string> kLlama = {"model.arch=llama", "model.layers=2", "model.heads=4", "model.kv_heads=2",
                                         "model.tie_embeddings=false"};

TEST(Resume, ALlamaRunResumesBitwise) {
  test::TempDir a, b;
  std::vector<std::string> x = kLlama;
  x.push_back("model.dropout=0");
  train(a.path(), x);
  interrupted_then_resumed(b.path(), x, 16);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, ALlamaRunResumesBitwiseInBf16WithAccumulationRecomputeAndMuon) {
  test::TempDir a, b;
  std::vector<std::string> x = kLlama;
  for (const char* s :
       {"precision.mode=bf16", "train.accum=2", "memory.activation_checkpointing=blocks", "train.optimizer=muon"})
    x.push_back(s);
  train(a.path(), x);
  interrupted_then_resumed(b.path(), x, 12);
  expect_identical_runs(a.path(), b.path());
}

// At step `at`, asks the loop to end the run at step `end`, once (as the deadline guard does with
// checkpoint.deadline_action = "decay").
class EndAt : public Callback {
 public:
  EndAt(int64_t at, int64_t end) : at_(at), end_(end) {}
  void on_step_end(const StepMetrics& m, Control& control) override {
    if (m.step != at_ || asked_) return;
    asked_ = true;
    control.request_end_at(end_, "the test moved the end");
  }

 private:
  int64_t at_, end_;
  bool asked_ = false;
};

// The end a session's callbacks are told at its start (RunInfo::total_steps).
class SeesTheEnd : public Callback {
 public:
  void on_train_begin(const RunInfo& info) override { end = info.total_steps(); }
  int64_t end = -1;
};

// An end moved before train.steps: the WSD schedule decays to it, the run ends there completed,
// and a resume keeps it (the callback that moved it fires before the interruption only), bitwise;
// the resumed session's callbacks start with the moved end.
TEST(Resume, AMovedEndDecaysToItAndSurvivesAResumeBitwise) {
  test::TempDir a, b;
  std::vector<std::string> x = {"train.schedule=wsd", "train.decay_fraction=0.3", "train.lr=0.01",
                                "train.min_lr_ratio=0.1"};
  TrainerOptions o;
  o.callbacks = {std::make_shared<EndAt>(8, 20)};
  auto s = train(a.path(), x, o);
  EXPECT_EQ(s["stop_kind"], "completed");
  EXPECT_EQ(s["steps"], 20);
  EXPECT_EQ(s["end_moved"]["step"], 20);
  EXPECT_EQ(s["end_moved"]["train_steps"], 30);
  EXPECT_NE(s["stop_reason"].get<std::string>().find("before train.steps = 30: the test moved the end"),
            std::string::npos)
      << s["stop_reason"];
  int64_t lines = 0;
  for (const auto& line : test::read_jsonl(a.path() + "/demo/metrics.jsonl")) {
    if (!line.contains("lr")) continue;
    const int64_t step = line["step"].get<int64_t>();
    EXPECT_DOUBLE_EQ(line["lr"].get<double>(), wsd_lr_at(step - 1, 20, 5, 0.01, 0.1, 0.3)) << "step " << step;
    ++lines;
  }
  EXPECT_EQ(lines, 4);  // steps 5, 10, 15, 20
  TrainerOptions first;
  first.handle_signals = true;
  first.callbacks = {std::make_shared<EndAt>(8, 20), std::make_shared<test::SignalAt>(16, SIGUSR1)};
  ASSERT_EQ(train(b.path(), x, first)["stop_kind"], "preempted");
  TrainerOptions r;
  r.resume = "auto";
  auto sees = std::make_shared<SeesTheEnd>();
  r.callbacks = {sees};
  auto done = train(b.path(), x, r);
  EXPECT_EQ(done["steps"], 20);
  EXPECT_EQ(sees->end, 20) << "the resumed session's RunInfo::total_steps";
  expect_identical_runs(a.path(), b.path());
}

// A rollback to a checkpoint older than the move keeps the moved end: the deadline did not move.
TEST(Stops, ARollbackKeepsAnEndMovedAfterItsCheckpoint) {
  test::TempDir dir;
  TrainerOptions o;
  o.callbacks = {std::make_shared<EndAt>(7, 20)};  // after the checkpoint at step 5
  auto s = train(dir.path(),
                 {"train.schedule=wsd", "guard.spike_factor=0.5", "guard.spike_windows=1", "guard.max_rollbacks=1",
                  "checkpoint.every_steps=5"},
                 o);
  ASSERT_GE(s["rollbacks"].size(), 1u);
  EXPECT_EQ(s["rollbacks"][0]["to_step"], 5);
  ASSERT_TRUE(s.contains("end_moved")) << s.dump();
  EXPECT_EQ(s["end_moved"]["step"], 20);
}

TEST(Resume, SignalOnAnEvalStepDefersTheEvaluationToTheResumedRun) {
  test::TempDir a, b;
  train(a.path(), {"checkpoint.async=true"});
  interrupted_then_resumed(b.path(), {"checkpoint.async=true"}, 15);  // train.eval_every = 15
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, FromAnOlderCheckpointTruncatesMetricsAndStillMatches) {
  test::TempDir a, b;
  train(a.path(), {});
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(23, SIGTERM)};
  train(b.path(), {}, o);
  TrainerOptions r;
  r.resume = b.path() + "/demo/checkpoints/step-00000014";
  train(b.path(), {}, r);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, AutoSkipsACorruptNewestCheckpointAndStillMatches) {
  test::TempDir a, b;
  train(a.path(), {});
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(16, SIGTERM)};
  train(b.path(), {}, o);
  const std::string newest = b.path() + "/demo/checkpoints/step-00000016/model.safetensors";
  std::string bytes = test::read_text(newest);
  bytes[bytes.size() - 3] ^= 0x11;
  test::write_text(newest, bytes);
  TrainerOptions r;
  r.resume = "auto";
  auto s = train(b.path(), {}, r);
  EXPECT_NE(s["checkpoint"]["resumed_from"].get<std::string>().find("step-00000014"), std::string::npos);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, AutoWithoutACheckpointStartsFromStepZero) {
  test::TempDir dir;
  TrainerOptions r;
  r.resume = "auto";
  auto s = train(dir.path(), {}, r);
  EXPECT_EQ(s["steps"], 30);
  EXPECT_EQ(s["checkpoint"]["resumed_from"], "");
}

TEST(Resume, ExplicitBadPathNamesIt) {
  test::TempDir dir;
  TrainerOptions r;
  r.resume = dir.file("nowhere");
  try {
    train(dir.path(), {}, r);
    FAIL();
  } catch (const ConfigError& e) {  // bad input (exit 2), not a damaged checkpoint
    EXPECT_NE(std::string(e.what()).find("nowhere: no such directory"), std::string::npos) << e.what();
  }
}

// Throughput after a resume counts the wall time of every session: the checkpoint carries the
// time up to its capture, and the resumed summary adds its own session to it.
TEST(Resume, WallTimeAndTokensPerSecondSpanEverySession) {
  test::TempDir dir;
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(9, SIGINT)};
  const auto first = train(dir.path(), {"checkpoint.enabled=false"}, o);
  ASSERT_EQ(first["stop_kind"], "preempted");
  std::ifstream in(dir.path() + "/demo/checkpoints/step-00000009/state.json");
  const auto state = nlohmann::json::parse(in);
  const double saved = state.at("loop").at("elapsed_s").get<double>();
  EXPECT_GT(saved, 0.0) << "the checkpoint does not carry the wall time of its session";
  EXPECT_LE(saved, first["wall_s"].get<double>());
  // Start-up time is billed across sessions, and the cost meter's fired alerts travel along.
  const double startup = state.at("loop").at("startup_s").get<double>();
  EXPECT_GT(startup, 0.0);
  EXPECT_TRUE(state.at("callbacks").contains("cost_meter")) << state.at("callbacks").dump();
  TrainerOptions r;
  r.resume = "auto";
  const auto resumed = train(dir.path(), {"checkpoint.enabled=false"}, r);
  ASSERT_EQ(resumed["stop_kind"], "completed");
  const double wall = resumed["wall_s"].get<double>();
  EXPECT_GT(wall, saved) << "the resumed run's wall time leaves out the first session";
  EXPECT_GT(resumed["startup_s"].get<double>(), startup) << "the second start-up is not billed";
  EXPECT_NEAR(resumed["tokens_per_s"].get<double>(), resumed["tokens"].get<double>() / wall,
              1e-6 * resumed["tokens_per_s"].get<double>());
}

// One process per run directory: a second `--resume auto` while the first still runs would delete
// the first one's in-flight checkpoint writes. It is refused, naming the holder.
TEST(Resume, ASecondProcessOnALiveRunDirectoryIsRefusedWithTheHoldersPid) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  TrainerOptions o;
  o.quiet = true;
  auto first = std::make_unique<Trainer>(resolve_config("", sets, {}), o);
  TrainerOptions r;
  r.quiet = true;
  r.resume = "auto";
  try {
    Trainer second(resolve_config("", sets, {}), r);
    FAIL() << "two trainers hold one run directory";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid())), std::string::npos) << e.what();
  }
  first.reset();  // released with its holder
  EXPECT_NO_THROW(Trainer(resolve_config("", sets, {}), r));
}

// train.target_loss: a target the first evaluation meets ends the run there as a success, with
// what it took; one never met leaves the run to complete and says so.
TEST(Stops, TargetLossEndsTheRunAsASuccessAndRecordsWhatItTook) {
  test::TempDir dir;
  auto s = train(dir.path(), {"train.target_loss=50", "budget.usd_per_hour=3.6", "budget.watts=360"});
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
  auto n = train(never.path(), {"train.target_loss=0.0001"});
  EXPECT_EQ(n["stop_kind"], "completed");
  EXPECT_FALSE(n["to_target"]["reached"].get<bool>());
  EXPECT_FALSE(n.contains("tokens_to_target"));
}

TEST(Stops, PreemptionWritesACheckpointAndSkipsTheFinalWeights) {
  test::TempDir dir;
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(9, SIGINT)};
  auto s = train(dir.path(), {"checkpoint.enabled=false"}, o);
  EXPECT_EQ(s["stop_kind"], "preempted");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("signal"), std::string::npos);
  EXPECT_EQ(verify_checkpoint(dir.path() + "/demo/checkpoints/step-00000009"), "");
  EXPECT_FALSE(fs::exists(dir.path() + "/demo/final"));
  EXPECT_TRUE(fs::exists(dir.path() + "/demo/summary.json"));
}

TEST(Stops, EarlyStopLandsInSummaryAndAResumedRunStopsAtTheSameStep) {
  // min_delta is huge: after the first evaluation none counts as an improvement.
  std::vector<std::string> x = {"early_stop.enabled=true", "early_stop.patience=2", "early_stop.min_delta=100",
                                "train.eval_every=3", "train.steps=40"};
  test::TempDir a, b;
  auto s = train(a.path(), x);
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
  auto s = train(dir.path(), {"guard.spike_factor=0.5", "guard.spike_windows=1", "guard.max_rollbacks=2",
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
  auto s = train(dir.path(), {"checkpoint.every_steps=5", "checkpoint.keep_last=1", "checkpoint.keep_best=1",
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
  auto s = train(dir.path(), {"guard.spike_factor=0.5", "guard.spike_windows=1", "checkpoint.every_steps=0"});
  EXPECT_EQ(s["stop_kind"], "guard");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("no sound checkpoint"), std::string::npos) << s["stop_reason"];
}

TEST(Stops, MaxMinutesStopsWithACheckpoint) {
  test::TempDir dir;
  auto s = train(dir.path(), {"train.max_minutes=0.000001"});
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
    auto first = train(dir.path(), limit);
    ASSERT_NE(first["stop_kind"], "completed");
    const int64_t steps = first["steps"].get<int64_t>();
    const std::string latest = first["checkpoint"]["latest"].get<std::string>();
    ASSERT_FALSE(latest.empty());
    TrainerOptions r;
    r.resume = "auto";
    for (int again = 0; again < 2; ++again) {
      auto resumed = train(dir.path(), limit, r);
      EXPECT_EQ(resumed["steps"].get<int64_t>(), steps) << "resume " << again + 1 << " trained another step";
      EXPECT_EQ(resumed["stop_kind"], first["stop_kind"]);
      EXPECT_EQ(resumed["checkpoint"]["latest"].get<std::string>(), latest) << "a checkpoint of no new step";
    }
  }
}

}  // namespace
}  // namespace frugal::resume_test
