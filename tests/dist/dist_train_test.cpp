// Whole data-parallel runs: `frugal train` processes on localhost, 2 ranks, against a single
// process with the same global batch; a rank that dies or never arrives; a stop signal on one rank.
// Each test uses its own MASTER_PORT (ctest runs tests in parallel).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <random>
#include <set>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/safetensors.h"
#include "frugal/core/atomic_file.h"
#include "frugal/data/tokenizer.h"
#include "dist_runs.h"
#include "test_util.h"

namespace frugal::dist_train_test {
namespace {
namespace fs = std::filesystem;
using dist_runs::joined;
using dist_runs::max_abs_diff;
using dist_runs::summary_of;
using dist_runs::train_args;
using test::TempDir;

// A `frugal` process started with extra environment variables; output goes to `log`.
struct Proc {
  pid_t pid = -1;
  std::string log;
};

Proc spawn(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
           const std::string& log) {
  Proc p;
  p.log = log;
  p.pid = fork();
  if (p.pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), fileno(stderr));
    std::vector<char*> argv{const_cast<char*>(FRUGAL_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(FRUGAL_BINARY, argv.data());
    _exit(127);
  }
  return p;
}

// Exit code (128 + signal when killed), or -1 if it did not end within `limit_s` (then killed).
int wait_for(const Proc& p, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(p.pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// ctest runs tests side by side: every test here rendezvouses on a port no other test uses.
std::vector<std::pair<std::string, std::string>> rank_env(int rank, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", "2"},
          {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

// Returns once rank 0 has logged a step (training has begun on every rank), and 200 ms more.
void wait_for_training(const std::string& run_dir) {
  for (int i = 0; i < 3000 && !fs::exists(run_dir + "/metrics.jsonl"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

// Two ranks with train.accum = 2 each consume, per step, exactly the micro-batches of one process
// with accum = 4 (data_parallel.h), so the weights agree up to fp32 summation order.
void expect_matches_single_process(int port, const std::string& zero, const std::string& optimizer = "fused_adamw",
                                   const std::vector<std::string>& model = {}) {
  TempDir dir;
  std::vector<std::string> common{"train.steps=6", "train.warmup_steps=2", "dist.zero=" + zero, "dist.bucket_mb=0.01",
                                  "train.optimizer=" + optimizer};
  common.insert(common.end(), model.begin(), model.end());
  // Muon's Newton-Schulz in fp32: in bf16 (auto on some CPUs) a last-bit difference of a gradient
  // (the all-reduce sums in another order) can round the iteration differently, which is not what
  // this test is about.
  if (optimizer == "muon") common.push_back("train.muon_precision=fp32");
  auto single = common;
  single.push_back("train.accum=4");
  auto r1 = test::run_frugal(joined(train_args(dir.path(), "single", single)));
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto dp = common;
  dp.push_back("train.accum=2");
  auto r2 = test::run_frugal(fmt::format("launch -n 2 --port {} --{}", port, joined(train_args(dir.path(), "dp", dp))));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;

  const std::string a = dir.file("single/final/model.safetensors"), b = dir.file("dp/final/model.safetensors");
  // Measured: ~1e-7 after 6 AdamW steps at lr 3e-3; 1e-5 leaves room for another BLAS, while a
  // wrong batch split or a missing average moves weights by ~1e-3.
  EXPECT_LT(max_abs_diff(a, b), 1e-5);
  const auto s1 = summary_of(dir.file("single")), s2 = summary_of(dir.file("dp"));
  EXPECT_NEAR(s1["final_train_loss"].get<double>(), s2["final_train_loss"].get<double>(), 1e-5);
  EXPECT_EQ(s1["tokens"], s2["tokens"]);  // the same global batch
  EXPECT_EQ(s2["dist"]["world_size"], 2);
  EXPECT_EQ(s2["dist"]["zero"], std::stoi(zero));
  EXPECT_LE(s2["dist"]["comm_fraction"].get<double>(), 1.0) << "communication counted outside the steps";
  if (zero == "1" && optimizer == "muon") {
    // Half of the AdamW moments and the momentum of rank 0's own matrices: well under 3/4 of the
    // whole state, where the whole momentum on every rank would be near 9/10 of it here.
    EXPECT_LT(s2["optimizer_state_mb"].get<double>(), 0.75 * s1["optimizer_state_mb"].get<double>());
    EXPECT_GT(s2["optimizer_state_mb"].get<double>(), 0.25 * s1["optimizer_state_mb"].get<double>());
  } else if (zero != "0") {  // each rank keeps half of the AdamW moments (and padding)
    EXPECT_NEAR(s2["optimizer_state_mb"].get<double>(), s1["optimizer_state_mb"].get<double>() / 2, 2e-4);
  } else {
    EXPECT_DOUBLE_EQ(s2["optimizer_state_mb"].get<double>(), s1["optimizer_state_mb"].get<double>());
  }
  // What rank 0 holds: the whole parameters (ZeRO-3: half of the blocks' and the rest whole); half
  // of the gradients at ZeRO-2 and 3 (its shard), all of them below; the optimizer's state as above.
  const auto& st1 = s1["state_bytes_per_rank"];
  const auto& st2 = s2["state_bytes_per_rank"];
  if (zero == "3") {
    int64_t block_bytes = 0;  // the blocks' parameters: "h<i>." in frugal's names
    std::set<std::string> blocks;
    for (const auto& [name, t] : load_safetensors(b).tensors)
      if (name.size() > 1 && name[0] == 'h' && std::isdigit(static_cast<unsigned char>(name[1]))) {
        block_bytes += t.numel() * static_cast<int64_t>(t.element_size());
        blocks.insert(name.substr(0, name.find('.')));
      }
    ASSERT_GT(block_bytes, 0);
    EXPECT_NEAR(st2["parameters"].get<double>(), st1["parameters"].get<double>() - block_bytes / 2.0, 64)
        << "a ZeRO-3 rank keeps more than its half of the blocks' parameters";
    // Each block gathered for its forward and again for its backward, per micro-batch (accum 2;
    // activation checkpointing's recompute reads the block its backward gathered). The training
    // steps' alone: the final evaluation's gathers (2 batches x 2 blocks, measured 52 in all
    // before they were counted apart) are not spread over the 6 steps.
    EXPECT_DOUBLE_EQ(s2["dist"]["block_gathers_per_step"].get<double>(), 4.0 * static_cast<double>(blocks.size()));
    EXPECT_EQ(s2["dist"]["block_gathers_outside_steps"].get<int64_t>(), 2 * static_cast<int64_t>(blocks.size()));
  } else {
    EXPECT_EQ(st2["parameters"], st1["parameters"]);
  }
  const double grads = st2["gradients"].get<double>(), whole = st1["gradients"].get<double>();
  if (zero == "2" || zero == "3") {
    EXPECT_NEAR(grads, whole / 2, 64) << "a ZeRO-2 rank holds more than its shard of the gradients";
  } else {
    EXPECT_GE(grads, whole);
  }
  EXPECT_EQ(st2["total"].get<int64_t>(),
            st2["parameters"].get<int64_t>() + st2["gradients"].get<int64_t>() + st2["optimizer"].get<int64_t>());
  // Rank 0 alone wrote the run; only one metrics file exists.
  EXPECT_TRUE(fs::exists(dir.file("dp/metrics.jsonl")));
}

TEST(DistTrain, TwoRanksMatchOneProcessWithTheSameGlobalBatch) { expect_matches_single_process(29660, "0"); }

TEST(DistTrain, TwoRanksWithZero1MatchOneProcessWithTheSameGlobalBatch) { expect_matches_single_process(29661, "1"); }

// ZeRO-2: gradients reduced to their owners' shards during backward, every micro-batch.
TEST(DistTrain, TwoRanksWithZero2MatchOneProcessWithTheSameGlobalBatch) { expect_matches_single_process(29677, "2"); }

// ZeRO-2 with the optimizer in host memory (dist.offload, both sides): each rank's moments and
// its chunk's update on the host, the chunk copied back before the parameters' all-gather.
TEST(DistTrain, TwoRanksWithZero2AndTheOptimizerOffloadedMatchOneProcess) {
  expect_matches_single_process(29683, "2", "fused_adamw", {"dist.offload=optimizer"});
}

// ZeRO-2 on the Llama family with activation checkpointing: recomputed blocks produce their
// gradients late, in their own order; the buckets still reach their owners complete.
TEST(DistTrain, TwoLlamaRanksWithZero2AndActivationCheckpointingMatchOneProcess) {
  expect_matches_single_process(29678, "2", "fused_adamw",
                                {"model.arch=llama", "model.heads=4", "model.kv_heads=2", "model.tie_embeddings=false",
                                 "memory.activation_checkpointing=blocks"});
}

// ZeRO-3: the blocks' parameters sharded too, each block gathered before its forward and again
// before its backward (two blocks, accumulation 2).
TEST(DistTrain, TwoRanksWithZero3MatchOneProcessWithTheSameGlobalBatch) {
  expect_matches_single_process(29684, "3", "fused_adamw", {"model.layers=2"});
}

// ZeRO-3 on the Llama family with activation checkpointing: the recompute in the backward runs
// on the re-gathered block.
TEST(DistTrain, TwoLlamaRanksWithZero3AndActivationCheckpointingMatchOneProcess) {
  expect_matches_single_process(29685, "3", "fused_adamw",
                                {"model.arch=llama", "model.layers=2", "model.heads=4", "model.kv_heads=2",
                                 "model.tie_embeddings=false", "memory.activation_checkpointing=blocks"});
}

// Muon: its gradients per matrix are all-reduce buckets of their own beside the AdamW part's flat
// buffer; every rank keeps the whole state and steps it alike.
TEST(DistTrain, TwoRanksWithMuonMatchOneProcessWithTheSameGlobalBatch) {
  expect_matches_single_process(29667, "0", "muon");
}

// Muon with ZeRO-1: each rank steps and keeps its own matrices (train/muon.h, MuonShards).
TEST(DistTrain, TwoRanksWithMuonAndZero1MatchOneProcessWithTheSameGlobalBatch) {
  expect_matches_single_process(29668, "1", "muon");
}

// Muon with ZeRO-1 at the default dist.bucket_mb (4), two layers: buckets then span several
// matrices of a stack (0.01 MB above keeps every matrix in a bucket of its own, and one layer has
// one matrix of each shape), so a rank whose gradients were laid out unlike the other's (stacks of
// its own matrices only) would issue all-reduces of other sizes, in another order.
TEST(DistTrain, TwoRanksWithMuonAndZero1AtTheDefaultBucketSizeMatchOneProcess) {
  expect_matches_single_process(29698, "1", "muon", {"dist.bucket_mb=4", "model.layers=2"});
}

// The Llama family under data parallel and ZeRO-1: grouped heads, an untied head (its own
// gradient bucket) and the chunked loss's gradients reduced as any other.
TEST(DistTrain, TwoLlamaRanksWithZero1MatchOneProcessWithTheSameGlobalBatch) {
  expect_matches_single_process(
      29669, "1", "fused_adamw",
      {"model.arch=llama", "model.heads=4", "model.kv_heads=2", "model.tie_embeddings=false"});
}

// Token-weighted loss under data parallel (train_step.cpp): packed chat-like documents whose
// micro-batches hold very different numbers of targets. Two ranks of micro-batch 2 with accum 2 and
// one process with one micro-batch of 8 train on the same rows each step; the step's loss is the
// mean over all its targets in both (the mean of four micro-batches' means would not be), so the
// weights and losses agree.
TEST(DistTrain, TwoRanksOfRaggedDocumentsMatchOneProcessOverAllTargets) {
  TempDir dir;
  std::mt19937 rng(7);
  const auto docs = [&](int count) {
    std::vector<MaskedDocument> out(static_cast<size_t>(count));
    for (auto& d : out) {
      const auto n = static_cast<int64_t>(3 + rng() % 30), prompt = static_cast<int64_t>(rng() % n);
      for (int64_t t = 0; t < n; ++t) {
        d.ids.push_back(static_cast<int32_t>(1 + rng() % 63));
        d.mask.push_back(t >= prompt ? 1 : 0);
      }
    }
    return out;
  };
  fs::create_directories(dir.file("docs"));
  test::write_documents_dataset(dir.file("docs"), docs(96), docs(8), 64);
  const std::vector<std::string> common{"data.source=shards:" + dir.file("docs"),
                                        "model.block=32",
                                        "train.steps=6",
                                        "train.warmup_steps=2",
                                        "train.answer_samples=0",
                                        "dist.bucket_mb=0.01"};
  auto single = common, dp = common;
  single.insert(single.end(), {"data.micro_batch=8", "train.accum=1"});
  dp.insert(dp.end(), {"data.micro_batch=2", "train.accum=2"});
  auto r1 = test::run_frugal(joined(train_args(dir.path(), "single", single)));
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 =
      test::run_frugal(fmt::format("launch -n 2 --port {} --{}", 29676, joined(train_args(dir.path(), "dp", dp))));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_LT(max_abs_diff(dir.file("single/final/model.safetensors"), dir.file("dp/final/model.safetensors")), 1e-5);
  const auto s1 = summary_of(dir.file("single")), s2 = summary_of(dir.file("dp"));
  EXPECT_NEAR(s1["final_train_loss"].get<double>(), s2["final_train_loss"].get<double>(), 1e-5);
  EXPECT_NEAR(s1["final_val_loss"].get<double>(), s2["final_val_loss"].get<double>(), 1e-5);
}

// train.freeze under data parallel and ZeRO-1: the frozen tensors are in no bucket and no shard,
// and the rest still matches one process (and the optimizer state is half of its, per rank).
TEST(DistTrain, TwoRanksWithFrozenTensorsAndZero1MatchOneProcessWithTheSameGlobalBatch) {
  expect_matches_single_process(29673, "1", "fused_adamw", {"train.freeze=transformer.h.0.*, transformer.wpe.weight"});
}

// LoRA under data parallel: only the adapters' gradients are reduced (the base is in no bucket),
// over an NF4 base and with activation checkpointing (the blocks' products, dequantisation
// included, recomputed in the backward); with ZeRO-1 and with Muon (whose matrices are the
// adapters).
TEST(DistTrain, TwoRanksOfQloraWithActivationCheckpointingAndZero1MatchOneProcess) {
  expect_matches_single_process(29674, "1", "fused_adamw",
                                {"lora.rank=4", "lora.base_dtype=nf4", "memory.activation_checkpointing=blocks"});
}

TEST(DistTrain, TwoRanksOfLoraWithMuonMatchOneProcess) {
  expect_matches_single_process(29675, "0", "muon", {"lora.rank=4", "lora.dora=true"});
}

TEST(DistTrain, PeerThatNeverArrivesFailsWithinTheTimeout) {
  TempDir dir;
  // Rank 0 of 2 alone: the rendezvous must give up after dist.timeout_s with a clear message.
  auto args = train_args(dir.path(), "alone", {"dist.timeout_s=2"});
  Proc p = spawn(args, rank_env(0, 29662), dir.file("rank0.log"));
  const int code = wait_for(p, 60);
  const std::string log = test::read_text(dir.file("rank0.log"));
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("rank 0 of 2"), std::string::npos) << log;
  EXPECT_NE(log.find("dist.timeout_s = 2"), std::string::npos) << log;
}

TEST(DistTrain, KilledRankMakesTheOtherFailClearlyAndResumeContinues) {
  TempDir dir;
  const std::vector<std::string> extra{"train.steps=100000", "checkpoint.every_steps=2", "dist.timeout_s=20",
                                       "train.eval_every=0"};
  auto args = train_args(dir.path(), "crash", extra);
  Proc r0 = spawn(args, rank_env(0, 29663), dir.file("rank0.log"));
  Proc r1 = spawn(args, rank_env(1, 29663), dir.file("rank1.log"));
  const std::string root = dir.file("crash/checkpoints");
  // Wait for a complete checkpoint, then kill rank 1 without warning.
  bool saved = false;
  for (int i = 0; i < 3000 && !saved; ++i) {
    for (const auto& c : list_checkpoints(root)) saved = saved || (c.complete && c.step >= 4);
    if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(saved) << test::read_text(dir.file("rank0.log"));
  kill(r1.pid, SIGKILL);
  EXPECT_EQ(wait_for(r1, 10), 128 + SIGKILL);
  const int code = wait_for(r0, 60);  // dist.timeout_s = 20 bounds it; a closed socket is seen at once
  const std::string log = test::read_text(dir.file("rank0.log"));
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("rank 0 of 2"), std::string::npos) << log;
  EXPECT_NE(log.find("failed"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume auto"), std::string::npos) << log;

  // The newest complete checkpoint is intact, and a resumed 2-rank run continues from it.
  auto list = list_checkpoints(root);
  int64_t newest = -1;
  for (const auto& c : list)
    if (c.complete && newest < 0) {
      EXPECT_EQ(verify_checkpoint(c.path), "") << c.path;
      newest = c.step;
    }
  ASSERT_GE(newest, 4);
  auto resume =
      train_args(dir.path(), "crash",
                 {"checkpoint.every_steps=2", "train.eval_every=0", "train.steps=" + std::to_string(newest + 4)});
  resume.push_back("--resume");
  resume.push_back("auto");
  auto r = test::run_frugal("launch -n 2 --port 29664 --" + joined(resume));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = summary_of(dir.file("crash"));
  EXPECT_EQ(s["steps"].get<int64_t>(), newest + 4);
  EXPECT_NE(s["checkpoint"]["resumed_from"].get<std::string>().find(checkpoint_dir_name(newest)), std::string::npos);
}

TEST(DistTrain, StopSignalOnOneRankStopsBothWithACheckpoint) {
  TempDir dir;
  auto args = train_args(dir.path(), "sig", {"train.steps=100000", "train.eval_every=0", "checkpoint.every_minutes=0"});
  Proc r0 = spawn(args, rank_env(0, 29665), dir.file("rank0.log"));
  Proc r1 = spawn(args, rank_env(1, 29665), dir.file("rank1.log"));
  // Training has begun once rank 0 logged a step.
  wait_for_training(dir.file("sig"));
  kill(r1.pid, SIGUSR1);  // only rank 1 is told
  EXPECT_EQ(wait_for(r1, 60), 75) << test::read_text(dir.file("rank1.log"));
  EXPECT_EQ(wait_for(r0, 60), 75) << test::read_text(dir.file("rank0.log"));
  const auto s = summary_of(dir.file("sig"));
  EXPECT_EQ(s["stop_kind"], "preempted");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("rank 1: stop signal"), std::string::npos) << s.dump();
  const auto list = list_checkpoints(dir.file("sig/checkpoints"));
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list.front().step, s["steps"].get<int64_t>());
  EXPECT_EQ(verify_checkpoint(list.front().path), "");
}

// A rank stopped by SIGSTOP (a suspended job, a debugger) neither exits nor answers: the other
// rank must fail within dist.timeout_s (plus the heartbeat check) and name the stopped rank.
TEST(DistTrain, AStoppedRankIsNamedByTheOther) {
  TempDir dir;
  auto args = train_args(dir.path(), "stopped", {"train.steps=100000", "train.eval_every=0", "dist.timeout_s=4"});
  Proc r0 = spawn(args, rank_env(0, 29666), dir.file("rank0.log"));
  Proc r1 = spawn(args, rank_env(1, 29666), dir.file("rank1.log"));
  wait_for_training(dir.file("stopped"));
  kill(r1.pid, SIGSTOP);
  const int code = wait_for(r0, 60);
  kill(r1.pid, SIGKILL);
  kill(r1.pid, SIGCONT);
  wait_for(r1, 10);
  const std::string log = test::read_text(dir.file("rank0.log"));
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("rank 0 of 2"), std::string::npos) << log;
  EXPECT_NE(log.find("Rank 1 is not answering"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume auto"), std::string::npos) << log;
}

}  // namespace
}  // namespace frugal::dist_train_test
