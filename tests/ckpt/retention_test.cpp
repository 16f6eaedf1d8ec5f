// Retention: each rule of plan_retention, and that the newest complete and the best checkpoint
// survive every plan.
#include "frugal/ckpt/retention.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace frugal::retention_test {
namespace {
namespace fs = std::filesystem;

CheckpointInfo ck(int64_t step, bool complete, std::optional<double> metric = std::nullopt) {
  return CheckpointInfo{"c" + std::to_string(step), step, complete, metric};
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

CheckpointInfo corrupt(int64_t step, std::optional<double> metric = std::nullopt) {
  CheckpointInfo c = ck(step, true, metric);
  c.corrupt = true;
  return c;
}

void damage(const std::string& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(40);
  f.put('\x5a');
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  return left;
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
  fs::create_directories(dir.file(".tmp-step-00000009-99999999-0"));  // a dead writer's temp dir
  fs::create_directories(dir.file(".trash-step-00000000"));
  apply_retention(dir.path(), {2, 1, MetricMode::kMin});
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-00000002", "step-00000003", "step-00000004"}));
}

// The checkpoint a run resumed from stays whatever keep_last says (an older one, named with
// --resume PATH), under any spelling of its path; what was removed is returned.
TEST(Retention, APinnedCheckpointIsNeverDeleted) {
  auto del = plan_retention({ck(10, true), ck(20, true), ck(30, true)}, {1, 0, MetricMode::kMin}, "c10");
  EXPECT_EQ(del, std::vector<std::string>{"c20"});
  test::TempDir dir;
  for (int64_t s : {1, 2, 3, 4}) write_checkpoint(dir.path(), s, CheckpointData{});
  auto removed = apply_retention(dir.path(), {1, 0, MetricMode::kMin}, dir.path() + "/./step-00000002/");
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dir.file("step-00000001"), dir.file("step-00000003")}));
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"step-00000002", "step-00000004"}));
}

TEST(Retention, RemoveCheckpointsAfterDropsTheDivergedOnes) {
  test::TempDir dir;
  for (int64_t s : {5, 10, 15}) write_checkpoint(dir.path(), s, CheckpointData{});
  auto removed = remove_checkpoints_after(dir.path(), 5);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(list_checkpoints(dir.path()).size(), 1u);
}

// A corrupt checkpoint is neither the newest nor the best: counting it would make keep_last = 1
// delete every sound checkpoint written after a fall-back resume.
TEST(Retention, ACorruptCheckpointIsNeverCountedAndGoesOnceASoundOneExists) {
  auto del = plan_retention({ck(10, true), ck(20, true), corrupt(30)}, {1, 0, MetricMode::kMin});
  EXPECT_FALSE(has(del, "c20"));
  EXPECT_TRUE(has(del, "c30"));
  EXPECT_TRUE(has(del, "c10"));
  auto best = plan_retention({ck(10, true, 0.5), corrupt(20, 0.1), ck(30, true, 0.9)}, {1, 1, MetricMode::kMin});
  EXPECT_FALSE(has(best, "c10"));  // the best sound one, not the corrupt 0.1
  EXPECT_TRUE(has(best, "c20"));
  // With nothing sound, nothing corrupt is deleted either.
  EXPECT_TRUE(plan_retention({corrupt(10), corrupt(20)}, {1, 0, MetricMode::kMin}).empty());
}

// The scenario on disk: the newest checkpoint is damaged after it was completed; the run
// falls back to the previous one, and the checkpoints it writes next must survive keep_last = 1.
TEST(Retention, ApplyKeepsTheCheckpointsWrittenAfterAFallBackFromACorruptNewest) {
  test::TempDir dir;
  for (int64_t s : {10, 20, 30})
    write_checkpoint(dir.path(), s, CheckpointData{{{"w", torch::ones({64})}}, {}, {}, {}, {}, {}});
  damage(dir.path() + "/step-00000030/model.safetensors");
  EXPECT_EQ(fs::path(*find_resumable(dir.path(), nullptr)).filename(), "step-00000020");
  write_checkpoint(dir.path(), 25, CheckpointData{{{"w", torch::zeros({64})}}, {}, {}, {}, {}, {}});
  apply_retention(dir.path(), {1, 0, MetricMode::kMin});
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"step-00000025"}));
  EXPECT_EQ(fs::path(*find_resumable(dir.path(), nullptr)).filename(), "step-00000025");
}

// What cannot be judged now (a read error, another checkpoint version) is neither kept as sound
// nor deleted as corrupt.
TEST(Retention, AnUnverifiedCheckpointIsNeverDeletedNorCounted) {
  CheckpointInfo u = ck(30, true);
  u.unverified = true;
  auto del = plan_retention({ck(10, true), ck(20, true), u}, {1, 0, MetricMode::kMin});
  EXPECT_FALSE(has(del, "c30"));
  EXPECT_FALSE(has(del, "c20"));  // the newest sound one: the unverified one does not count
  EXPECT_TRUE(has(del, "c10"));
}

TEST(Retention, ApplyKeepsAnotherVersionsCheckpoint) {
  test::TempDir dir;
  for (int64_t s : {10, 20, 30})
    write_checkpoint(dir.path(), s, CheckpointData{{{"w", torch::ones({8})}}, {}, {}, {}, {}, {}});
  // step 30 becomes a (well-formed) checkpoint of a future version.
  const std::string d = dir.path() + "/step-00000030";
  nlohmann::json j = nlohmann::json::parse(test::read_text(d + "/state.json"));
  j["version"] = kCheckpointVersion + 1;
  const std::string state = j.dump(1) + "\n";
  test::write_text(d + "/state.json", state);
  test::write_text(d + "/COMPLETE", fmt::format("frugal-checkpoint {} state.json xxh3={} bytes={}\n",
                                                kCheckpointVersion, xxh3_hex(state), state.size()));
  EXPECT_FALSE(check_checkpoint(d).definite) << check_checkpoint(d).problem;
  apply_retention(dir.path(), {1, 0, MetricMode::kMin});
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"step-00000020", "step-00000030"}));
  // A damaged file, by contrast, is definite.
  damage(dir.path() + "/step-00000020/model.safetensors");
  EXPECT_TRUE(check_checkpoint(dir.path() + "/step-00000020").definite);
}

TEST(Retention, StaleDebrisOfDeadProcessesGoesALiveProcesssStays) {
  test::TempDir dir;
  const std::string mine = fmt::format(".tmp-step-00000005-{}-0", ::getpid());
  for (const std::string& n :
       {std::string(".tmp-step-00000005-99999999-0"), std::string(".trash-step-00000001-99999998"), mine,
        fmt::format(".trash-step-00000002-{}-3", ::getppid())})
    fs::create_directories(dir.file(n));
  auto removed = remove_stale_debris(dir.path());
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(entries(dir.path()),
            (std::vector<std::string>{mine, fmt::format(".trash-step-00000002-{}-3", ::getppid())}));
  // Under the run directory's lock every one is stale, whatever pid it names (pids are reused).
  EXPECT_EQ(remove_stale_debris(dir.path(), /*all=*/true).size(), 2u);
  EXPECT_TRUE(entries(dir.path()).empty());
}

TEST(Retention, BestCheckpointRespectsMode) {
  std::vector<CheckpointInfo> l = {ck(10, true, 2.0), ck(20, true, 1.0), ck(30, true)};
  EXPECT_EQ(best_checkpoint(l, MetricMode::kMin), "c20");
  EXPECT_EQ(best_checkpoint(l, MetricMode::kMax), "c10");
  EXPECT_EQ(best_checkpoint({ck(1, true)}, MetricMode::kMin), "");
}

}  // namespace
}  // namespace frugal::retention_test
