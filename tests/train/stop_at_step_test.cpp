// `frugal train --stop-at-step N` (train/stop_at_step.h): a run stopped at a step and resumed is
// the uninterrupted run, bitwise (weights, and every metrics.jsonl value that is not a timing),
// whether N is an evaluation step or not; the stopped run evaluated at N and left a checkpoint
// there, and its learning rate followed train.steps, not N.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "resume_util.h"
#include "test_util.h"

namespace frugal::stop_at_step_test {
namespace {
namespace fs = std::filesystem;

std::vector<nlohmann::json> metrics(const std::string& path) { return test::metrics_without_timing(path); }

nlohmann::json train(const std::string& out, int64_t stop_at, const std::string& resume) {
  auto sets = test::tiny_overrides(out);  // 30 steps, evaluation every 15, log every 5
  sets.push_back("model.dropout=0.1");    // dropout draws from the generator the checkpoint keeps
  TrainerOptions o;
  o.quiet = true;
  o.resume = resume;
  o.stop_at_step = stop_at;
  Trainer t(resolve_config("", sets, {}), o);
  auto s = t.fit();
  clear_preemption();
  return s;
}

void expect_stop_then_resume_matches(int64_t stop_at) {
  test::TempDir straight, stopped;
  train(straight.path(), 0, "");
  const auto first = train(stopped.path(), stop_at, "");
  EXPECT_EQ(first["steps"], stop_at);
  EXPECT_EQ(first["stop_kind"], "callback");
  EXPECT_NE(first["stop_reason"].get<std::string>().find("--stop-at-step"), std::string::npos);
  bool evaluated = false, checkpointed = false;
  for (const auto& j : metrics(stopped.file("demo/metrics.jsonl")))
    evaluated = evaluated || (j["event"] == "eval" && j["step"] == stop_at);
  for (const auto& c : list_checkpoints(stopped.file("demo/checkpoints")))
    checkpointed = checkpointed || c.step == stop_at;
  EXPECT_TRUE(evaluated) << "no evaluation at step " << stop_at;
  EXPECT_TRUE(checkpointed) << "no checkpoint at step " << stop_at;
  const auto done = train(stopped.path(), 0, "auto");
  EXPECT_EQ(done["stop_kind"], "completed");
  EXPECT_EQ(done["steps"], 30);
  EXPECT_TRUE(test::read_text(straight.file("demo/final/model.safetensors")) ==
              test::read_text(stopped.file("demo/final/model.safetensors")))
      << "the resumed run's weights differ from the uninterrupted run's";
  auto a = metrics(straight.file("demo/metrics.jsonl")), b = metrics(stopped.file("demo/metrics.jsonl"));
  // A stop at a step that is not an evaluation step evaluates there once more than the straight run
  // (and that evaluation may lower the later lines' best_val_loss); everything else is the same.
  const bool extra = stop_at % 15 != 0;
  std::vector<nlohmann::json> b_kept;
  for (auto j : b) {
    if (extra && j["event"] == "eval" && j["step"] == stop_at) continue;
    if (extra) j.erase("best_val_loss");
    b_kept.push_back(j);
  }
  if (extra)
    for (auto& j : a) j.erase("best_val_loss");
  ASSERT_EQ(a.size(), b_kept.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b_kept[i]) << "metrics line " << i + 1;
}

TEST(StopAtStep, StoppedAtAnEvaluationStepAndResumedMatchesTheStraightRunBitwise) {
  expect_stop_then_resume_matches(15);
}

TEST(StopAtStep, StoppedBetweenEvaluationsAndResumedMatchesTheStraightRunBitwise) {
  expect_stop_then_resume_matches(12);
}

// At step `at` asks the loop to end the run at step `end` (as the deadline guard's decay does), and
// records the end every later event carries.
class MovesTheEnd : public Callback {
 public:
  MovesTheEnd(int64_t at, int64_t end) : at_(at), end_(end) {}
  void on_step_end(const StepMetrics& m, Control& control) override {
    if (m.step > at_) step_ends.push_back(m.total_steps);
    if (m.step == at_) control.request_end_at(end_, "the test moved the end");
  }
  void on_eval_end(const EvalMetrics& e, Control&) override {
    if (e.step > at_) eval_ends.push_back(e.total_steps);
  }
  std::vector<int64_t> step_ends, eval_ends;

 private:
  int64_t at_, end_;
};

// The loop holds the run's end; every callback reads it from the event it is given, none keeps a
// copy: once moved from 30 to 18 at step 5, every later step and evaluation says 18, the stop at
// step 20 (past the new end) never fires, and the run completes at 18.
TEST(StopAtStep, AnEndMovedMidRunIsTheEndEveryLaterEventCarries) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());  // 30 steps, evaluation every 15
  sets.push_back("train.schedule=wsd");
  auto mover = std::make_shared<MovesTheEnd>(5, 18);
  TrainerOptions o;
  o.quiet = true;
  o.stop_at_step = 20;
  o.callbacks = {mover};
  const auto s = Trainer(resolve_config("", sets, {}), o).fit();
  EXPECT_EQ(s["steps"], 18);
  EXPECT_EQ(s["stop_kind"], "completed");
  ASSERT_EQ(mover->step_ends.size(), 13u);
  for (int64_t end : mover->step_ends) EXPECT_EQ(end, 18);
  ASSERT_FALSE(mover->eval_ends.empty());
  for (int64_t end : mover->eval_ends) EXPECT_EQ(end, 18);
}

}  // namespace
}  // namespace frugal::stop_at_step_test
