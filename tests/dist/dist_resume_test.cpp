// Data-parallel checkpoints in whole runs: each rank's optimizer shard, a resume on another number
// of processes (elastic), a torn write, and the same steps saved again after a rollback. Each test
// uses its own MASTER_PORT (ctest runs tests in parallel).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "dist_runs.h"
#include "test_util.h"

namespace frugal::dist_resume_test {
namespace {
namespace fs = std::filesystem;
using dist_runs::joined;
using dist_runs::max_abs_diff;
using dist_runs::summary_of;
using dist_runs::train_args;
using test::TempDir;

// The 2-rank run `run` (trained 8 steps, checkpointed at 4 and 8): each rank wrote its own part of
// the optimizer state and of the weights, indexed in state.json; step 8's weights assembled from
// the ranks' files are the final weights, bit for bit, and `frugal sample` reads them as it reads
// final/'s. A damaged part is named, and nothing is sampled from the rest (bad input: exit 2).
void expect_sharded_checkpoints(const TempDir& dir, const std::string& run) {
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000004/" + shard_file_name(r, 2))) << r;
    EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000004/" + shard_file_name(r, 2, kModelShards))) << r;
  }
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step-00000004/optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step-00000004/model.safetensors"));
  const NamedTensors at_8 = checkpoint_weights(run + "/checkpoints/step-00000008");
  const SafetensorsFile final_weights = load_safetensors(run + "/final/model.safetensors");
  ASSERT_EQ(at_8.size(), final_weights.tensors.size());
  for (const auto& [name, t] : at_8) {
    ASSERT_NE(final_weights.find(name), nullptr) << name;
    EXPECT_TRUE(at::equal(t, *final_weights.find(name))) << name;
  }
  const std::string sample = "sample " + run + " --prompt 'line 1' -t 0 --max-tokens 6 --stop '' --json --weights ";
  auto tokens = [](const test::CommandResult& r) {
    const size_t at = r.output.rfind("{\"prompt\"");
    return at == std::string::npos ? nlohmann::json() : nlohmann::json::parse(r.output.substr(at))["tokens"];
  };
  auto from_final = test::run_frugal(sample + run + "/final");
  auto from_shards = test::run_frugal(sample + run + "/checkpoints/step-00000008");
  ASSERT_EQ(from_shards.exit_code, 0) << from_shards.output;
  EXPECT_EQ(tokens(from_shards), tokens(from_final)) << from_shards.output;
  EXPECT_TRUE(tokens(from_final).is_array()) << from_final.output;
  fs::copy(run + "/checkpoints/step-00000008", dir.file("damaged"), fs::copy_options::recursive);
  const std::string part = dir.file("damaged/" + shard_file_name(1, 2, kModelShards));
  test::flip_byte(part, fs::file_size(part) - 3);
  auto damaged = test::run_frugal(sample + dir.file("damaged"));
  EXPECT_EQ(damaged.exit_code, 2) << damaged.output;
  EXPECT_NE(damaged.output.find(shard_file_name(1, 2, kModelShards) + ": xxh3"), std::string::npos) << damaged.output;
}

// The run `again` (a 2-rank checkpoint at step 4) resumed on 1 process to step 6, again on 1 to
// step 7, then on 2 to step 8: its checkpoints hold the global batch of 32 in accumulation 4 on 1
// process, while the config still says train.accum = 2 (for 2 processes). `args`: its resume.
void resume_again(const std::vector<std::string>& args, int port) {
  std::vector<std::string> loud = args;  // the "resume:" lines, which -q keeps off the console
  loud.erase(std::find(loud.begin(), loud.end(), "-q"));
  auto again_6 = test::run_frugal(joined(args) + " --stop-at-step 6");
  ASSERT_EQ(again_6.exit_code, 0) << again_6.output;
  auto again_7 = test::run_frugal(joined(loud) + " --stop-at-step 7");
  ASSERT_EQ(again_7.exit_code, 0) << again_7.output;
  EXPECT_NE(again_7.output.find("resume: accumulation 4 on 1 process(es), as at the checkpoint (not the configured 2)"),
            std::string::npos)
      << again_7.output;
  auto again_8 = test::run_frugal(fmt::format("launch -n 2 --port {} --{}", port, joined(loud)));
  ASSERT_EQ(again_8.exit_code, 0) << again_8.output;
  EXPECT_NE(again_8.output.find("resume: 1 -> 2 process(es): accumulation 4 -> 2 keeps the global batch of 32"),
            std::string::npos)
      << again_8.output;
}

// Elastic resume: a 2-rank run (ZeRO-1 or ZeRO-3, shard data) checkpointed at step 4 (each rank
// writing its shards of the weights and the optimizer state) continues on 1 and on 4 processes with the same global
// batch (accumulation 4 and 1 instead of 2) and ends where the uninterrupted 2-rank run ends; 3 processes cannot split
// its global batch of 32 and are refused before any step. A run resumed again after an elastic resume keeps the
// global batch too: 2 -> 1 process to step 6, 1 -> 1 to step 7 (accumulation 4, not train.accum's 2), then 1 -> 2
// (accumulation 4 -> 2) to step 8. Ports: the full run, the resume on 4, the refused resume on 3, the resume
// again on 2.
void expect_elastic_resume(const std::string& zero, int port_full, int port_four, int port_three, int port_again) {
  TempDir dir;
  std::string corpus;
  for (int i = 0; corpus.size() < 40000; ++i)
    corpus += fmt::format("line {} of the elastic corpus: {}\n", i, i * 7919 % 1000);
  test::write_text(dir.file("corpus.txt"), corpus);
  auto prep = test::run_frugal(fmt::format("prepare '{}' --out '{}' --quiet", dir.file("corpus.txt"), dir.file("ds")));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::vector<std::string> common{"data.source=shards:" + dir.file("ds"),
                                        "train.steps=8",
                                        "train.warmup_steps=2",
                                        "train.eval_every=0",
                                        "checkpoint.every_steps=4",
                                        "checkpoint.keep_last=5",
                                        "dist.zero=" + zero,
                                        "dist.bucket_mb=0.01",
                                        "train.log_every=1"};
  auto with = [&](std::vector<std::string> v, std::initializer_list<std::string> more) {
    v.insert(v.end(), more);
    return v;
  };
  auto full = test::run_frugal(fmt::format("launch -n 2 --port {} --{}", port_full,
                                           joined(train_args(dir.path(), "full", with(common, {"train.accum=2"})))));
  ASSERT_EQ(full.exit_code, 0) << full.output;

  // What a kill right after step 4's checkpoint leaves behind, in a run directory of its own.
  auto killed_after_step_4 = [&](const std::string& name) {
    fs::copy(dir.file("full"), dir.file(name), fs::copy_options::recursive);
    remove_tree(dir.file(name + "/checkpoints/step-00000008"));
    remove_tree(dir.file(name + "/final"));
    fs::remove(dir.file(name + "/summary.json"));
  };
  auto resume_args = [&](const std::string& name) {
    auto a = train_args(dir.path(), name, with(common, {"train.accum=2"}));
    a.push_back("--resume");
    a.push_back("auto");
    return a;
  };
  expect_sharded_checkpoints(dir, dir.file("full"));
  killed_after_step_4("one");
  auto one = test::run_frugal(joined(resume_args("one")));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  killed_after_step_4("four");
  // A kill in the middle of step 8's write: its directory renamed but not marked complete, rank 1's
  // file not moved in yet (still staged by a process that is gone). The newest sound checkpoint,
  // step 4, is used; step 8 is written again and the staged file removed.
  const std::string torn = dir.file("four/checkpoints/step-00000008");
  fs::copy(dir.file("full/checkpoints/step-00000008"), torn, fs::copy_options::recursive);
  fs::remove(torn + "/COMPLETE");
  fs::create_directories(dir.file("four/checkpoints/.tmp-step-00000008-999999-s1"));
  fs::rename(torn + "/" + shard_file_name(1, 2),
             dir.file("four/checkpoints/.tmp-step-00000008-999999-s1/" + shard_file_name(1, 2)));
  auto four = test::run_frugal(fmt::format("launch -n 4 --port {} --{}", port_four, joined(resume_args("four"))));
  ASSERT_EQ(four.exit_code, 0) << four.output;
  killed_after_step_4("again");
  resume_again(resume_args("again"), port_again);

  const auto s_full = summary_of(dir.file("full"));
  const auto losses_full = test::step_losses(dir.file("full/metrics.jsonl"));
  ASSERT_EQ(losses_full.size(), 8u);
  for (const char* name : {"one", "four", "again"}) {
    // fp32 sums in another order (one process sums 4 micro-batches, 4 ranks all-reduce 4): measured
    // ~1e-7 after 4 more AdamW steps; data in another order would move the weights by ~1e-3.
    EXPECT_LT(max_abs_diff(dir.file("full/final/model.safetensors"),
                           dir.file(std::string(name) + "/final/model.safetensors")),
              1e-5)
        << name;
    const auto losses = test::step_losses(dir.file(std::string(name) + "/metrics.jsonl"));
    ASSERT_EQ(losses.size(), 8u) << name;
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(losses[i], losses_full[i], 1e-5) << name << " step " << i + 1;
    const auto s = summary_of(dir.file(name));
    EXPECT_EQ(s["tokens"], s_full["tokens"]) << name;
    EXPECT_EQ(s["global_batch"], s_full["global_batch"]) << name;
  }
  EXPECT_EQ(summary_of(dir.file("one"))["accum"], 4);
  EXPECT_EQ(summary_of(dir.file("four"))["accum"], 1);
  EXPECT_EQ(summary_of(dir.file("again"))["accum"], 2);
  EXPECT_NE(summary_of(dir.file("four"))["checkpoint"]["resumed_from"].get<std::string>().find("step-00000004"),
            std::string::npos);
  EXPECT_EQ(verify_checkpoint(torn), "");  // rewritten by the 4 ranks, one file each
  for (int64_t r = 0; r < 4; ++r) EXPECT_TRUE(fs::exists(torn + "/" + shard_file_name(r, 4))) << r;
  EXPECT_FALSE(fs::exists(dir.file("four/checkpoints/.tmp-step-00000008-999999-s1")));
  EXPECT_FALSE(fs::exists(dir.file("one/checkpoints/step-00000008/optimizer-00000-of-00001.safetensors")))
      << "one process writes optimizer.safetensors";
  if (zero == "3") {
    auto total = [&](const char* name) {
      return summary_of(dir.file(name))["state_bytes_per_rank"]["total"].get<double>();
    };
    EXPECT_LE(total("full"), 0.6 * total("one"));
    EXPECT_LE(total("four"), 0.35 * total("one"));
  }

  killed_after_step_4("three");
  auto three = test::run_frugal(fmt::format("launch -n 3 --port {} --{}", port_three, joined(resume_args("three"))));
  EXPECT_EQ(three.exit_code, 2) << three.output;
  EXPECT_NE(three.output.find("resume with 1, 2, 4 process(es)"), std::string::npos) << three.output;
  for (const auto& c : list_checkpoints(dir.file("three/checkpoints"))) EXPECT_LE(c.step, 4) << c.path;
}

TEST(DistTrain, ACheckpointOfTwoRanksResumesOnOneAndOnFourWithTheSameGlobalBatch) {
  expect_elastic_resume("1", 29670, 29671, 29672, 29682);
}

// ZeRO-3's checkpoint holds each rank's pieces of the weights and of the moments as ZeRO-1's does
// (the shards of gradients, ZeRO-2's too, are never saved), so the run reshards on any world size. Its
// state per rank against one process's (which keeps everything): at most 0.6x on 2 ranks, 0.35x
// on 4.
TEST(DistTrain, AZero3CheckpointOfTwoRanksResumesOnOneAndOnFour) {
  expect_elastic_resume("3", 29679, 29680, 29681, 29699);
}

// The divergence guard on 2 ZeRO-1 ranks: every window after the first is a forced "spike", so
// the run rolls back to step 5 twice and saves the same steps again, each rank writing its
// optimizer shard each time. Rank 0 must take each rank's report of this save, not of the first
// save of that step (a stale report names a staged file already moved in: the write failed).
TEST(DistTrain, ARollbackOnTwoZeroRanksSavesTheSameStepsAgainFromEachRanksNewShard) {
  TempDir dir;
  auto r = test::run_frugal(
      "launch -n 2 --port 29696 --" +
      joined(train_args(dir.path(), "guard",
                        {"dist.zero=1", "guard.spike_factor=0.5", "guard.spike_windows=1", "guard.max_rollbacks=2",
                         "checkpoint.every_steps=5", "train.eval_every=0", "checkpoint.keep_last=10"})));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const auto s = summary_of(dir.file("guard"));
  EXPECT_EQ(s["stop_kind"], "guard");
  ASSERT_EQ(s["rollbacks"].size(), 2u) << s.dump();
  const auto list = list_checkpoints(dir.file("guard/checkpoints"));
  ASSERT_FALSE(list.empty());
  for (const auto& c : list) {
    EXPECT_EQ(verify_checkpoint(c.path), "") << c.path;
    EXPECT_TRUE(fs::exists(c.path + "/" + shard_file_name(1, 2))) << c.path;
  }
  for (const auto& e : fs::directory_iterator(dir.file("guard/checkpoints")))
    EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path() << " left behind";
}

}  // namespace
}  // namespace frugal::dist_resume_test
