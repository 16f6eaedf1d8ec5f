// The checkpoint writer: sync and async saves produce the same files, a background error surfaces
// on the caller's thread, and retention runs after each completed save.
#include "frugal/ckpt/checkpoint_writer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <filesystem>

#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
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

// Each save's stall is kept in order beside the total and the maximum (summary.json's
// checkpoint.stall_s_each).
TEST(CheckpointWriter, KeepsEachSavesStallInOrder) {
  test::TempDir dir;
  CheckpointWriter w(dir.path(), {}, {3, 0, MetricMode::kMin}, false);
  for (double s : {0.25, 0.5, 0.125}) w.record_stall(s);
  const CheckpointWriterStats st = w.stats();
  EXPECT_EQ(st.stall_s_each, (std::vector<double>{0.25, 0.5, 0.125}));
  EXPECT_DOUBLE_EQ(st.stall_s_total, 0.875);
  EXPECT_DOUBLE_EQ(st.stall_s_max, 0.5);
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

// Sets or clears a directory's immutable flag (chattr +i); false where the file system or the
// process's capabilities do not allow it.
bool set_immutable(const std::string& dir, bool on) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  ok = ok && ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  ::close(fd);
  return ok;
}

// A checkpoint retention cannot remove (here immutable) used to stay without a word while the
// disk filled; the writer now says so, once, naming it and what to do.
TEST(CheckpointWriter, ACheckpointRetentionCannotRemoveIsNamedOnce) {
  test::TempDir dir;
  CheckpointWriter w(dir.path(), {}, {1, 0, MetricMode::kMin}, false);
  w.save(1, data(1));
  const std::string stuck = dir.file("step-00000001");
  if (!set_immutable(stuck, true)) GTEST_SKIP() << "chattr +i is not allowed here";
  Console& console = Console::get();
  const bool quiet = console.quiet(), json = console.json_mode();
  console.set_quiet(false);
  console.set_json_mode(false);
  testing::internal::CaptureStdout();
  for (int64_t s = 2; s <= 4; ++s) w.save(s, data(static_cast<float>(s)));
  const std::string said = testing::internal::GetCapturedStdout();
  console.set_quiet(quiet);
  console.set_json_mode(json);
  set_immutable(stuck, false);
  EXPECT_TRUE(fs::exists(stuck));
  EXPECT_EQ(list_checkpoints(dir.path()).size(), 2u);  // step 1 and the newest
  const std::string warning = "checkpoint: warning: cannot remove " + stuck + ": ";
  ASSERT_NE(said.find(warning), std::string::npos) << said;
  EXPECT_EQ(said.find(warning), said.rfind(warning)) << "said once, not at every save: " << said;
  EXPECT_NE(said.find("checkpoint.keep_last = 1"), std::string::npos) << said;
}

// Tensors of several dtypes and layouts (a transposed view, a 0-d step count).
NamedTensors mixed_tensors() {
  torch::manual_seed(3);
  return {{"w", torch::randn({33, 7})},
          {"wt", torch::randn({7, 5}).t()},
          {"h", torch::randn({101}).to(torch::kBFloat16)},
          {"step", torch::tensor(int64_t{7})}};
}

std::vector<at::Tensor> clones(const NamedTensors& l) {
  std::vector<at::Tensor> out;
  for (const auto& [n, t] : l) out.push_back(t.clone());
  return out;
}

void expect_equal(const NamedTensors& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].second.scalar_type(), want[i].scalar_type()) << got[i].first;
    EXPECT_TRUE(torch::equal(got[i].second, want[i])) << got[i].first;
  }
}

TEST(SnapshotBuffer, CopiesAreExactAlignedAndIndependentOfTheOriginals) {
  NamedTensors a = mixed_tensors(), b = {{"m", torch::arange(1000, torch::kFloat32)}};
  const auto want_a = clones(a), want_b = clones(b);
  SnapshotBuffer buf(false);
  std::vector<NamedTensors> c = buf.copy({&a, &b});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0][1].first, "wt");
  for (const auto& l : c)
    for (const auto& [n, t] : l) {
      EXPECT_TRUE(t.is_contiguous()) << n;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n;
    }
  for (auto& [n, t] : a) t.fill_(0);  // the trainer moves on
  b[0].second.fill_(-1);
  expect_equal(c[0], want_a);
  expect_equal(c[1], want_b);
  EXPECT_FALSE(buf.pinned());  // asked for plain memory (and these tensors are on the host)
}

// Reusing the buffer while an earlier snapshot still holds it would rewrite that snapshot (an
// async write in flight would save the newer state); never reusing it would allocate (and, on a
// GPU, pin) the whole state at every save.
TEST(SnapshotBuffer, IsReusedOnlyWhenNoEarlierSnapshotHoldsIt) {
  NamedTensors a = mixed_tensors();
  const auto first = clones(a);
  SnapshotBuffer buf(false);
  auto c1 = buf.copy({&a});
  EXPECT_EQ(buf.allocations(), 1);
  for (auto& [n, t] : a) t.add_(1);
  const auto second = clones(a);
  auto c2 = buf.copy({&a});  // c1 still alive: a new buffer
  EXPECT_EQ(buf.allocations(), 2);
  EXPECT_NE(c1[0][0].second.data_ptr(), c2[0][0].second.data_ptr());
  expect_equal(c1[0], first);
  expect_equal(c2[0], second);
  const void* where = c2[0][0].second.data_ptr();
  c1.clear();
  c2.clear();  // nothing holds the buffer now
  auto c3 = buf.copy({&a});
  EXPECT_EQ(buf.allocations(), 2);
  EXPECT_EQ(c3[0][0].second.data_ptr(), where);
  expect_equal(c3[0], second);
  NamedTensors bigger = {{"big", torch::zeros({1 << 16})}};
  c3.clear();
  auto c4 = buf.copy({&bigger});  // too small: a new one
  EXPECT_EQ(buf.allocations(), 3);
  EXPECT_GE(buf.capacity(), int64_t{4} << 16);
}

// The writer's snapshot of a CPU run's state is private, and the async save writes what a sync
// save of the same state writes.
TEST(CheckpointWriter, SnapshotIsPrivateAndAsyncWritesItLikeSync) {
  test::TempDir a, b;
  CheckpointData live = data(2.5f);
  {
    CheckpointWriter sync(a.path(), {}, {3, 0, MetricMode::kMin}, false);
    sync.save(1, data(2.5f));
  }
  CheckpointWriter async(b.path(), {}, {3, 0, MetricMode::kMin}, true);
  CheckpointData d;
  d.model = live.model;
  d.optimizer = live.optimizer;
  d.state = live.state;
  async.snapshot(d);
  EXPECT_NE(d.model[0].second.data_ptr(), live.model[0].second.data_ptr());
  async.save(1, std::move(d));
  live.model[0].second.fill_(99.0f);
  live.optimizer[0].second.fill_(99.0f);
  async.wait();
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(read_file(a.path() + "/step-00000001/" + f), read_file(b.path() + "/step-00000001/" + f)) << f;
}

}  // namespace
}  // namespace frugal::checkpoint_writer_test
