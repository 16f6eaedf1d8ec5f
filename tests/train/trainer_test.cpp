// End-to-end training in-process: the loss falls, files appear with the documented schema,
// runs are reproducible, and callbacks can stop a run.
#include "frugal/train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::trainer_test {
namespace {
namespace fs = std::filesystem;

nlohmann::json train_tiny(const std::string& out_dir, std::vector<std::string> extra = {},
                          std::vector<std::shared_ptr<Callback>> cbs = {}) {
  auto sets = test::tiny_overrides(out_dir);
  sets.insert(sets.end(), extra.begin(), extra.end());
  Trainer t(resolve_config("", sets, {}), test::quiet_run(std::move(cbs)));
  return t.fit();
}

TEST(Trainer, ShortRunLowersTheLossAndWritesEveryFile) {
  test::TempDir dir;
  auto s = train_tiny(dir.path(), {"train.steps=60", "train.lr=0.01"});
  auto lines = test::read_jsonl(dir.file("demo/metrics.jsonl"));
  std::vector<double> losses;
  for (const auto& l : lines)
    if (l["event"] == "step") losses.push_back(l["loss"].get<double>());
  ASSERT_GE(losses.size(), 10u);
  // The first logged window averages steps 1-5 (near ln 256 = 5.5); by the end it must be far lower.
  EXPECT_LT(losses.back(), losses.front() - 1.5) << losses.front() << " -> " << losses.back();
  EXPECT_LT(s["final_val_loss"].get<double>(), s["unigram_baseline_loss"].get<double>());
  EXPECT_TRUE(fs::exists(dir.file("demo/config.toml")));
  EXPECT_TRUE(fs::exists(dir.file("demo/final/model.safetensors")));
  auto w = load_safetensors(dir.file("demo/final/model.safetensors"));
  EXPECT_NE(w.find("wte.weight"), nullptr);
}

TEST(Trainer, SummaryJsonHasTheDocumentedSchema) {
  test::TempDir dir;
  train_tiny(dir.path());
  auto s = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  for (const char* k : {"steps", "tokens", "wall_s", "tokens_per_s", "final_train_loss", "final_val_loss",
                        "best_val_loss", "params", "answer_accuracy", "unigram_baseline_loss", "flops_per_token"})
    EXPECT_TRUE(s.contains(k) && s[k].is_number()) << k;
  EXPECT_EQ(s["steps"], 30);
  EXPECT_EQ(s["tokens"], 30 * 8 * 16);
  EXPECT_EQ(s["stop_reason"], "completed");
  EXPECT_EQ(s["answer_samples"], 5);
  EXPECT_LE(s["best_val_loss"].get<double>(), s["final_val_loss"].get<double>());
  // metrics.jsonl: a step line every log_every steps and an eval line at 15 and 30.
  int steps = 0, evals = 0;
  for (const auto& l : test::read_jsonl(dir.file("demo/metrics.jsonl"))) {
    if (l["event"] == "step") {
      ++steps;
      for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "tokens"})
        EXPECT_TRUE(l.contains(k)) << k;
    } else {
      ++evals;
      EXPECT_TRUE(l.contains("val_loss"));
    }
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(evals, 2);
}

// dist.offload = "optimizer" on the CPU (where it saves nothing): the same weights, and the
// summary's accounting moves the optimizer's state from the device's share to host memory.
TEST(Trainer, AnOffloadedOptimizerTrainsTheSameWeightsAndCountsItsStateInHostMemory) {
  test::TempDir a, b;
  const auto on_device = train_tiny(a.path());
  const auto offloaded = train_tiny(b.path(), {"dist.offload=optimizer"});
  auto wa = load_safetensors(a.file("demo/final/model.safetensors"));
  auto wb = load_safetensors(b.file("demo/final/model.safetensors"));
  ASSERT_EQ(wa.tensors.size(), wb.tensors.size());
  for (size_t i = 0; i < wa.tensors.size(); ++i)
    EXPECT_TRUE(torch::equal(wa.tensors[i].second, wb.tensors[i].second)) << wa.tensors[i].first;
  const auto& d = on_device["state_bytes_per_rank"];
  const auto& h = offloaded["state_bytes_per_rank"];
  EXPECT_GT(d["optimizer"].get<int64_t>(), 0);
  EXPECT_EQ(d["optimizer_in_host_memory"], 0);
  EXPECT_EQ(h["optimizer"], 0);
  EXPECT_EQ(h["optimizer_in_host_memory"], d["optimizer"]);
  EXPECT_EQ(h["total"].get<int64_t>(), d["total"].get<int64_t>() - d["optimizer"].get<int64_t>());
  EXPECT_EQ(offloaded["levers"]["offload"], "optimizer");
  try {
    train_tiny(test::TempDir().path(), {"dist.offload=optimizer", "train.optimizer=muon"});
    ADD_FAILURE() << "Muon with dist.offload was not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dist.offload = \"none\""), std::string::npos) << e.what();
  }
}

TEST(Trainer, SameSeedGivesBitwiseIdenticalWeights) {
  test::TempDir a, b;
  train_tiny(a.path(), {"model.dropout=0.1"});
  train_tiny(b.path(), {"model.dropout=0.1"});
  auto wa = load_safetensors(a.file("demo/final/model.safetensors"));
  auto wb = load_safetensors(b.file("demo/final/model.safetensors"));
  ASSERT_EQ(wa.tensors.size(), wb.tensors.size());
  for (size_t i = 0; i < wa.tensors.size(); ++i)
    EXPECT_TRUE(torch::equal(wa.tensors[i].second, wb.tensors[i].second)) << wa.tensors[i].first;
}

class StopAt : public Callback {
 public:
  explicit StopAt(int64_t step) : step_(step) {}
  void on_step_end(const StepMetrics& m, Control& c) override {
    if (m.step == step_) c.request_stop("test asked to stop");
  }

 private:
  int64_t step_;
};

TEST(Trainer, CallbackStopRequestEndsTheRunWithItsReason) {
  test::TempDir dir;
  auto s = train_tiny(dir.path(), {}, {std::make_shared<StopAt>(7)});
  EXPECT_EQ(s["steps"], 7);
  EXPECT_EQ(s["stop_reason"], "test asked to stop");
}

// On a device, the summary's phase figures are device time over every step whether the host waited
// for the device at each step or only at log steps: here on the CPU through EventTimer's fake
// clock, a run that logs (and settles) every step against one that logs every 5th and is stopped
// between log steps, so that the steps since the last log step are settled at the end.
TEST(Trainer, SummaryPhaseTimesOnADeviceCountEveryStepWhicheverStepsSettle) {
  device::EventTimer::fake_clock_for_tests(true);
  struct Off {
    ~Off() { device::EventTimer::fake_clock_for_tests(false); }
  } off;
  test::TempDir a, b;
  auto every = train_tiny(a.path(), {"train.log_every=1"}, {std::make_shared<StopAt>(7)});
  auto some = train_tiny(b.path(), {"train.log_every=5"}, {std::make_shared<StopAt>(7)});
  ASSERT_EQ(every["steps"], 7);
  ASSERT_EQ(some["steps"], 7);
  for (const char* k : {"forward_ms_per_step", "backward_ms_per_step", "optimizer_ms_per_step"}) {
    EXPECT_GT(every[k].get<double>(), 0.0) << k;
    EXPECT_NEAR(some[k].get<double>(), every[k].get<double>(), 1e-9) << k;
  }
  // The log line of step 5 gives that step's own device times in both runs.
  const auto line5 = [](const std::string& path) {
    for (const auto& l : test::read_jsonl(path))
      if (l["event"] == "step" && l["step"] == 5) return l;
    return nlohmann::json();
  };
  const auto la = line5(a.file("demo/metrics.jsonl")), lb = line5(b.file("demo/metrics.jsonl"));
  ASSERT_FALSE(la.is_null() || lb.is_null());
  for (const char* k : {"forward_s", "backward_s", "optimizer_s"})
    EXPECT_DOUBLE_EQ(lb[k].get<double>(), la[k].get<double>()) << k;
}

TEST(Trainer, RefusesToOverwriteAnEarlierRunUnlessAsked) {
  test::TempDir dir;
  train_tiny(dir.path());
  auto sets = test::tiny_overrides(dir.path());
  try {
    Trainer t(resolve_config("", sets, {}), test::quiet_run({}, false));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos);
  }
  EXPECT_TRUE(fs::exists(dir.file("demo/summary.json")));  // nothing lost
}

}  // namespace
}  // namespace frugal::trainer_test

namespace frugal::trainer_test {
namespace {

// Records, on each log step, the figures the producers (cost meter, MFU meter) fill.
class ProducedFigures : public Callback {
 public:
  void on_step_end(const StepMetrics& m, Control&) override {
    if (!m.logged) return;
    ++logged;
    // The cost of exactly this step's billed time (a cost meter running after this callback would
    // leave the previous step's figure), and a fresh MFU (make_step_metrics resets it to 0).
    if (std::abs(m.cost_usd - m.elapsed_s * 3.6 / 3600.0) < 1e-12) ++cost_current;
    if (m.mfu > 0) ++mfu_filled;
  }
  int logged = 0, cost_current = 0, mfu_filled = 0;
};

TEST(Trainer, ObserversSeeTheFiguresProducersFilledForTheSameStep) {
  test::TempDir dir;
  auto seen = std::make_shared<ProducedFigures>();
  train_tiny(dir.path(), {"train.steps=12", "train.log_every=3", "budget.usd_per_hour=3.6", "monitor.peak_tflops=1"},
             {seen});
  EXPECT_EQ(seen->logged, 4);
  EXPECT_EQ(seen->cost_current, 4);
  EXPECT_EQ(seen->mfu_filled, 4);
}

class ClaimsTheCostMetersKey : public Callback {
 public:
  std::string state_key() const override { return "cost_meter"; }
};

TEST(Trainer, TwoCallbacksWithOneStateKeyAreRefusedBeforeTheFirstStep) {
  test::TempDir dir;
  try {
    train_tiny(dir.path(), {}, {std::make_shared<ClaimsTheCostMetersKey>()});
    FAIL() << "a second callback with the state key cost_meter was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"cost_meter\""), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("demo/metrics.jsonl")) && !test::read_text(dir.file("demo/metrics.jsonl")).empty());
}

// What a crash report would name as the phase, seen from inside the callbacks the trainer calls.
class RecordsTheCrashPhase : public Callback {
 public:
  std::string state_key() const override { return "records_the_crash_phase"; }
  void on_step_end(const StepMetrics&, Control&) override { seen.insert("on_step_end: " + chain()); }
  void save_state(nlohmann::json&) const override { seen.insert("save_state: " + chain()); }
  void on_checkpoint(const CheckpointEvent&) override { seen.insert("on_checkpoint: " + chain()); }
  void on_train_end(const nlohmann::json&) override { seen.insert("on_train_end: " + chain()); }
  mutable std::set<std::string> seen;

 private:
  static std::string chain() {
    char buf[512];
    CrashPhase::chain(buf, sizeof buf);
    return buf;
  }
};

// A crash report names where in the run it happened: the step, the periodic checkpoint and its
// parts, the final checkpoint inside the run's finish.
TEST(Trainer, ACrashReportWouldNameThePhaseOfTheRun) {
  test::TempDir dir;
  auto rec = std::make_shared<RecordsTheCrashPhase>();
  train_tiny(dir.path(), {"train.steps=6", "checkpoint.every_steps=4", "checkpoint.async=false"}, {rec});
  const std::set<std::string> expect = {
      "on_step_end: ",  // after the step's own phase has closed
      "save_state: checkpoint > capture: callbacks' state",
      "on_checkpoint: checkpoint > callbacks' on_checkpoint",
      "save_state: finish > final checkpoint > checkpoint > capture: callbacks' state",
      "on_checkpoint: finish > final checkpoint > checkpoint > callbacks' on_checkpoint",
      "on_train_end: finish > summary > callbacks' on_train_end"};
  EXPECT_EQ(rec->seen, expect);
}

}  // namespace
}  // namespace frugal::trainer_test
