// The hooks a user task can set beyond its loss (train/task.h): evaluation figures of its own
// (metrics.jsonl, summary.json, early stopping), scalars a callback logs, parameter groups, a
// learning-rate schedule, and data.workers loader threads for its DatasetSource.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "frugal/frugal.h"
#include "test_util.h"

namespace frugal::task_hooks_test {
namespace {

// Sample i: 3 seeded features, label 1 when the first is positive.
torch::data::Example<> point(int64_t i) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(50 + i));
  at::Tensor x = at::randn({3}, g);
  return {x, torch::tensor(x[0].item<float>() > 0 ? 1L : 0L)};
}

struct Net {
  std::shared_ptr<torch::nn::LinearImpl> fc;
  Task task;
};

Net linear_task(std::function<torch::data::Example<>(int64_t)> sample = point) {
  torch::manual_seed(5);
  Net n;
  n.fc = std::make_shared<torch::nn::LinearImpl>(3, 2);
  n.task = make_task(n.fc, [](torch::nn::LinearImpl& m, const Batch& b) {
    return torch::nn::functional::cross_entropy(m.forward(b.x), b.y);
  });
  n.task.data = std::make_shared<DatasetSource>(
      sample_function(sample, 256), sample_function([](int64_t i) { return point(9000 + i); }, 64), 16, 3, "points");
  return n;
}

std::vector<std::string> sets(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> s = {"run.out_dir=" + out,  "run.name=hooks",      "run.threads=1",
                                "data.micro_batch=16", "train.steps=12",      "train.warmup_steps=0",
                                "train.lr=0.05",       "train.eval_every=3",  "train.eval_batches=2",
                                "train.log_every=1",   "precision.mode=fp32", "checkpoint.enabled=false"};
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

nlohmann::json fit(const Task& task, const std::vector<std::string>& s, TrainerOptions o = {}) {
  o.quiet = true;
  Trainer t(resolve_config("", s, {}), task, o);
  return t.fit();
}

std::vector<nlohmann::json> lines(const std::string& out, const char* event) {
  std::vector<nlohmann::json> v;
  for (const auto& j : test::read_jsonl(out + "/hooks/metrics.jsonl"))
    if (j.value("event", "") == event) v.push_back(j);
  return v;
}

// The accuracy of `fc` on validation batches 0 and 1 (what the hook reports, computed apart).
double val_accuracy(torch::nn::LinearImpl& fc) {
  torch::NoGradGuard no_grad;
  int64_t right = 0, n = 0;
  for (int64_t i = 0; i < 32; ++i) {
    auto e = point(9000 + i);
    right += fc.forward(e.data.unsqueeze(0)).argmax(1).item<int64_t>() == e.target.item<int64_t>();
    ++n;
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

TEST(TaskHooks, EvaluationFiguresLandInMetricsAndSummaryAndAreTheMeanOverBatches) {
  test::TempDir dir;
  Net n = linear_task();
  n.task.hooks.eval_metrics = [fc = n.fc.get()](torch::nn::Module& m, const Batch& b) {
    EXPECT_FALSE(m.is_training()) << "figures are computed in eval mode";
    EXPECT_FALSE(torch::GradMode::is_enabled());
    const double acc = (fc->forward(b.x).argmax(1) == b.y).to(torch::kDouble).mean().item<double>();
    return std::vector<std::pair<std::string, double>>{{"accuracy", acc}, {"rows", static_cast<double>(b.x.size(0))}};
  };
  const auto s = fit(n.task, sets(dir.path()));
  const auto evals = lines(dir.path(), "eval");
  ASSERT_EQ(evals.size(), 4u);  // steps 3, 6, 9 and 12 (the final evaluation is step 12's)
  for (const auto& e : evals) {
    ASSERT_TRUE(e.contains("metrics")) << e.dump();
    EXPECT_DOUBLE_EQ(e["metrics"]["rows"].get<double>(), 16.0);
  }
  // Batches of 16 equal in size: the mean of the two batch accuracies is the accuracy on 32 rows.
  EXPECT_NEAR(s["final_metrics"]["accuracy"].get<double>(), val_accuracy(*n.fc), 1e-12);
  EXPECT_DOUBLE_EQ(evals.back()["metrics"]["accuracy"].get<double>(), s["final_metrics"]["accuracy"].get<double>());
  const std::string report = test::read_text(dir.path() + "/hooks/report.html");
  EXPECT_NE(report.find("evaluation: accuracy"), std::string::npos) << "a chart per figure in the report";
}

TEST(TaskHooks, EarlyStoppingWatchesATaskFigureByName) {
  test::TempDir dir;
  Net n = linear_task();
  auto evals = std::make_shared<std::atomic<int>>(0);
  // A score that peaks at the second evaluation.
  n.task.hooks.eval_metrics = [evals, calls = std::make_shared<int>(0)](torch::nn::Module&, const Batch&) {
    const int e = (*calls)++ / 2 + 1;  // two batches per evaluation
    *evals = e;
    return std::vector<std::pair<std::string, double>>{{"score", e == 2 ? 1.0 : 0.5}};
  };
  const auto s =
      fit(n.task, sets(dir.path(), {"train.steps=30", "early_stop.enabled=true", "early_stop.task_metric=score",
                                    "early_stop.mode=max", "early_stop.patience=2"}));
  EXPECT_EQ(s["stop_kind"], "early_stop") << s.dump();
  EXPECT_EQ(s["steps"], 12) << "best at step 6, two evaluations without improvement: steps 9 and 12";
  EXPECT_NE(s["stop_reason"].get<std::string>().find("score"), std::string::npos) << s["stop_reason"];

  test::TempDir other;
  Net m = linear_task();
  m.task.hooks.eval_metrics = [](torch::nn::Module&, const Batch&) {
    return std::vector<std::pair<std::string, double>>{{"acc", 1.0}};
  };
  try {
    fit(m.task, sets(other.path(), {"early_stop.enabled=true", "early_stop.task_metric=accuracy"}));
    FAIL() << "a figure the task does not report must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("{acc}"), std::string::npos) << e.what();
  }
}

class Doubler : public Callback {
 public:
  void on_step_metrics(StepMetrics& m) override {
    if (m.logged) m.user["twice/step"] = 2.0 * static_cast<double>(m.step);
  }
};

class BadName : public Callback {
 public:
  void on_step_metrics(StepMetrics& m) override { m.user["no spaces"] = 1; }
};

TEST(TaskHooks, ScalarsACallbackSetsAreWrittenOnEveryLoggedStep) {
  test::TempDir dir;
  Net n = linear_task();
  TrainerOptions o;
  o.callbacks = {std::make_shared<Doubler>()};
  fit(n.task, sets(dir.path()), o);
  const auto steps = lines(dir.path(), "step");
  ASSERT_EQ(steps.size(), 12u);
  for (const auto& j : steps) EXPECT_DOUBLE_EQ(j["user"]["twice/step"].get<double>(), 2.0 * j["step"].get<double>());
  EXPECT_NE(test::read_text(dir.path() + "/hooks/report.html").find("logged: twice/step"), std::string::npos);

  test::TempDir bad;
  TrainerOptions b;
  b.callbacks = {std::make_shared<BadName>()};
  EXPECT_THROW(fit(linear_task().task, sets(bad.path()), b), ConfigError);
}

TEST(TaskHooks, ParameterGroupsSetEachTensorsWeightDecay) {
  // With a loss whose gradient is zero, AdamW's step is the decay alone: p <- p (1 - lr wd).
  auto zero_loss = [](torch::nn::LinearImpl& m, const Batch&) { return (m.weight.sum() + m.bias.sum()) * 0.0; };
  auto run = [&](bool groups) {
    test::TempDir dir;
    Net n = linear_task();
    n.task = make_task(n.fc, zero_loss);
    n.task.data = linear_task().task.data;
    if (groups)
      n.task.hooks.param_groups = [fc = n.fc.get()](torch::nn::Module&) {
        return std::vector<ParamGroup>{{{fc->weight}, 0.0}, {{fc->bias}, 0.5}};
      };
    const at::Tensor w0 = n.fc->weight.detach().clone(), b0 = n.fc->bias.detach().clone();
    fit(n.task,
        sets(dir.path(), {"train.steps=1", "train.eval_every=0", "train.weight_decay=0.1", "train.grad_clip=0"}));
    return std::make_tuple(w0, b0, n.fc->weight.detach().clone(), n.fc->bias.detach().clone());
  };
  const auto [w0, b0, w, b] = run(false);
  EXPECT_TRUE(torch::allclose(w, w0 * (1 - 0.05 * 0.1), 0, 1e-7)) << "default: matrices decay";
  EXPECT_TRUE(torch::equal(b, b0)) << "default: biases do not";
  const auto [gw0, gb0, gw, gb] = run(true);
  EXPECT_TRUE(torch::equal(gw, gw0)) << "the weight's group has no decay";
  EXPECT_TRUE(torch::allclose(gb, gb0 * (1 - 0.05 * 0.5), 0, 1e-7)) << "the bias's group decays by 0.5";

  test::TempDir dir;
  Net n = linear_task();
  n.task.hooks.param_groups = [fc = n.fc.get()](torch::nn::Module&) {
    return std::vector<ParamGroup>{{{fc->weight}, 0.1}};
  };
  try {
    fit(n.task, sets(dir.path()));
    FAIL() << "a parameter in no group must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("in no group"), std::string::npos) << e.what();
  }
}

TEST(TaskHooks, ALearningRateScheduleOfTheTasksReplacesWarmupAndCosine) {
  test::TempDir dir;
  Net n = linear_task();
  n.task.hooks.lr_schedule = [](int64_t step, int64_t total) {
    return 0.001 * static_cast<double>(step + 1) + (total == 12 ? 0.0 : 1.0);
  };
  fit(n.task, sets(dir.path()));
  const auto steps = lines(dir.path(), "step");
  ASSERT_EQ(steps.size(), 12u);
  for (const auto& j : steps) EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.001 * j["step"].get<double>());

  test::TempDir bad;
  Net m = linear_task();
  m.task.hooks.lr_schedule = [](int64_t, int64_t) { return std::nan(""); };
  EXPECT_THROW(fit(m.task, sets(bad.path())), ConfigError);
}

TEST(TaskHooks, DataWorkersBuildADatasetSourcesBatchesOnOtherThreadsWithTheSameResult) {
  auto run = [](int64_t workers, std::set<std::thread::id>* threads) {
    test::TempDir dir;
    auto mu = std::make_shared<std::mutex>();
    Net n = linear_task([threads, mu](int64_t i) {
      std::lock_guard<std::mutex> lock(*mu);
      threads->insert(std::this_thread::get_id());
      return point(i);
    });
    fit(n.task, sets(dir.path(), {"data.workers=" + std::to_string(workers), "data.prefetch=3"}));
    return test::step_losses(dir.path() + "/hooks/metrics.jsonl");
  };
  std::set<std::thread::id> inline_threads, worker_threads;
  const auto a = run(0, &inline_threads), b = run(2, &worker_threads);
  EXPECT_EQ(a, b) << "batch k is the same whoever builds it";
  EXPECT_EQ(inline_threads.size(), 1u);
  EXPECT_EQ(inline_threads.count(std::this_thread::get_id()), 1u);
  EXPECT_EQ(worker_threads.count(std::this_thread::get_id()), 0u) << "with workers, no sample on the trainer thread";
  EXPECT_GE(worker_threads.size(), 1u);
}

}  // namespace
}  // namespace frugal::task_hooks_test
