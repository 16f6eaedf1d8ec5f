// A user module through the public API (<frugal/frugal.h>): a small MLP with dropout and a
// BatchNorm buffer on a synthetic two-class problem trains and its loss falls; a stopped and
// resumed run reproduces the uninterrupted one bitwise on CPU; user callbacks see the documented
// events in order; the torch::data adapter yields exactly the dataset's samples.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <set>

#include "frugal/frugal.h"
#include "frugal/train/preemption.h"
#include "signal_at.h"
#include "test_util.h"

namespace frugal::task_test {
namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 32));
    bn = register_module("bn", torch::nn::BatchNorm1d(32));
    drop = register_module("drop", torch::nn::Dropout(0.1));
    fc2 = register_module("fc2", torch::nn::Linear(32, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(drop(torch::relu(bn(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Dropout drop{nullptr};
};

// Sample i: 4 seeded features, label 1 when their sum is positive.
torch::data::Example<> blob(int64_t i) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(1000 + i));
  at::Tensor x = at::randn({4}, g);
  return {x, torch::tensor(x.sum().item<float>() > 0 ? 1L : 0L)};
}

Task mlp_task(int64_t micro_batch) {
  torch::manual_seed(3);
  auto net = std::make_shared<MlpImpl>();
  Task t = make_task(
      net, [](MlpImpl& m, const Batch& b) { return torch::nn::functional::cross_entropy(m.forward(b.x), b.y); });
  t.data = std::make_shared<DatasetSource>(sample_function(blob, 512),
                                           sample_function([](int64_t i) { return blob(100000 + i); }, 128),
                                           micro_batch, 7, "blobs");
  t.hooks.describe = "MLP 4-32-2";
  return t;
}

std::vector<std::string> mlp_sets(const std::string& out) {
  return {"run.out_dir=" + out,    "run.name=mlp",         "run.threads=1",       "data.micro_batch=16",
          "train.steps=40",        "train.warmup_steps=4", "train.lr=0.01",       "train.eval_every=10",
          "train.eval_batches=2",  "train.log_every=5",    "precision.mode=fp32", "checkpoint.every_steps=10",
          "checkpoint.keep_last=5"};
}

nlohmann::json train_mlp(const std::string& out, TrainerOptions o = {}, std::vector<std::string> extra = {}) {
  auto sets = mlp_sets(out);
  sets.insert(sets.end(), extra.begin(), extra.end());
  o.quiet = true;
  Trainer t(resolve_config("", sets, {}), mlp_task(16), o);
  auto s = t.fit();
  clear_preemption();
  return s;
}

class Recorder : public Callback {
 public:
  void on_train_begin(const RunInfo& info) override {
    events.push_back("begin");
    params = info.params;
    item = info.item;
  }
  void on_step_end(const StepMetrics& m, Control&) override {
    events.push_back("step " + std::to_string(m.step));
    if (m.logged) losses.push_back(m.loss);
  }
  void on_eval_end(const EvalMetrics& m, Control&) override {
    events.push_back("eval " + std::to_string(m.step));
    val.push_back(m.val_loss);
  }
  void on_checkpoint(const CheckpointEvent& e) override { events.push_back("checkpoint " + std::to_string(e.step)); }
  void on_train_end(const nlohmann::json& s) override { events.push_back("end " + s["stop_kind"].get<std::string>()); }
  std::vector<std::string> events;
  std::vector<double> losses, val;
  int64_t params = 0;
  std::string item;
};

TEST(UserTask, MlpTrainsThroughThePublicApiAndItsLossFalls) {
  test::TempDir dir;
  auto rec = std::make_shared<Recorder>();
  TrainerOptions o;
  o.callbacks = {rec};
  auto s = train_mlp(dir.path(), o);
  EXPECT_EQ(s["steps"], 40);
  EXPECT_EQ(s["stop_kind"], "completed");
  EXPECT_EQ(s["tokens"], 40 * 16);                            // one item per sample
  EXPECT_EQ(rec->item, "sample");                             // the console says samples/s, not tok/s
  EXPECT_EQ(rec->params, 4 * 32 + 32 + 2 * 32 + 32 * 2 + 2);  // fc1, bn (weight, bias), fc2
  ASSERT_EQ(rec->val.size(), 4u);
  // A linear rule: chance is ln 2 = 0.693; 40 steps of AdamW reach well below it.
  EXPECT_LT(rec->val.back(), 0.5 * std::log(2.0));
  EXPECT_LT(rec->losses.back(), 0.5 * rec->losses.front());
  // The checkpoint and the final weights hold the parameters and the BatchNorm buffers by name.
  SafetensorsFile f = load_safetensors(dir.file("mlp/final/model.safetensors"));
  std::set<std::string> names;
  for (const auto& [k, v] : f.tensors) names.insert(k);
  EXPECT_TRUE(names.count("fc1.weight") && names.count("bn.running_mean") && names.count("bn.num_batches_tracked"));
}

TEST(UserTask, StoppedAndResumedRunMatchesUninterruptedRunBitwise) {
  test::TempDir a, b;
  train_mlp(a.path());
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(13)};
  auto stopped = train_mlp(b.path(), o);
  ASSERT_EQ(stopped["stop_kind"], "preempted");
  ASSERT_EQ(stopped["steps"], 13);
  TrainerOptions r;
  r.resume = "auto";
  auto resumed = train_mlp(b.path(), r);
  EXPECT_EQ(resumed["steps"], 40);
  EXPECT_EQ(resumed["checkpoint"]["resumed_from"].get<std::string>().substr(b.path().size()),
            "/mlp/checkpoints/step-00000013");
  EXPECT_EQ(test::read_text(a.file("mlp/final/model.safetensors")),
            test::read_text(b.file("mlp/final/model.safetensors")))
      << "final weights (parameters and BatchNorm buffers) differ";
  auto sa = nlohmann::json::parse(test::read_text(a.file("mlp/summary.json")));
  EXPECT_EQ(sa["final_val_loss"], resumed["final_val_loss"]);
  EXPECT_EQ(sa["final_train_loss"], resumed["final_train_loss"]);
}

TEST(UserTask, TorchAdamWRunResumesBitwiseToo) {
  // LibTorch's per-parameter AdamW: its moments and per-parameter step counts go into the
  // checkpoint and come back, so the resumed run ends on the uninterrupted run's weights.
  const std::vector<std::string> torch_opt = {"train.optimizer=torch_adamw"};
  test::TempDir a, b;
  train_mlp(a.path(), {}, torch_opt);
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(17)};
  ASSERT_EQ(train_mlp(b.path(), o, torch_opt)["stop_kind"], "preempted");
  TrainerOptions r;
  r.resume = "auto";
  auto resumed = train_mlp(b.path(), r, torch_opt);
  EXPECT_EQ(resumed["steps"], 40);
  EXPECT_EQ(test::read_text(a.file("mlp/final/model.safetensors")),
            test::read_text(b.file("mlp/final/model.safetensors")))
      << "final weights differ after a torch_adamw resume";
}

// The optimizer is part of what a checkpoint continues: another one is refused before anything is
// written, naming the key and both values (run_config.h).
TEST(UserTask, ResumingWithTheOtherOptimizerIsRefusedNamingIt) {
  test::TempDir b;
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(13)};
  ASSERT_EQ(train_mlp(b.path(), o)["stop_kind"], "preempted");  // fused_adamw's checkpoint
  TrainerOptions r;
  r.resume = "auto";
  try {
    train_mlp(b.path(), r, {"train.optimizer=torch_adamw"});
    FAIL() << "a fused_adamw checkpoint resumed under torch_adamw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.optimizer: the run has 'fused_adamw', --set gives 'torch_adamw'"),
              std::string::npos)
        << e.what();
  }
  clear_preemption();
}

TEST(UserTask, CallbacksSeeTheDocumentedEventsInOrder) {
  test::TempDir dir;
  auto rec = std::make_shared<Recorder>();
  TrainerOptions o;
  o.callbacks = {rec};
  train_mlp(dir.path(), o, {"train.steps=4", "train.eval_every=2", "checkpoint.every_steps=2"});
  const std::vector<std::string> want = {"begin",  "step 1", "step 2", "eval 2",       "checkpoint 2",
                                         "step 3", "step 4", "eval 4", "checkpoint 4", "end completed"};
  EXPECT_EQ(rec->events, want);
}

TEST(UserTask, ActivationCheckpointingWithoutAHookIsAConfigError) {
  test::TempDir dir;
  try {
    train_mlp(dir.path(), {}, {"memory.activation_checkpointing=blocks"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("memory.activation_checkpointing = \"blocks\""), std::string::npos)
        << e.what();
  }
}

TEST(UserTask, EarlyStoppingAndTheBudgetLeverApplyToAUserModule) {
  test::TempDir dir;
  // patience 1 with an impossible min_delta: the second evaluation stops the run.
  auto s = train_mlp(
      dir.path(), {},
      {"early_stop.enabled=true", "early_stop.patience=1", "early_stop.min_delta=100", "budget.usd_per_hour=3.6"});
  EXPECT_EQ(s["stop_kind"], "early_stop");
  EXPECT_EQ(s["steps"], 20);
  EXPECT_GT(s["cost_usd"].get<double>(), 0.0);
}

TEST(UserTask, ConfigFilledInCodeIsCheckedAgainstTheSchema) {
  Config c;
  c.train.steps = 7;
  c.precision.mode = PrecisionMode::kBf16;
  ResolvedConfig rc = resolve_config(c);
  EXPECT_EQ(rc.config.train.steps, 7);
  EXPECT_EQ(rc.origins.at("train.steps").describe(), "code");
  EXPECT_EQ(rc.origins.at("train.lr").describe(), "default");
  c.train.lr = -1;
  try {
    resolve_config(c);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.lr"), std::string::npos) << e.what();
  }
}

// A torch::data dataset of 10 samples: x = [i, i*i], y = i % 3.
class Squares : public torch::data::datasets::Dataset<Squares> {
 public:
  torch::data::Example<> get(size_t i) override {
    const auto v = static_cast<float>(i);
    return {torch::tensor({v, v * v}), torch::tensor(static_cast<int64_t>(i % 3))};
  }
  c10::optional<size_t> size() const override { return 10; }
};

TEST(DatasetSource, TorchDatasetAdapterYieldsTheDatasetsSamples) {
  DatasetSource plain(torch_dataset(Squares()), torch_dataset(Squares()), 5, 9, "squares");
  DatasetSource stacked(torch_dataset(Squares().map(torch::data::transforms::Stack<>())), torch_dataset(Squares()), 5,
                        9, "squares");
  Squares ref;
  std::multiset<int64_t> epoch0;
  for (int64_t k = 0; k < 4; ++k) {
    const auto idx = plain.train_indices(k);
    ASSERT_EQ(idx.size(), 5u);
    Batch b = plain.train_batch(k), s = stacked.train_batch(k);
    EXPECT_TRUE(b.x.equal(s.x) && b.y.equal(s.y)) << "batch " << k;
    for (size_t j = 0; j < idx.size(); ++j) {
      auto e = ref.get(static_cast<size_t>(idx[j]));
      EXPECT_TRUE(b.x[static_cast<int64_t>(j)].equal(e.data)) << "batch " << k << " row " << j;
      EXPECT_TRUE(b.y[static_cast<int64_t>(j)].equal(e.target)) << "batch " << k << " row " << j;
    }
    if (k < 2) epoch0.insert(idx.begin(), idx.end());
  }
  // Every sample exactly once in the first epoch (batches 0 and 1), in a shuffled order.
  EXPECT_EQ(epoch0, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_NE(plain.train_indices(0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Validation batches are in order, wrapping around.
  EXPECT_EQ(plain.val_indices(1), (std::vector<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(plain.val_indices(2), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(plain.val_batch(1).x.equal(
      at::stack({ref.get(5).data, ref.get(6).data, ref.get(7).data, ref.get(8).data, ref.get(9).data})));
}

// A stop signal during the final evaluation (here raised by its first validation batch) stops the
// run as one during training does: exit 75's kind, a checkpoint with the evaluation pending, no
// final weights. It used to end "completed" without a validation loss. The resumed run evaluates
// first and ends completed with it.
TEST(UserTask, AStopSignalDuringTheFinalEvaluationPreemptsAndTheResumeEvaluates) {
  test::TempDir dir;
  auto run = [&](bool signal, const std::string& resume) {
    auto sets = mlp_sets(dir.path());
    sets.insert(sets.end(), {"train.eval_every=0", "train.steps=20"});
    Task t = mlp_task(16);
    const LossFn loss = t.loss;
    auto raised = std::make_shared<bool>(!signal);
    t.eval_loss = [loss, raised](torch::nn::Module& m, const Batch& b) {
      if (!*raised) {
        *raised = true;
        std::raise(SIGTERM);
      }
      return loss(m, b);
    };
    TrainerOptions o;
    o.quiet = true;
    o.handle_signals = true;
    o.resume = resume;
    auto s = Trainer(resolve_config("", sets, {}), std::move(t), o).fit();
    clear_preemption();
    return s;
  };
  const auto stopped = run(true, "");
  EXPECT_EQ(stopped["stop_kind"], "preempted") << stopped.dump(1);
  EXPECT_TRUE(std::isnan(stopped["final_val_loss"].get<double>()));  // written as null
  EXPECT_FALSE(std::filesystem::exists(dir.file("mlp/final")));
  const auto resumed = run(false, "auto");
  EXPECT_EQ(resumed["stop_kind"], "completed");
  EXPECT_EQ(resumed["steps"], 20);
  EXPECT_TRUE(std::isfinite(resumed["final_val_loss"].get<double>())) << resumed.dump(1);
}

TEST(DatasetSource, EmptySplitsAreDataErrorsNamingTheSource) {
  EXPECT_THROW(DatasetSource(sample_function(blob, 0), sample_function(blob, 4), 2, 1, "rows.csv"), DataError);
  DatasetSource no_val(sample_function(blob, 4), {}, 2, 1, "rows.csv");
  try {
    no_val.val_batch(0);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("rows.csv: the validation split is empty"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::task_test
