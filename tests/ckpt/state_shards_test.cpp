// Sharded optimizer state and weights in a checkpoint: each rank's staged file moved in, listed
// with its checksum and assembled into the whole tensors; a damaged, missing or never-moved shard,
// a bad index and a file that disagrees with its pieces.
#include "frugal/ckpt/state_shards.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/retention.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::state_shards_test {
namespace {
namespace fs = std::filesystem;

// Two whole tensors: "g0.exp_avg" (10 elements, split 5 + 5) and "g1.exp_avg" (7 elements: rank 0
// holds 0-1 and 4, rank 1 holds 2 and 5-6; element 3 is padding no rank holds).
const NamedTensors& whole() {
  static const NamedTensors w = [] {
    torch::manual_seed(3);
    at::Tensor g1 = torch::randn({7});
    g1[3] = 0;
    return NamedTensors{{"g0.exp_avg", torch::randn({10})}, {"g1.exp_avg", g1}};
  }();
  return w;
}

const NamedTensors& weights() {
  static const NamedTensors w = [] {
    torch::manual_seed(4);
    return NamedTensors{{"a", torch::randn({3, 4})}, {"b", torch::randn({5})}, {"c", torch::randn({})}};
  }();
  return w;
}

StateShard shard_of(int64_t rank) {
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> pieces =
      rank == 0 ? std::vector<std::vector<std::pair<int64_t, int64_t>>>{{{0, 5}}, {{0, 2}, {4, 1}}}
                : std::vector<std::vector<std::pair<int64_t, int64_t>>>{{{5, 5}}, {{2, 1}, {5, 2}}};
  StateShard s;
  for (size_t i = 0; i < whole().size(); ++i) {
    StateShard::Entry& e = s.entry(whole()[i].first, whole()[i].second.numel());
    for (const auto& [offset, count] : pieces[i]) {
      e.pieces.emplace_back(offset, count);
      e.values.push_back(whole()[i].second.narrow(0, offset, count));
    }
  }
  return s;
}

CheckpointData sharded(const std::string& root, int64_t step) {
  CheckpointData d;
  torch::manual_seed(step);
  d.model = {{"w", torch::randn({4, 3})}};
  d.data_state = {{"kind", "index"}};
  for (int64_t r = 0; r < 2; ++r) d.optimizer_shards.push_back(stage_state_shard(root, step, r, 2, shard_of(r)));
  return d;
}

std::vector<std::string> debris(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) out.push_back(e.path().filename().string());
  return out;
}

TEST(StateShards, EachRanksFileIsMovedInListedAndAssembledIntoTheWholeTensors) {
  test::TempDir dir;
  CheckpointData d = sharded(dir.path(), 3);
  for (const StagedShard& s : d.optimizer_shards) {
    EXPECT_TRUE(fs::exists(s.path)) << s.path;
    EXPECT_EQ(fs::path(s.path).parent_path().filename().string().rfind(".tmp-step-00000003-", 0), 0u) << s.path;
    EXPECT_NE(fs::path(s.path).parent_path().filename().string().find(fmt::format("-r{}s", s.rank)), std::string::npos);
    EXPECT_TRUE(fs::path(s.path).is_absolute()) << s.path;
  }
  const std::string path = write_checkpoint(dir.path(), 3, d);
  EXPECT_EQ(verify_checkpoint(path), "");
  EXPECT_TRUE(fs::exists(path + "/optimizer-00000-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(path + "/optimizer-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(path + "/optimizer.safetensors"));
  EXPECT_TRUE(debris(dir.path()).empty()) << "the staging directories are removed once their file moved";
  const nlohmann::json state = nlohmann::json::parse(test::read_text(path + "/state.json"));
  EXPECT_EQ(state["optimizer_shards"]["world_size"], 2);
  EXPECT_EQ(state["optimizer_shards"]["tensors"]["g1.exp_avg"], 7);
  EXPECT_EQ(state["files"]["optimizer-00001-of-00002.safetensors"]["bytes"].get<int64_t>(),
            static_cast<int64_t>(fs::file_size(path + "/optimizer-00001-of-00002.safetensors")));
  // Rank 1's file holds only its pieces: 5 + 3 elements.
  const SafetensorsFile one = load_safetensors(path + "/optimizer-00001-of-00002.safetensors");
  EXPECT_EQ(one.find("g0.exp_avg")->numel(), 5);
  EXPECT_EQ(one.find("g1.exp_avg")->numel(), 3);
  const LoadedCheckpoint c = load_checkpoint(path);
  EXPECT_TRUE(c.optimizer.empty()) << "read by the optimizer, from the files";
  const NamedTensors assembled = assemble_state_shards(path, c.state["optimizer_shards"]);
  ASSERT_EQ(assembled.size(), whole().size());
  for (size_t i = 0; i < whole().size(); ++i) {
    EXPECT_EQ(assembled[i].first, whole()[i].first);
    EXPECT_TRUE(torch::equal(assembled[i].second, whole()[i].second)) << whole()[i].first;
  }
  // A process's own pieces, read one file at a time: ranges across both ranks' files and over
  // the padding no rank holds (0), in the order asked.
  StateShard want;
  want.entry("g1.exp_avg", 7).pieces = {{5, 2}, {1, 4}};
  want.entry("g0.exp_avg", 10).pieces = {{3, 4}};
  read_state_pieces(path, c.state["optimizer_shards"], want);
  ASSERT_EQ(want.entries[0].values.size(), 2u);
  EXPECT_TRUE(torch::equal(want.entries[0].values[0], whole()[1].second.narrow(0, 5, 2)));
  EXPECT_TRUE(torch::equal(want.entries[0].values[1], whole()[1].second.narrow(0, 1, 4)));
  EXPECT_EQ(want.entries[0].values[1][2].item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(want.entries[1].values[0], whole()[0].second.narrow(0, 3, 4)));
  // A tensor the checkpoint lacks, or of another size, is named.
  for (const auto& [name, numel] : {std::pair<std::string, int64_t>{"g2.exp_avg", 3}, {"g0.exp_avg", 12}}) {
    StateShard other;
    other.entry(name, numel).pieces = {{0, 1}};
    try {
      read_state_pieces(path, c.state["optimizer_shards"], other);
      ADD_FAILURE() << name << " read";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(StateShards, ADamagedOrMissingShardIsNamedAndTheNewestSoundCheckpointIsUsed) {
  test::TempDir dir;
  const std::string older = write_checkpoint(dir.path(), 3, sharded(dir.path(), 3));
  const std::string newer = write_checkpoint(dir.path(), 6, sharded(dir.path(), 6));
  const std::string file = newer + "/optimizer-00001-of-00002.safetensors";
  test::flip_byte(file, fs::file_size(file) - 2);
  EXPECT_NE(verify_checkpoint(newer).find("optimizer-00001-of-00002.safetensors: xxh3"), std::string::npos)
      << verify_checkpoint(newer);
  EXPECT_EQ(find_resumable(dir.path(), nullptr), std::optional<std::string>(older));
  fs::remove(file);
  EXPECT_NE(verify_checkpoint(newer).find("optimizer-00001-of-00002.safetensors: missing"), std::string::npos)
      << verify_checkpoint(newer);
  EXPECT_THROW(load_checkpoint(newer), CheckpointError);
}

// A kill after the ranks staged their files but before rank 0's checkpoint was complete: the
// previous checkpoint stays the newest sound one, and the staged files are debris retention
// removes. A write that fails before moving them in removes their staging directories; one that
// fails after removes them with its temp directory.
TEST(StateShards, AKillOrAFailedWriteAfterStagingLeavesThePreviousCheckpointNewest) {
  test::TempDir dir;
  const std::string older = write_checkpoint(dir.path(), 3, sharded(dir.path(), 3));
  const CheckpointData staged = sharded(dir.path(), 9);  // "killed" here
  EXPECT_EQ(debris(dir.path()).size(), 2u);
  EXPECT_EQ(find_resumable(dir.path(), nullptr), std::optional<std::string>(older));
  remove_stale_debris(dir.path(), /*all=*/true);  // as for processes that are gone
  EXPECT_TRUE(debris(dir.path()).empty());

  for (WriteStage fail_after : {WriteStage::kModel, WriteStage::kOptimizer, WriteStage::kState}) {
    CheckpointData d = sharded(dir.path(), 12);
    WriteOptions o;
    o.after_stage = [&](WriteStage s) {
      if (s == fail_after) throw IoError("disk full (simulated)");
    };
    EXPECT_THROW(write_checkpoint(dir.path(), 12, d, o), IoError);
    EXPECT_TRUE(debris(dir.path()).empty()) << write_stage_name(fail_after);
    EXPECT_FALSE(fs::exists(dir.file("step-00000012"))) << write_stage_name(fail_after);
    EXPECT_EQ(find_resumable(dir.path(), nullptr), std::optional<std::string>(older));
  }
}

// state.json's index edited and re-signed: each edit the assembly could not trust is refused by name.
TEST(StateShards, AnIndexWithPiecesOutsideOrOverlappingOrFilesOfAnotherRankIsNotSound) {
  test::TempDir dir;
  const std::string path = write_checkpoint(dir.path(), 3, sharded(dir.path(), 3));
  const nlohmann::json good = nlohmann::json::parse(test::read_text(path + "/state.json"));
  auto forge = [&](const nlohmann::json& state) {
    const std::string bytes = state.dump(1) + "\n";
    test::write_text(path + "/state.json", bytes);
    test::write_text(path + "/COMPLETE",
                     fmt::format("frugal-checkpoint 1 state.json xxh3={} bytes={}\n", xxh3_hex(bytes), bytes.size()));
    return verify_checkpoint(path);
  };
  ASSERT_EQ(forge(good), "");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& s) {
         s["optimizer_shards"]["ranks"][1]["pieces"]["g1.exp_avg"][1] = {5, 3};
       },
       "inside its 7 elements"},
      {[](nlohmann::json& s) {
         s["optimizer_shards"]["ranks"][1]["pieces"]["g0.exp_avg"][0] = {4, 5};
       },
       "overlap"},
      {[](nlohmann::json& s) { s["optimizer_shards"]["ranks"][1]["pieces"]["g2.exp_avg"] = nlohmann::json::array(); },
       "'g2.exp_avg'"},
      {[](nlohmann::json& s) { s["optimizer_shards"]["world_size"] = 3; }, "2 rank(s) for a world size of 3"},
      {[](nlohmann::json& s) { s["optimizer_shards"]["ranks"][1]["file"] = "optimizer-00000-of-00002.safetensors"; },
       "optimizer-00001-of-00002.safetensors"},
      {[](nlohmann::json& s) { s["files"].erase("optimizer-00001-of-00002.safetensors"); },
       "optimizer-00001-of-00002.safetensors"},
      {[](nlohmann::json& s) { s["optimizer_shards"] = "sharded"; }, "\"optimizer_shards\" is not"},
  };
  for (const auto& [edit, named] : edits) {
    nlohmann::json s = good;
    edit(s);
    const std::string problem = forge(s);
    EXPECT_NE(problem.find(named), std::string::npos) << "edit naming " << named << ": " << problem;
  }
  EXPECT_EQ(forge(good), "");
}

// A file whose tensor does not hold what its pieces say (a rank's bug, checksummed as written) is
// refused at load, naming the file; ranks that disagree on a tensor's size are refused at writing.
TEST(StateShards, AFileThatDisagreesWithItsPiecesOrRanksThatDisagreeOnASizeAreRefused) {
  test::TempDir dir;
  CheckpointData d = sharded(dir.path(), 3);
  StateShard short_one = shard_of(1);
  short_one.entries[0].values[0] = short_one.entries[0].values[0].narrow(0, 0, 4);  // 4 elements, listed as 5
  d.optimizer_shards[1] = stage_state_shard(dir.path(), 3, 1, 2, short_one);
  const std::string path = write_checkpoint(dir.path(), 3, d);
  const nlohmann::json index = load_checkpoint(path).state["optimizer_shards"];
  StateShard rank_0 = shard_of(0);  // its pieces lie in both files
  for (const auto& read : std::vector<std::function<void()>>{[&] { assemble_state_shards(path, index); },
                                                             [&] { read_state_pieces(path, index, rank_0); }}) {
    try {
      read();
      ADD_FAILURE() << "read";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer-00001-of-00002.safetensors: tensor 'g0.exp_avg' has 4 elements"),
                std::string::npos)
          << e.what();
    }
  }
  StateShard other_size = shard_of(1);
  other_size.entries[0].numel = 12;
  std::vector<StagedShard> ranks = {stage_state_shard(dir.path(), 4, 0, 2, shard_of(0)),
                                    stage_state_shard(dir.path(), 4, 1, 2, other_size)};
  EXPECT_THROW(shards_index(ranks), CheckpointError);
  std::swap(ranks[0], ranks[1]);
  EXPECT_THROW(shards_index(ranks), CheckpointError);  // rank 1's file in rank 0's place
}

// Three weights split over two ranks, in `dtype`: "a" (3 x 4: rank 0 holds elements 0-6, rank 1
// 7-11), "b" (5, rank 0's whole) and the scalar "c" (rank 1's; rank 0's file has none of it).
CheckpointData with_weight_shards(const std::string& root, int64_t step, c10::ScalarType dtype) {
  CheckpointData d = sharded(root, step);
  d.model.clear();
  for (int64_t r = 0; r < 2; ++r) {
    StateShard w;
    for (const auto& [name, t] : weights()) {
      StateShard::Entry& e = w.entry(name, t.numel());
      e.shape = t.sizes().vec();
      const int64_t lo = name == "a" && r == 1 ? 7 : 0;
      const int64_t hi = name == "a" ? (r == 0 ? 7 : 12) : name == "b" ? (r == 0 ? 5 : 0) : (r == 1 ? 1 : 0);
      if (hi <= lo) continue;
      e.pieces.emplace_back(lo, hi - lo);
      e.values.push_back(t.reshape({-1}).narrow(0, lo, hi - lo).to(dtype));
    }
    d.model_shards.push_back(stage_state_shard(root, step, r, 2, w, kModelShards));
  }
  return d;
}

// state.json replaced by `state`, re-signed: what verification says of it.
std::string forged(const std::string& path, const nlohmann::json& state) {
  const std::string bytes = state.dump(1) + "\n";
  test::write_text(path + "/state.json", bytes);
  test::write_text(path + "/COMPLETE",
                   fmt::format("frugal-checkpoint 1 state.json xxh3={} bytes={}\n", xxh3_hex(bytes), bytes.size()));
  return verify_checkpoint(path);
}

// The ranks' weight files replace model.safetensors (and master.safetensors: exact shards are fp32)
// and assemble into the whole weights in their shapes, as a resume, `frugal sample` and `export`
// read them; with weights_dtype = bf16 and no exact resume they stay bf16 and the checkpoint is
// marked inexact.
TEST(StateShards, TheRanksWeightFilesReplaceModelSafetensorsAndAssembleInTheirShapes) {
  test::TempDir dir;
  EXPECT_EQ(sharded_weights_dtype({WeightsDtype::kBf16, /*exact_resume=*/true, {}}), c10::kFloat);
  EXPECT_EQ(sharded_weights_dtype({WeightsDtype::kBf16, /*exact_resume=*/false, {}}), c10::kBFloat16);
  for (const bool exact : {true, false}) {
    SCOPED_TRACE(exact ? "exact" : "bf16");
    const WriteOptions o{exact ? WeightsDtype::kFp32 : WeightsDtype::kBf16, exact, {}};
    const c10::ScalarType dtype = sharded_weights_dtype(o);
    const int64_t step = exact ? 3 : 6;
    const std::string path = write_checkpoint(dir.path(), step, with_weight_shards(dir.path(), step, dtype), o);
    EXPECT_EQ(verify_checkpoint(path), "");
    for (const char* f : {"model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors"})
      EXPECT_TRUE(fs::exists(path + "/" + f)) << f;
    EXPECT_FALSE(fs::exists(path + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(path + "/master.safetensors"));
    const nlohmann::json state = nlohmann::json::parse(test::read_text(path + "/state.json"));
    EXPECT_EQ(state["weights_dtype"], exact ? "fp32" : "bf16");
    EXPECT_EQ(state["exact"], exact);
    EXPECT_EQ(state["model_shards"]["shapes"]["a"], nlohmann::json::array({3, 4}));
    EXPECT_EQ(state["model_shards"]["shapes"]["c"], nlohmann::json::array());
    const LoadedCheckpoint c = load_checkpoint(path);
    EXPECT_EQ(c.exact, exact);
    for (const NamedTensors& got : {c.weights, checkpoint_weights(path)}) {
      ASSERT_EQ(got.size(), weights().size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, weights()[i].first);
        EXPECT_EQ(got[i].second.scalar_type(), dtype);
        EXPECT_TRUE(torch::equal(got[i].second, weights()[i].second.to(dtype))) << got[i].first;
      }
    }
  }
  EXPECT_TRUE(debris(dir.path()).empty());
}

// The weights' index edited and re-signed: an element no rank holds, a shape that is not the
// tensor's size, a missing shape list, a bf16 shard claimed exact, model.safetensors listed too.
TEST(StateShards, AWeightIndexWithAnElementNoRankHoldsOrAWrongShapeIsNotSound) {
  test::TempDir dir;
  const WriteOptions o{WeightsDtype::kBf16, false, {}};
  const std::string path = write_checkpoint(dir.path(), 3, with_weight_shards(dir.path(), 3, c10::kBFloat16), o);
  const nlohmann::json good = nlohmann::json::parse(test::read_text(path + "/state.json"));
  ASSERT_EQ(forged(path, good), "");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& s) { s["model_shards"]["ranks"][1]["pieces"].erase("a"); },
       "no rank's pieces hold element 7 of weight 'a'"},
      {[](nlohmann::json& s) {
         s["model_shards"]["ranks"][1]["pieces"]["a"][0] = {8, 4};
       },
       "no rank's pieces hold element 7 of weight 'a'"},
      {[](nlohmann::json& s) {
         s["model_shards"]["shapes"]["a"] = {3, 5};
       },
       "gives 'a' [3,5] where it has 12"},
      {[](nlohmann::json& s) { s["model_shards"].erase("shapes"); }, "\"model_shards\" is not"},
      {[](nlohmann::json& s) { s["model_shards"]["shapes"]["zz"] = {1}; }, "gives a shape to 'zz'"},
      {[](nlohmann::json& s) { s["exact"] = true; }, "\"exact\" is true for weight shards in reduced precision"},
      {[](nlohmann::json& s) { s["files"]["model.safetensors"] = s["files"]["data_state.json"]; },
       "model-00000-of-00002.safetensors, model-00001-of-00002.safetensors"},
      {[](nlohmann::json& s) { s["model_shards"]["ranks"][1]["file"] = "optimizer-00001-of-00002.safetensors"; },
       "model-00001-of-00002.safetensors"},
  };
  for (const auto& [edit, named] : edits) {
    nlohmann::json s = good;
    edit(s);
    const std::string problem = forged(path, s);
    EXPECT_NE(problem.find(named), std::string::npos) << "edit naming " << named << ": " << problem;
  }
  // bf16 files under a state.json that says fp32 and exact: sound by its index, refused when read.
  nlohmann::json claims_fp32 = good;
  claims_fp32["weights_dtype"] = "fp32";
  claims_fp32["exact"] = true;
  ASSERT_EQ(forged(path, claims_fp32), "");
  try {
    checkpoint_weights(path);
    ADD_FAILURE() << "read";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'a' is stored as BFloat16 where state.json says weights_dtype fp32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(forged(path, good), "");
}

}  // namespace
}  // namespace frugal::state_shards_test
