// ZeRO-3 (dist.zero = 3) in whole `frugal launch -n 2` runs, beyond the cases dist_train_test.cpp
// runs for every stage.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <tuple>

#include "dist_runs.h"
#include "test_util.h"

namespace frugal::zero3_train_test {
namespace {
using dist_runs::joined;
using dist_runs::launched;
using dist_runs::max_abs_diff;
using dist_runs::summary_of;
using dist_runs::train_args;

// bf16 under autocast: each block's matrices are gathered as their bf16 copy alone, which the
// products read. With gradient clipping off, ZeRO-3 computes what ZeRO-2 computes on the same two
// ranks (the same casts of the same fp32 weights, the same sums of two gradients): measured equal
// here, bounded at 1e-5 because a BLAS may round a product of other-aligned operands differently
// (the buffers differ by stage), while stale or misplaced copies move weights by ~1e-3. The same
// run in fp32 gathers the same buffers at the same points (evaluation, which runs without
// autocast, and the final weights gather fp32 in both), so the bf16 run's bytes plus its copies' bytes
// again (their fp32 width) are the fp32 run's: the matrices went as bf16 alone, not beside fp32.
TEST(Zero3Train, Bf16GathersTrainAsZero2AndMoveTheMatricesAsBf16Alone) {
  test::TempDir dir;
  const std::vector<std::string> common{"train.steps=4",         "train.warmup_steps=1", "train.accum=2",
                                        "train.grad_clip=0",     "model.layers=2",       "dist.bucket_mb=0.01",
                                        "train.answer_samples=0"};
  auto launch = [&](const std::string& name, int port, const std::vector<std::string>& more) {
    return launched(dir.path(), name, 2, port, common, more);
  };
  launch("zero2", 29686, {"dist.zero=2", "precision.mode=bf16"});
  const auto bf16 = launch("zero3", 29687, {"dist.zero=3", "precision.mode=bf16"});
  const auto fp32 = launch("zero3_fp32", 29688, {"dist.zero=3", "precision.mode=fp32"});
  EXPECT_LE(max_abs_diff(dir.file("zero2/final/model.safetensors"), dir.file("zero3/final/model.safetensors")), 1e-5);
  const double total = bf16["dist"]["block_gather_mb_per_step"].get<double>();
  const double copies = bf16["dist"]["block_gather_bf16_mb_per_step"].get<double>();
  EXPECT_GT(copies, 0);
  EXPECT_NEAR(total + copies, fp32["dist"]["block_gather_mb_per_step"].get<double>(), 1e-9)
      << "the matrices were not gathered as bf16 copies alone";
  EXPECT_EQ(fp32["dist"]["block_gather_bf16_mb_per_step"].get<double>(), 0);
}

// QLoRA with activation checkpointing: the adapters (in the blocks, trained) are sharded and
// gathered; the frozen NF4 base is not the optimizer's and stays whole on every rank. With
// clipping off, ZeRO-3 computes what ZeRO-1 computes on the same ranks (the same sums of two
// gradients): measured equal here, bounded at 1e-5 as above; a rank keeps half of the adapters
// and the whole base.
TEST(Zero3Train, LoraAdaptersAreShardedAndTheFrozenBaseStaysWhole) {
  test::TempDir dir;
  const std::vector<std::string> common{
      "train.steps=4",     "train.warmup_steps=1", "train.accum=2",
      "train.grad_clip=0", "lora.rank=4",          "lora.base_dtype=nf4",
      "model.layers=2",    "dist.bucket_mb=0.01",  "memory.activation_checkpointing=blocks"};
  auto launch = [&](const std::string& name, int port, const std::string& zero) {
    return launched(dir.path(), name, 2, port, common, {"dist.zero=" + zero});
  };
  const auto one = launch("zero1", 29689, "1");
  const auto three = launch("zero3", 29691, "3");
  EXPECT_LE(max_abs_diff(dir.file("zero1/final/model.safetensors"), dir.file("zero3/final/model.safetensors")), 1e-5);
  const double p1 = one["state_bytes_per_rank"]["parameters"].get<double>();
  const double p3 = three["state_bytes_per_rank"]["parameters"].get<double>();
  const double adapters = 4.0 * one["trainable_params"].get<double>();  // fp32, all of them in the blocks
  ASSERT_GT(adapters, 0);
  EXPECT_NEAR(p3, p1 - adapters / 2, 64) << "a rank keeps the whole base and half of the adapters";
  EXPECT_GT(three["dist"]["block_gathers_per_step"].get<double>(), 0);
}

// dist.reshard_after_forward = false: each block stays whole from its forward to its backward, so
// the backward gathers nothing: per training step, exactly one gather a block and micro-batch
// instead of two, and the same weights (the same values gathered; measured equal, bounded at 1e-5
// as above). The evaluations (steps 2 and 4, 2 batches each) gather every block per batch in both
// runs; they are counted apart, not in the per-step figures (which they once raised to 15 and 9).
// Asked for without ZeRO-3 it is refused.
TEST(Zero3Train, KeepingBlocksWholeFromForwardToBackwardHalvesTheGathersAndTrainsTheSame) {
  test::TempDir dir;
  const std::vector<std::string> common{"train.steps=4",       "train.warmup_steps=1", "train.accum=2",
                                        "model.layers=3",      "train.eval_every=2",   "train.answer_samples=0",
                                        "dist.bucket_mb=0.01", "dist.zero=3"};
  auto launch = [&](const std::string& name, int port, const std::string& reshard) {
    return launched(dir.path(), name, 2, port, common, {"dist.reshard_after_forward=" + reshard});
  };
  const auto freed = launch("reshard", 29694, "true");
  const auto kept = launch("keep", 29695, "false");
  EXPECT_LE(max_abs_diff(dir.file("reshard/final/model.safetensors"), dir.file("keep/final/model.safetensors")), 1e-5);
  const double per_step = 3 * 2;  // blocks x micro-batches
  EXPECT_DOUBLE_EQ(freed["dist"]["block_gathers_per_step"].get<double>(), 2 * per_step);
  EXPECT_DOUBLE_EQ(kept["dist"]["block_gathers_per_step"].get<double>(), per_step);
  for (const auto* s : {&freed, &kept}) {
    EXPECT_EQ((*s)["dist"]["block_gathers_outside_steps"].get<int64_t>(), 2 * 2 * 3);  // evaluations x batches x blocks
    EXPECT_LE((*s)["dist"]["comm_fraction"].get<double>(), 1.0);
  }
  EXPECT_EQ(kept["levers"]["reshard_after_forward"], false);

  auto refused = test::run_frugal(joined(train_args(dir.path(), "refused", {"dist.reshard_after_forward=false"})));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("dist.reshard_after_forward = false"), std::string::npos) << refused.output;
}

// dist.offload = "optimizer" under bf16: each rank's fp32 master shard moves to host memory with the
// moments, and the device keeps the blocks' matrices as the bf16 shard its gathers send. The update
// is the same CPU pass on the same fp32 values, and the copies are the same casts, so the weights
// are the unoffloaded run's (measured equal; the bound is 1e-6). The device's parameters
// shrink by 2 bytes for each element of the bf16 shards, about half of what the host gains (the
// fp32 master of every sharded element: the matrices and the few small vectors beside them).
TEST(Zero3Train, OffloadedBf16RanksKeepTheMasterInHostMemoryAndTrainTheSame) {
  test::TempDir dir;
  const std::vector<std::string> common{"train.steps=4",       "train.warmup_steps=1", "train.accum=2",
                                        "model.layers=2",      "dist.bucket_mb=0.01",  "train.answer_samples=0",
                                        "precision.mode=bf16", "dist.zero=3"};
  const auto on = launched(dir.path(), "on_device", 2, 29701, common, {});
  const auto off = launched(dir.path(), "offload", 2, 29703, common, {"dist.offload=optimizer"});
  EXPECT_LE(max_abs_diff(dir.file("on_device/final/model.safetensors"), dir.file("offload/final/model.safetensors")),
            1e-6);
  const auto &a = on["state_bytes_per_rank"], &b = off["state_bytes_per_rank"];
  const double master = b["optimizer_in_host_memory"].get<double>() - a["optimizer"].get<double>();
  const double saved = a["parameters"].get<double>() - b["parameters"].get<double>();
  ASSERT_GT(master, 0) << "no fp32 master in host memory";
  EXPECT_EQ(b["optimizer"].get<double>(), 0);
  EXPECT_GT(saved, 0.4 * master) << "the device kept fp32 shards of the matrices";
  EXPECT_LE(saved, 0.5 * master);
}

// The counting allocator's peak of live tensor bytes, per rank (summary.json's
// peak_tensor_mb_per_rank), against one process's with the same global batch: at most 0.6x on 2
// ranks and 0.35x on 4, as the state is. The model is wide and the batch short, so that the
// training state outweighs the activations, which ZeRO does not shard. Measured here: rank 1 at
// 0.46x and 0.29x. The checkpoints count: each rank writes its own part of the moments; with the
// whole moments gathered on every rank for the capture instead (8 bytes a parameter), rank 1's
// peak measured 0.62x and 0.45x. Rank 0 alone also copies the whole weights to the host for the
// final weights it writes (4 bytes a parameter, here in the same memory as the tensors): its peak
// may exceed the others' by that much and no more (measured 0.56x and 0.35x).
TEST(Zero3Train, EachRanksPeakTensorMemoryIsAFractionOfOneProcesss) {
  test::TempDir dir;
  const std::vector<std::string> common{"model.layers=6",        "model.embd=256", "model.block=16",
                                        "data.micro_batch=2",    "train.steps=4",  "train.eval_every=0",
                                        "train.answer_samples=0"};
  auto run = [&](const std::string& name, int ranks, int port) {
    std::vector<std::string> more{fmt::format("train.accum={}", 4 / ranks)};
    if (ranks > 1) more.push_back("dist.zero=3");
    return launched(dir.path(), name, ranks, port, common, more);
  };
  const auto one = run("one", 1, 0);
  const double whole = one["peak_tensor_mb"].get<double>();
  const double weights_mb = 4.0 * one["params"].get<double>() / 1e6;
  for (const auto& [ranks, port, bound] : {std::tuple<int, int, double>{2, 29692, 0.6}, {4, 29693, 0.35}}) {
    const auto s = run(fmt::format("zero3_{}", ranks), ranks, port);
    const auto& peaks = s["peak_tensor_mb_per_rank"];
    ASSERT_EQ(peaks.size(), static_cast<size_t>(ranks));
    for (int r = 1; r < ranks; ++r)
      EXPECT_LE(peaks[static_cast<size_t>(r)].get<double>(), bound * whole)
          << "rank " << r << " of " << ranks << " against one process's " << whole << " MB";
    EXPECT_LE(peaks[0].get<double>(), peaks[1].get<double>() + weights_mb) << ranks << " ranks";
    EXPECT_EQ(peaks[0].get<double>(), s["peak_tensor_mb"].get<double>());
  }
}

}  // namespace
}  // namespace frugal::zero3_train_test
