// The checkpoint writer: sync and async saves produce the same files, a background error surfaces
// on the caller's thread, and retention runs after each completed save.
#include "frugal/ckpt/checkpoint_writer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "frugal/core/atomic_file.h"
#include "test_util.h"

namespace frugal::checkpoint_writer_test {
namespace {
namespace fs = std::filesystem;

CheckpointData data(float v) {
  CheckpointData d;
  d.model = {{"w", torch::full({64}, v)}};
  d.optimizer = {{"g0.exp_avg", torch::zeros({64})}};
  d.state = {{"loop", {{"step", 1}}}};
  return d;
}

TEST(CheckpointWriter, AsyncWritesTheSameBytesAsSync) {
  test::TempDir a, b;
  {
    CheckpointWriter sync(a.path(), {}, {3, 0, MetricMode::kMin}, false);
    sync.save(1, data(1.5f));
  }
  CheckpointWriter async(b.path(), {}, {3, 0, MetricMode::kMin}, true);
  at::Tensor live = torch::full({64}, 1.5f);
  CheckpointData d = data(0);
  d.model = snapshot_tensors({{"w", live}});
  async.save(1, std::move(d));
  live.fill_(99.0f);  // the trainer moves on; the snapshot must not see it
  async.wait();
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(read_file(a.path() + "/step-00000001/" + f), read_file(b.path() + "/step-00000001/" + f)) << f;
  EXPECT_EQ(verify_checkpoint(b.path() + "/step-00000001"), "");
  EXPECT_EQ(async.stats().saves, 1);
}

TEST(CheckpointWriter, BackgroundErrorIsRethrownOnTheTrainerThread) {
  test::TempDir dir;
  WriteOptions o;
  o.after_stage = [](WriteStage s) {
    if (s == WriteStage::kOptimizer) throw std::runtime_error("disk full (simulated)");
  };
  CheckpointWriter w(dir.path(), o, {3, 0, MetricMode::kMin}, true);
  w.save(1, data(1));
  try {
    w.wait();
    FAIL() << "the writer's error was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos);
  }
  w.wait();  // reported once
}

TEST(CheckpointWriter, RotatesAfterEachCompletedSave) {
  test::TempDir dir;
  CheckpointWriter w(dir.path(), {}, {2, 0, MetricMode::kMin}, true);
  for (int64_t s = 1; s <= 5; ++s) w.save(s, data(static_cast<float>(s)));
  w.wait();
  auto l = list_checkpoints(dir.path());
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].step, 5);
  EXPECT_EQ(l[1].step, 4);
}

}  // namespace
}  // namespace frugal::checkpoint_writer_test
