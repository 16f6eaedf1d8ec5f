// Every command on the Llama family, end to end through the CLI: train (arch from the command
// line), sample with the KV cache, export, report and compare against a GPT run, smoke, plan,
// tune, and a search whose space holds the family itself. The numbers against transformers are
// tests/interop/hf_llama_check.py; these check that no command is GPT-only.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace frugal::llama_cli_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const char* kLlama =
    " --set model.arch=llama --set model.heads=4 --set model.kv_heads=2 --set model.tie_embeddings=false";

json summary(const std::string& run) { return json::parse(test::read_text(run + "/summary.json")); }

TEST(LlamaCli, TrainSampleExportReportAndCompare) {
  test::TempDir dir;
  auto r = test::run_frugal("train --quiet" + test::tiny_sets(dir.path()) + kLlama + " --set run.name=llama");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json s = summary(dir.file("llama"));
  EXPECT_EQ(s["stop_kind"], "completed");
  EXPECT_NE(s["model"].get<std::string>().find("Llama 1 layers, 4 heads (2 kv)"), std::string::npos) << s["model"];
  EXPECT_NE(s["model"].get<std::string>().find("untied head"), std::string::npos);
  EXPECT_GT(s["flops_per_token"].get<double>(), 0);
  EXPECT_TRUE(s.contains("answer_accuracy"));  // the arith accuracy decodes with the KV cache

  r = test::run_frugal("sample " + dir.file("llama") + " --prompt '12+7=' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(json::parse(r.output.substr(r.output.find('{')))["tokens"].empty());

  r = test::run_frugal("export " + dir.file("llama") + " --out " + dir.file("hf") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cfg = json::parse(test::read_text(dir.file("hf/config.json")));
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);

  r = test::run_frugal("report " + dir.file("llama"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(test::read_text(dir.file("llama/report.html")).find("id='model'>Model: <b>Llama"), std::string::npos);

  r = test::run_frugal("train --quiet" + test::tiny_sets(dir.path()) + " --set run.name=gpt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_frugal("compare " + dir.file("gpt") + " " + dir.file("llama"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model  A: GPT 1 layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("B: Llama 1 layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.arch"), std::string::npos) << r.output;
}

TEST(LlamaCli, SmokePlanAndTuneTakeTheLlamaFamily) {
  test::TempDir dir;
  auto r = test::run_frugal("smoke" + test::tiny_sets(dir.path()) + kLlama);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("compare     ok"), std::string::npos) << r.output;
  r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + kLlama +
                       " --set plan.probe_steps=3 --set train.steps=200 --json-out " + dir.file("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(json::parse(test::read_text(dir.file("plan.json")))["seconds"]["central"].get<double>(), 0);
  r = test::run_frugal(
      "tune" + test::tiny_sets(dir.path()) + kLlama +
      " --set train.steps=100000 --set tune.probe_steps=2 --set tune.max_fraction=1 --set tune.rounds=1 "
      "--set tune.loss_check_steps=8 --out " +
      dir.file("tuned.toml") + " --json-out " + dir.file("tune.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json tuned = json::parse(test::read_text(dir.file("tune.json")));
  ASSERT_TRUE(tuned["chosen"].is_string()) << tuned.dump(1);
  EXPECT_NE(test::read_text(dir.file("tuned.toml")).find("arch = 'llama'"), std::string::npos);
}

// The family as a search axis: both trials train, each its own architecture.
TEST(LlamaCli, ASearchCanRankTheFamiliesAgainstEachOther) {
  test::TempDir dir;
  test::write_text(
      dir.file("base.toml"),
      "[run]\nthreads = 1\n[model]\nlayers = 1\nheads = 4\nembd = 32\nblock = 16\n[data]\nmicro_batch = 8\n"
      "arith_lines = 2000\n[train]\nsteps = 20\nwarmup_steps = 2\neval_every = 10\neval_batches = 2\n"
      "answer_samples = 0\n[precision]\nmode = \"fp32\"\n");
  test::write_text(dir.file("space.toml"),
                   "[search]\nbase = \"base.toml\"\nseed = 3\nmax_trials = 2\nrungs = 1\n[space]\n"
                   "\"model.arch\" = [\"gpt\", \"llama\"]\n");
  auto r = test::run_frugal("search " + dir.file("space.toml") + " --out " + dir.file("s") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> models;
  for (const auto& e : fs::recursive_directory_iterator(dir.file("s")))
    if (e.path().filename() == "summary.json" && fs::exists(e.path().parent_path() / "metrics.jsonl"))
      models.insert(json::parse(test::read_text(e.path().string()))["model"].get<std::string>().substr(0, 5));
  EXPECT_EQ(models, (std::set<std::string>{"GPT 1", "Llama"})) << r.output;
}

}  // namespace
}  // namespace frugal::llama_cli_test
