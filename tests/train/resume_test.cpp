// Resume end to end, in-process: a run stopped by a signal and resumed reproduces the
// uninterrupted run bitwise (weights and metrics.jsonl minus timing fields) in fp32 and bf16, for
// GPT and Llama, also from an older checkpoint and past a corrupt newest one, and with an end a
// deadline moved (the WSD decay to it, even when moved late). How runs stop: run_stops_test.cpp.
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
#include "resume_util.h"
#include "signal_at.h"
#include "test_util.h"

namespace frugal::resume_test {
namespace {
namespace fs = std::filesystem;

using test::expect_identical_runs;
using test::interrupted_then_resumed;

TEST(Resume, ResumedRunMatchesUninterruptedRunBitwiseFp32) {
  test::TempDir a, b;
  test::train_tiny(a.path(), {});
  interrupted_then_resumed(b.path(), {}, 16);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, ResumedRunMatchesUninterruptedRunBitwiseBf16WithAccumulation) {
  test::TempDir a, b;
  std::vector<std::string> x = {"precision.mode=bf16", "train.accum=2", "checkpoint.weights_dtype=bf16"};
  test::train_tiny(a.path(), x);
  interrupted_then_resumed(b.path(), x, 12);
  expect_identical_runs(a.path(), b.path());
}

// Muon's momentum buffers and the WSD schedule resume bitwise too.
TEST(Resume, ResumedRunMatchesUninterruptedRunBitwiseWithMuonAndWsd) {
  test::TempDir a, b;
  std::vector<std::string> x = {"train.optimizer=muon", "train.schedule=wsd", "train.decay_fraction=0.3"};
  test::train_tiny(a.path(), x);
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
  test::train_tiny(a.path(), x);
  interrupted_then_resumed(b.path(), x, 16);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, ALlamaRunResumesBitwiseInBf16WithAccumulationRecomputeAndMuon) {
  test::TempDir a, b;
  std::vector<std::string> x = kLlama;
  for (const char* s :
       {"precision.mode=bf16", "train.accum=2", "memory.activation_checkpointing=blocks", "train.optimizer=muon"})
    x.push_back(s);
  test::train_tiny(a.path(), x);
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
  auto s = test::train_tiny(a.path(), x, o);
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
  ASSERT_EQ(test::train_tiny(b.path(), x, first)["stop_kind"], "preempted");
  TrainerOptions r;
  r.resume = "auto";
  auto sees = std::make_shared<SeesTheEnd>();
  r.callbacks = {sees};
  auto done = test::train_tiny(b.path(), x, r);
  EXPECT_EQ(done["steps"], 20);
  EXPECT_EQ(sees->end, 20) << "the resumed session's RunInfo::total_steps";
  expect_identical_runs(a.path(), b.path());
}

// An end moved after the step its decay should have begun at (a deadline guard that decides late:
// the step time grew): the decay begins at the move, from the peak, over the steps left, instead of
// jumping to where a decay begun earlier would be; a resume keeps that, bitwise.
TEST(Resume, AnEndMovedPastItsDecayStartDecaysFromThereWithoutACliff) {
  test::TempDir a, b;
  std::vector<std::string> x = {"train.schedule=wsd", "train.decay_fraction=0.3", "train.lr=0.01",
                                "train.min_lr_ratio=0.1", "train.log_every=1"};
  ASSERT_EQ(wsd_decay_start(20, 5, 0.3), 14);  // the decay to step 20 begins at 14; the move comes at 16
  TrainerOptions o;
  o.callbacks = {std::make_shared<EndAt>(16, 20)};
  auto s = test::train_tiny(a.path(), x, o);
  EXPECT_EQ(s["steps"], 20);
  EXPECT_NE(s["stop_reason"].get<std::string>().find(
                "its decay would have begun at step 14, so it begins now and runs over the 4 steps left"),
            std::string::npos)
      << s["stop_reason"];
  double previous = 0.01;
  for (const auto& line : test::read_jsonl(a.path() + "/demo/metrics.jsonl")) {
    if (!line.contains("lr")) continue;
    const int64_t step = line["step"].get<int64_t>();
    if (step <= 5) continue;  // the warm-up
    const double lr = line["lr"].get<double>();
    EXPECT_DOUBLE_EQ(lr, step <= 16 ? 0.01 : wsd_lr_at(step - 1, 20, 5, 0.01, 0.1, 0.3, 16)) << "step " << step;
    EXPECT_LE(previous - lr, (0.01 - 0.001) / 4 + 1e-12) << "the rate fell off a cliff at step " << step;
    previous = lr;
  }
  EXPECT_DOUBLE_EQ(previous, 0.001);  // the floor, at the end
  TrainerOptions first;
  first.handle_signals = true;
  first.callbacks = {std::make_shared<EndAt>(16, 20), std::make_shared<test::SignalAt>(18, SIGUSR1)};
  ASSERT_EQ(test::train_tiny(b.path(), x, first)["stop_kind"], "preempted");
  TrainerOptions r;
  r.resume = "auto";
  EXPECT_EQ(test::train_tiny(b.path(), x, r)["steps"], 20);
  expect_identical_runs(a.path(), b.path());
}

// A rollback to a checkpoint older than the move keeps the moved end: the deadline did not move.
TEST(Stops, ARollbackKeepsAnEndMovedAfterItsCheckpoint) {
  test::TempDir dir;
  TrainerOptions o;
  o.callbacks = {std::make_shared<EndAt>(7, 20)};  // after the checkpoint at step 5
  auto s = test::train_tiny(dir.path(),
                            {"train.schedule=wsd", "guard.spike_factor=0.5", "guard.spike_windows=1",
                             "guard.max_rollbacks=1", "checkpoint.every_steps=5"},
                            o);
  ASSERT_GE(s["rollbacks"].size(), 1u);
  EXPECT_EQ(s["rollbacks"][0]["to_step"], 5);
  ASSERT_TRUE(s.contains("end_moved")) << s.dump();
  EXPECT_EQ(s["end_moved"]["step"], 20);
}

TEST(Resume, SignalOnAnEvalStepDefersTheEvaluationToTheResumedRun) {
  test::TempDir a, b;
  test::train_tiny(a.path(), {"checkpoint.async=true"});
  interrupted_then_resumed(b.path(), {"checkpoint.async=true"}, 15);  // train.eval_every = 15
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, FromAnOlderCheckpointTruncatesMetricsAndStillMatches) {
  test::TempDir a, b;
  test::train_tiny(a.path(), {});
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(23, SIGTERM)};
  test::train_tiny(b.path(), {}, o);
  TrainerOptions r;
  r.resume = b.path() + "/demo/checkpoints/step-00000014";
  test::train_tiny(b.path(), {}, r);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, AutoSkipsACorruptNewestCheckpointAndStillMatches) {
  test::TempDir a, b;
  test::train_tiny(a.path(), {});
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(16, SIGTERM)};
  test::train_tiny(b.path(), {}, o);
  const std::string newest = b.path() + "/demo/checkpoints/step-00000016/model.safetensors";
  std::string bytes = test::read_text(newest);
  bytes[bytes.size() - 3] ^= 0x11;
  test::write_text(newest, bytes);
  TrainerOptions r;
  r.resume = "auto";
  auto s = test::train_tiny(b.path(), {}, r);
  EXPECT_NE(s["checkpoint"]["resumed_from"].get<std::string>().find("step-00000014"), std::string::npos);
  expect_identical_runs(a.path(), b.path());
}

TEST(Resume, AutoWithoutACheckpointStartsFromStepZero) {
  test::TempDir dir;
  TrainerOptions r;
  r.resume = "auto";
  auto s = test::train_tiny(dir.path(), {}, r);
  EXPECT_EQ(s["steps"], 30);
  EXPECT_EQ(s["checkpoint"]["resumed_from"], "");
}

TEST(Resume, ExplicitBadPathNamesIt) {
  test::TempDir dir;
  TrainerOptions r;
  r.resume = dir.file("nowhere");
  try {
    test::train_tiny(dir.path(), {}, r);
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
  const auto first = test::train_tiny(dir.path(), {"checkpoint.enabled=false"}, o);
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
  EXPECT_EQ(state.at("kernels"), "aten");  // what model.kernels = "auto" ran on, kept on resume
  TrainerOptions r;
  r.resume = "auto";
  const auto resumed = test::train_tiny(dir.path(), {"checkpoint.enabled=false"}, r);
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

}  // namespace
}  // namespace frugal::resume_test
