// Out-of-memory back-off in the training step, with the failure injected by the counting
// allocator's limit (memory.limit_mb): the run halves its micro-batch, completes, and ends with
// the weights of a run configured with the halved micro-batch from the start.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/compat.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/memory.h"
#include "frugal/data/prepare.h"
#include "frugal/train/trainer.h"
#include "frugal/tune/batch_finder.h"
#include "test_util.h"

namespace frugal::oom_backoff_test {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

std::string make_dataset(const test::TempDir& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += fmt::format("Document {}: {} plus {} is {}; the fox {} jumps over {} dogs.\n\n", i, i * 13 % 97, i * 7 % 89,
                        i * 13 % 97 + i * 7 % 89, i % 11, i % 5);
  test::write_text(dir.file("corpus.txt"), text);
  PrepareOptions o;
  o.inputs = {dir.file("corpus.txt")};
  o.out_dir = dir.file("ds");
  o.val_fraction = 0.1;
  o.threads = 1;
  prepare_dataset(o);
  return "shards:" + dir.file("ds");
}

std::vector<std::string> run_sets(const test::TempDir& dir, const std::string& source, const std::string& name,
                                  int64_t micro, const std::vector<std::string>& model = {}) {
  std::vector<std::string> sets = {"run.out_dir=" + dir.path(),
                                   "run.name=" + name,
                                   "run.threads=1",
                                   "model.layers=2",
                                   "model.heads=2",
                                   "model.embd=64",
                                   "model.block=64",
                                   "data.source=" + source,
                                   "data.workers=0",
                                   fmt::format("data.micro_batch={}", micro),
                                   "train.global_batch=16",
                                   "train.steps=4",
                                   "train.warmup_steps=1",
                                   "train.eval_every=0",
                                   "train.eval_batches=1",
                                   "train.log_every=1",
                                   "checkpoint.enabled=false",
                                   "guard.enabled=false",
                                   "precision.mode=fp32"};
  sets.insert(sets.end(), model.begin(), model.end());
  return sets;
}

void expect_backoff_matches_the_halved_run(const std::vector<std::string>& model) {
  test::TempDir dir;
  const std::string source = make_dataset(dir);
  install_counting_allocator();
  // A limit between the measured peaks of micro-batches 8 and 16: 16 cannot fit, 8 can.
  const Config probe = resolve_config("", run_sets(dir, source, "probe", 16, model), {}).config;
  const int64_t p8 = probe_training_memory(probe, 8, 0).peak_bytes;
  const int64_t p16 = probe_training_memory(probe, 16, 0).peak_bytes;
  ASSERT_GT(p16 - p8, 4 * kMiB) << "the model is too small for a MiB-granular limit";
  const int64_t limit_mb = (tensor_bytes_now() + (p8 + p16) / 2) / kMiB;

  std::vector<std::string> a = run_sets(dir, source, "backoff", 16, model);
  a.push_back(fmt::format("memory.limit_mb={}", limit_mb));
  TrainerOptions opts;
  opts.quiet = true;
  nlohmann::json sa = Trainer(resolve_config("", a, {}), opts).fit();
  EXPECT_EQ(tensor_bytes_limit(), 0) << "the trainer leaves the limit behind";
  nlohmann::json sb = Trainer(resolve_config("", run_sets(dir, source, "halved", 8, model), {}), opts).fit();

  EXPECT_EQ(sa["stop_kind"], "completed");
  EXPECT_EQ(sa["oom_backoffs"], 1);
  EXPECT_EQ(sa["micro_batch_effective"], 8);
  EXPECT_EQ(sa["accum_effective"], 2);
  EXPECT_EQ(sb["oom_backoffs"], 0);
  EXPECT_EQ(sa["tokens"], sb["tokens"]) << "data lost or repeated";
  // The back-off is in the metrics from the step it happened on.
  std::ifstream metrics(dir.file("backoff/metrics.jsonl"));
  std::string line;
  std::getline(metrics, line);
  nlohmann::json first = nlohmann::json::parse(line);
  EXPECT_EQ(first["oom_backoffs"], 1);
  EXPECT_EQ(first["micro_batch"], 8);

  const SafetensorsFile wa = load_safetensors(dir.file("backoff/final/model.safetensors"));
  const SafetensorsFile wb = load_safetensors(dir.file("halved/final/model.safetensors"));
  ASSERT_EQ(wa.tensors.size(), wb.tensors.size());
  for (size_t i = 0; i < wa.tensors.size(); ++i) {
    ASSERT_EQ(wa.tensors[i].first, wb.tensors[i].first);
    // fp32, the same operations on the same rows in the same order: equal up to rounding noise.
    const double diff = (wa.tensors[i].second - wb.tensors[i].second).abs().max().item<double>();
    EXPECT_LE(diff, 1e-6) << wa.tensors[i].first;
  }
}

TEST(OomBackoff, RunThatDoesNotFitBacksOffAndMatchesTheHalvedRunFromTheStart) {
  expect_backoff_matches_the_halved_run({});
}

// The Llama family backs off alike (its chunked loss and grouped attention allocate per
// micro-batch too).
TEST(OomBackoff, ALlamaRunBacksOffAndMatchesTheHalvedRunToo) {
  expect_backoff_matches_the_halved_run({"model.arch=llama", "model.heads=4", "model.kv_heads=2"});
}

TEST(OomBackoff, MicroBatchThatCannotHalveRethrowsTheError) {
  test::TempDir dir;
  const std::string source = make_dataset(dir);
  install_counting_allocator();
  std::vector<std::string> sets = run_sets(dir, source, "odd", 3);
  sets.push_back("train.global_batch=3");
  const Config probe = resolve_config("", sets, {}).config;
  const int64_t p1 = probe_training_memory(probe, 1, 0).peak_bytes;
  // Room for the model and about one sequence, not three.
  sets.push_back(fmt::format("memory.limit_mb={}", (tensor_bytes_now() + p1 + kMiB / 2) / kMiB));
  TrainerOptions opts;
  opts.quiet = true;
  try {
    Trainer(resolve_config("", sets, {}), opts).fit();
    FAIL() << "the run did not fail";
  } catch (const std::exception& e) {
    EXPECT_TRUE(compat::is_out_of_memory(e)) << e.what();
  }
  EXPECT_EQ(tensor_bytes_limit(), 0);
}

}  // namespace
}  // namespace frugal::oom_backoff_test
