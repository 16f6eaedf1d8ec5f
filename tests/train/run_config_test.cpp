// The configuration a run trains with (train/run_config.h): a resume takes the run's own values
// for what it was not told, allows deliberate changes of safe keys and records them, and refuses,
// naming each key, a different model, data, batch or optimizer, before anything is written;
// complete_config fills the vocabulary from a shards manifest for every entry point.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/core/threads.h"
#include "frugal/model/gpt.h"
#include "frugal/train/model_task.h"
#include "frugal/train/run_config.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::run_config_test {
namespace {
namespace fs = std::filesystem;

// What a checkpoint records: every key's value as a TOML literal.
nlohmann::json saved_values(const ResolvedConfig& rc) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : config_schema()) j[k.key] = format_value_shown(k, rc.config);
  return j;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RunConfig, AKeyLeftAtItsDefaultTakesTheRunsValue) {
  const ResolvedConfig run =
      resolve_config("", {"data.source=text:/data/a.txt", "train.steps=100", "model.layers=3", "run.name=r"}, {});
  ResolvedConfig now = resolve_config("", {"run.name=r"}, {});
  const auto changes = reconcile_resume_config(now, saved_values(run), "runs/r/checkpoints/step-00000060");
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(now.config.data.source.path, "/data/a.txt");
  EXPECT_EQ(now.config.train.steps, 100);
  EXPECT_EQ(now.config.model.layers, 3);
  EXPECT_EQ(now.origins.at("data.source").kind, ValueOrigin::Kind::kRun);
  EXPECT_NE(now.origins.at("data.source").describe().find("step-00000060"), std::string::npos);
  // The whole config is the run's again: every value the same.
  EXPECT_EQ(saved_values(now), saved_values(run));
}

TEST(RunConfig, ADeliberateChangeOfASafeKeyIsAllowedAndReturnedWithItsOrigin) {
  const ResolvedConfig run = resolve_config("", {"train.steps=100", "train.eval_every=10"}, {});
  ResolvedConfig now = resolve_config("", {"train.steps=200", "train.eval_every=10", "budget.limit_usd=3"}, {});
  const auto changes = reconcile_resume_config(now, saved_values(run), "ck");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "train.steps");
  EXPECT_EQ(changes[0].from, "100");
  EXPECT_EQ(changes[0].to, "200");
  EXPECT_EQ(changes[0].origin, "--set");
  EXPECT_EQ(changes[1].key, "budget.limit_usd");
  EXPECT_EQ(now.config.train.steps, 200);
  EXPECT_EQ(changes[0].to_json(60)["at_step"], 60);
}

TEST(RunConfig, AChangeOfModelDataSeedBatchOrOptimizerIsRefusedNamingEveryKey) {
  const ResolvedConfig run = resolve_config("", {"data.source=text:a.txt", "model.layers=3"}, {});
  for (const char* key : {"data.source=builtin:arith", "model.layers=4", "run.seed=9", "data.micro_batch=3",
                          "train.lr=0.5", "train.optimizer=torch_adamw"}) {
    ResolvedConfig now = resolve_config("", {"data.source=text:a.txt", "model.layers=3", key}, {});
    const std::string why = message_of([&] { reconcile_resume_config(now, saved_values(run), "ck"); });
    const std::string name = std::string(key).substr(0, std::string(key).find('='));
    EXPECT_NE(why.find("  " + name + ": the run has "), std::string::npos) << key << ": " << why;
    EXPECT_NE(why.find("--set gives"), std::string::npos) << why;
    EXPECT_NE(why.find("--set run.name=NEW"), std::string::npos) << why;
  }
  ResolvedConfig two = resolve_config("", {"data.source=builtin:arith", "model.layers=4"}, {});
  const std::string why = message_of([&] { reconcile_resume_config(two, saved_values(run), "ck"); });
  EXPECT_NE(why.find("model.layers: the run has 3"), std::string::npos) << why;
  EXPECT_NE(why.find("data.source: the run has 'text:a.txt'"), std::string::npos) << why;
}

TEST(RunConfig, ANameOrSecretOrAKeyTheCheckpointDoesNotRecordIsLeftAlone) {
  ResolvedConfig run = resolve_config("", {"run.name=a", "run.out_dir=/x"}, {});
  nlohmann::json saved = saved_values(run);
  saved.erase("train.steps");  // an older frugal's checkpoint
  ResolvedConfig now = resolve_config("", {"run.name=b", "train.steps=7"}, {{"FRUGAL_MONITOR_TOKEN", "s3cret"}});
  EXPECT_TRUE(reconcile_resume_config(now, saved, "ck").empty());
  EXPECT_EQ(now.config.run.name, "b");
  EXPECT_EQ(now.config.train.steps, 7);
  EXPECT_EQ(now.config.monitor.token, "s3cret");
}

// The library path: a resumed Trainer told nothing but the run's name continues the run as it was
// (its steps, its shape), and one asked for another shape fails before the run directory changes.
TEST(RunConfig, ATrainerResumedWithoutTheConfigContinuesTheRunAndARefusedOneWritesNothing) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("train.steps=12");
  sets.push_back("checkpoint.every_steps=4");
  TrainerOptions o = test::quiet_run();
  o.stop_at_step = 8;
  Trainer(resolve_config("", sets, {}), o).fit();
  const std::string config_before = test::read_text(dir.file("demo/config.toml"));
  const std::string metrics_before = test::read_text(dir.file("demo/metrics.jsonl"));
  ASSERT_NE(config_before.find("layers = 1"), std::string::npos);

  TrainerOptions r = test::quiet_run({}, false);
  r.resume = "auto";
  EXPECT_THROW(Trainer(resolve_config("", {"run.out_dir=" + dir.path(), "model.layers=2"}, {}), r), ConfigError);
  EXPECT_EQ(test::read_text(dir.file("demo/config.toml")), config_before);
  EXPECT_EQ(test::read_text(dir.file("demo/metrics.jsonl")), metrics_before);

  const nlohmann::json s = Trainer(resolve_config("", {"run.out_dir=" + dir.path()}, {}), r).fit();
  EXPECT_EQ(s["steps"], 12);  // the run's train.steps, not the default 600
  EXPECT_FALSE(s.contains("config_changes"));
  EXPECT_NE(test::read_text(dir.file("demo/config.toml")).find("layers = 1  # the run's checkpoint"),
            std::string::npos);
}

// A checkpoint copied from another run does not bring its author's commands or servers: the keys
// that run a command or contact a host are taken only from the run's own checkpoints.
TEST(RunConfig, AnotherRunsCheckpointDoesNotBringItsCommandsOrServers) {
  const nlohmann::json saved = {{"budget.alert_command", "'touch /tmp/pwned'"},
                                {"track.mlflow_uri", "'http://10.9.8.7:5000'"},
                                {"checkpoint.notice_url", "'http://10.9.8.7/notice'"},
                                {"train.steps", "77"}};
  ResolvedConfig other = resolve_config("", {"run.out_dir=/tmp/mine", "run.name=r"}, {});
  std::vector<std::string> not_taken;
  reconcile_resume_config(other, saved, "/tmp/theirs/r/checkpoints/step-00000010", &not_taken);
  EXPECT_EQ(other.config.budget.alert_command, "");
  EXPECT_EQ(other.config.track.mlflow_uri, "");
  EXPECT_EQ(other.config.checkpoint.notice_url, "");
  EXPECT_EQ(other.config.train.steps, 77) << "the rest of the run's config is still continued";
  EXPECT_EQ(not_taken, (std::vector<std::string>{"checkpoint.notice_url", "budget.alert_command", "track.mlflow_uri"}));
  ResolvedConfig own = resolve_config("", {"run.out_dir=/tmp/mine", "run.name=r"}, {});
  reconcile_resume_config(own, saved, "/tmp/mine/r/checkpoints/step-00000010");
  EXPECT_EQ(own.config.budget.alert_command, "touch /tmp/pwned");
  EXPECT_EQ(own.config.track.mlflow_uri, "http://10.9.8.7:5000");
}

// A run killed before its first checkpoint (or whose only one is damaged), resumed with --resume
// auto and nothing else: it starts over from step 0 with its own config.toml, said plainly, never
// with the built-in defaults (which trained the demo over the run's files).
TEST(RunConfig, AResumeWithoutASoundCheckpointStartsOverWithTheRunsOwnConfig) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("run.name=k");
  sets.push_back("train.steps=7");
  sets.push_back("model.embd=48");
  const ResolvedConfig own = resolve_config("", sets, {});
  std::filesystem::create_directories(dir.file("k"));
  test::write_text(dir.file("k/config.toml"), own.to_toml());  // what a run writes before its first step
  test::write_text(dir.file("k/metrics.jsonl"), "{\"event\":\"step\",\"step\":1}\n");
  TrainerOptions r = test::quiet_run({}, false);
  r.resume = "auto";
  const nlohmann::json s = Trainer(resolve_config("", {"run.out_dir=" + dir.path(), "run.name=k"}, {}), r).fit();
  EXPECT_EQ(s["steps"], 7);
  EXPECT_NE(s["model"].get<std::string>().find("embd 48"), std::string::npos) << s["model"];
  const std::string config = test::read_text(dir.file("k/config.toml"));
  EXPECT_NE(config.find("embd = 48  # the run's own " + dir.file("k/config.toml")), std::string::npos) << config;
  // A key the resume may not change is refused against the run's own config too.
  TrainerOptions again = test::quiet_run({}, false);
  again.resume = "auto";
  std::filesystem::remove_all(dir.file("k/checkpoints"));
  EXPECT_THROW(Trainer(resolve_config("", {"run.out_dir=" + dir.path(), "run.name=k", "model.embd=64"}, {}), again),
               ConfigError);
}

// A checkpoint that does not fit the model the task builds (a shape the config cannot see) fails
// the resume before anything is written into the run directory.
TEST(RunConfig, ACheckpointThatDoesNotFitTheModelLeavesTheRunDirectoryAsItWas) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("checkpoint.every_steps=5");
  TrainerOptions o = test::quiet_run();
  o.stop_at_step = 10;
  Trainer(resolve_config("", sets, {}), o).fit();
  const std::string config_before = test::read_text(dir.file("demo/config.toml"));
  const std::string metrics_before = test::read_text(dir.file("demo/metrics.jsonl"));
  TrainerOptions r = test::quiet_run({}, false);
  r.resume = "auto";
  auto wider = [](const Config& c) {
    Config w = c;
    w.model.embd = 64;  // not what the checkpoint holds, and not visible in the config
    return make_model_task(w);
  };
  sets.push_back("train.eval_every=3");  // a safe change: config.toml would say so if it were written
  EXPECT_ANY_THROW(Trainer(resolve_config("", sets, {}), TaskFactory(wider), r));
  EXPECT_EQ(test::read_text(dir.file("demo/config.toml")), config_before);
  EXPECT_EQ(test::read_text(dir.file("demo/metrics.jsonl")), metrics_before);
}

// Start-up measurements draw from a generator of their own: a run whose peak is measured (a matmul
// probe of random matrices) trains bitwise like one told its peak (no probe), dropout masks included.
TEST(RunConfig, AStartUpProbeDoesNotChangeTheRunThatFollowsIt) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("model.dropout=0.1");
  sets.push_back("train.steps=6");
  auto measured = sets, told = sets;
  measured.push_back("run.name=measured");
  told.push_back("run.name=told");
  told.push_back("monitor.peak_tflops=1");
  Trainer(resolve_config("", measured, {}), test::quiet_run()).fit();
  Trainer(resolve_config("", told, {}), test::quiet_run()).fit();
  EXPECT_TRUE(test::read_text(dir.file("measured/final/model.safetensors")) ==
              test::read_text(dir.file("told/final/model.safetensors")))
      << "the run whose peak was measured trained differently from the one told its peak";
}

// A probe's overrides are its directory, steps and logging only: what it must not do is the
// connector's (callback_connector_test.cpp), not a list of keys to keep in step with the schema.
TEST(RunConfig, ProbeOverridesAreTheProbesDirectoryStepsAndLoggingOnly) {
  ResolvedConfig rc = resolve_config("", {"budget.limit_usd=5", "train.log_every=50"}, {});
  apply_overrides(rc, probe_overrides("/tmp/probes", "p", 3));
  const Config& c = rc.config;
  EXPECT_EQ(c.run.out_dir, "/tmp/probes");
  EXPECT_EQ(c.run.name, "p");
  EXPECT_EQ(c.train.steps, 3);
  EXPECT_EQ(c.train.log_every, 1);
  EXPECT_EQ(c.budget.limit_usd, 5) << "left to TrainerOptions::probe";
}

// Every key of the schema says whether a resume may change it (config_keys.cpp declares it with
// the key): a key added without the decision fails here. The keys the trained state depends on are
// fixed; the knobs of a session may change.
TEST(RunConfig, EveryKeyDeclaresWhetherAResumeMayChangeIt) {
  for (const KeySpec& k : config_schema())
    EXPECT_NE(k.on_resume, KeySpec::OnResume::kUnset) << k.key << " is declared without a resume rule";
  for (const char* fixed : {"run.seed", "model.arch", "model.layers", "model.kv_heads", "model.rope_theta",
                            "model.init_from", "data.source", "data.micro_batch", "train.global_batch",
                            "train.optimizer", "train.lr", "train.schedule", "train.muon_precision"})
    EXPECT_FALSE(resume_may_change(fixed)) << fixed;
  for (const char* may : {"train.steps", "train.eval_every", "checkpoint.every_steps", "budget.limit_usd",
                          "monitor.http", "run.device", "model.kernels", "model.loss_chunk", "track.mlflow_uri"})
    EXPECT_TRUE(resume_may_change(may)) << may;
  EXPECT_FALSE(resume_may_change("no.such_key"));
}

// run.threads = 0 picks a count at start (the doctor's kept choice, else the cores); a resume keeps
// the count the run trained with even when the choice has changed since (another count sums in
// another order: the continuation would not be bitwise).
TEST(RunConfig, AResumeWithAutoThreadsKeepsTheCountTheRunTrainedWith) {
  if (usable_cpu_count() < 2) GTEST_SKIP() << "needs two usable CPUs to tell two thread counts apart";
  test::TempDir dir;
  std::vector<std::string> sets;
  for (const auto& o : test::tiny_overrides(dir.path()))
    if (o != "run.threads=1") sets.push_back(o);
  sets.push_back("checkpoint.every_steps=5");
  save_thread_choice(1, "test: one thread");
  TrainerOptions o = test::quiet_run();
  o.stop_at_step = 10;
  EXPECT_EQ(Trainer(resolve_config("", sets, {}), o).fit()["threads"], 1);
  save_thread_choice(2, "test: two threads");
  TrainerOptions r = test::quiet_run({}, false);
  r.resume = "auto";
  EXPECT_EQ(Trainer(resolve_config("", sets, {}), r).fit()["threads"], 1);
  std::remove(thread_choice_path().c_str());
}

}  // namespace
}  // namespace frugal::run_config_test
