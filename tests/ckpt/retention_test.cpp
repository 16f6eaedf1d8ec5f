// Retention: each rule of plan_retention, and that the newest complete and the best checkpoint
// survive every plan.
#include "frugal/ckpt/retention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "test_util.h"

namespace frugal {
namespace {
namespace fs = std::filesystem;

CheckpointInfo ck(int64_t step, bool complete, std::optional<double> metric = std::nullopt) {
  return CheckpointInfo{"c" + std::to_string(step), step, complete, metric};
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Retention, KeepsTheNewestKeepLastCompleteOnes) {
  auto del = plan_retention({ck(10, true), ck(20, true), ck(30, true), ck(40, true)}, {2, 0, MetricMode::kMin});
  EXPECT_EQ(del.size(), 2u);
  EXPECT_TRUE(has(del, "c10"));
  EXPECT_TRUE(has(del, "c20"));
}

TEST(Retention, KeepsTheBestByMetricInEitherMode) {
  std::vector<CheckpointInfo> l = {ck(10, true, 0.5), ck(20, true, 0.9), ck(30, true, 0.7), ck(40, true, 0.8)};
  auto del_min = plan_retention(l, {1, 1, MetricMode::kMin});
  EXPECT_FALSE(has(del_min, "c10"));  // best (lowest)
  EXPECT_FALSE(has(del_min, "c40"));  // newest
  EXPECT_EQ(del_min.size(), 2u);
  auto del_max = plan_retention(l, {1, 1, MetricMode::kMax});
  EXPECT_FALSE(has(del_max, "c20"));  // best (highest)
  EXPECT_TRUE(has(del_max, "c10"));
}

TEST(Retention, NeverDeletesTheNewestCompleteEvenWithKeepLastZero) {
  auto del = plan_retention({ck(10, true), ck(20, true)}, {0, 0, MetricMode::kMin});
  EXPECT_FALSE(has(del, "c20"));
}

TEST(Retention, IncompleteNewerThanNewestCompleteIsKeptOlderIsRemoved) {
  auto del = plan_retention({ck(10, false), ck(20, true), ck(30, false)}, {1, 0, MetricMode::kMin});
  EXPECT_TRUE(has(del, "c10"));
  EXPECT_FALSE(has(del, "c30"));  // possibly in flight
  EXPECT_FALSE(has(del, "c20"));
}

TEST(Retention, AnIncompleteCheckpointNeverCountsAsBestOrLatest) {
  // The metric of an incomplete directory is unreadable by construction; a complete older one with
  // the better metric stays.
  auto del = plan_retention({ck(10, true, 0.1), ck(20, true, 0.5), ck(30, true, 0.4), ck(40, false)},
                            {1, 1, MetricMode::kMin});
  EXPECT_FALSE(has(del, "c10"));
  EXPECT_FALSE(has(del, "c30"));
  EXPECT_TRUE(has(del, "c20"));
  EXPECT_FALSE(has(del, "c40"));
}

TEST(Retention, ApplyDeletesOnDiskAndRemovesCrashDebris) {
  test::TempDir dir;
  for (int64_t s : {1, 2, 3, 4}) {
    CheckpointData d;
    d.model = {{"w", torch::ones({2})}};
    d.state = {{"metric", {{"name", "val_loss"}, {"value", s == 2 ? 0.1 : 1.0}}}};
    write_checkpoint(dir.path(), s, d);
  }
  fs::create_directories(dir.file(".tmp-step-00000009-1-0"));  // a crashed writer's temp dir
  fs::create_directories(dir.file(".trash-step-00000000"));
  apply_retention(dir.path(), {2, 1, MetricMode::kMin});
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-00000002", "step-00000003", "step-00000004"}));
}

TEST(Retention, RemoveCheckpointsAfterDropsTheDivergedOnes) {
  test::TempDir dir;
  for (int64_t s : {5, 10, 15}) write_checkpoint(dir.path(), s, CheckpointData{});
  auto removed = remove_checkpoints_after(dir.path(), 5);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(list_checkpoints(dir.path()).size(), 1u);
}

TEST(Retention, BestCheckpointRespectsMode) {
  std::vector<CheckpointInfo> l = {ck(10, true, 2.0), ck(20, true, 1.0), ck(30, true)};
  EXPECT_EQ(best_checkpoint(l, MetricMode::kMin), "c20");
  EXPECT_EQ(best_checkpoint(l, MetricMode::kMax), "c10");
  EXPECT_EQ(best_checkpoint({ck(1, true)}, MetricMode::kMin), "");
}

}  // namespace
}  // namespace frugal
