// Checkpoint directories: round trip, an interrupted write at every stage, corruption detection
// and the fallback to the previous checkpoint.
#include "frugal/ckpt/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "frugal/core/crash_report.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::checkpoint_test {
namespace {
namespace fs = std::filesystem;

CheckpointData sample(int64_t step) {
  CheckpointData d;
  torch::manual_seed(step);
  d.model = {{"w", torch::randn({4, 3})}, {"b", torch::randn({3})}};
  d.optimizer = {{"g0.exp_avg", torch::randn({15})}, {"g0.exp_avg_sq", torch::rand({15})}};
  d.state = {{"loop", {{"step", step}}}, {"metric", {{"name", "val_loss"}, {"value", 1.0 / step}}}};
  d.data_state = {{"kind", "index"}, {"next_micro_batch", step * 2}};
  return d;
}

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

TEST(Checkpoint, RoundTripIsBitwiseAndNamesTheStepDirectory) {
  test::TempDir dir;
  CheckpointData d = sample(7);
  const std::string path = write_checkpoint(dir.path(), 7, d);
  EXPECT_EQ(fs::path(path).filename(), "step-00000007");
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json", "data_state.json", "COMPLETE"})
    EXPECT_TRUE(fs::exists(fs::path(path) / f)) << f;
  EXPECT_FALSE(fs::exists(fs::path(path) / "master.safetensors"));  // fp32 weights are the masters
  EXPECT_EQ(verify_checkpoint(path), "");
  LoadedCheckpoint c = load_checkpoint(path);
  EXPECT_EQ(c.step, 7);
  EXPECT_TRUE(c.exact);
  expect_same(c.weights, d.model);
  expect_same(c.optimizer, d.optimizer);
  EXPECT_EQ(c.data_state["next_micro_batch"], 14);
  EXPECT_EQ(c.state["loop"]["step"], 7);
  EXPECT_EQ(c.state["format"], "frugal-checkpoint");
  EXPECT_EQ(c.state["files"]["model.safetensors"]["xxh3"].get<std::string>().size(), 16u);
}

TEST(Checkpoint, HalfPrecisionWeightsKeepExactMastersUnlessOptedOut) {
  test::TempDir dir;
  CheckpointData d = sample(3);
  WriteOptions o;
  o.weights_dtype = WeightsDtype::kBf16;
  const std::string exact = write_checkpoint(dir.file("a"), 3, d, o);
  auto model = load_safetensors(exact + "/model.safetensors");
  EXPECT_EQ(model.find("w")->scalar_type(), torch::kBFloat16);
  LoadedCheckpoint c = load_checkpoint(exact);
  EXPECT_TRUE(c.exact);
  expect_same(c.weights, d.model);  // from master.safetensors

  o.exact_resume = false;
  const std::string lossy = write_checkpoint(dir.file("b"), 3, d, o);
  EXPECT_FALSE(fs::exists(lossy + "/master.safetensors"));
  LoadedCheckpoint l = load_checkpoint(lossy);
  EXPECT_FALSE(l.exact);
  EXPECT_EQ(l.weights[0].second.scalar_type(), torch::kBFloat16);
  EXPECT_LT(fs::file_size(lossy + "/model.safetensors"), fs::file_size(exact + "/master.safetensors"));
}

// A crash after each stage (an exception from the hook stands in for the kill) must leave the
// previous checkpoint as the newest sound one, and resume must pick it.
TEST(Checkpoint, InterruptedWriteAtEveryStageLeavesThePreviousCheckpointLoadable) {
  for (WriteStage s : {WriteStage::kTempDir, WriteStage::kModel, WriteStage::kMaster, WriteStage::kOptimizer,
                       WriteStage::kDataState, WriteStage::kState, WriteStage::kRenamed}) {
    test::TempDir dir;
    write_checkpoint(dir.path(), 10, sample(10));
    WriteOptions o;
    o.after_stage = [s](WriteStage now) {
      if (now == s) throw std::runtime_error("simulated crash");
    };
    EXPECT_THROW(write_checkpoint(dir.path(), 20, sample(20), o), std::runtime_error) << write_stage_name(s);
    auto found = find_resumable(dir.path(), nullptr);
    ASSERT_TRUE(found.has_value()) << write_stage_name(s);
    EXPECT_EQ(fs::path(*found).filename(), "step-00000010") << write_stage_name(s);
    EXPECT_EQ(load_checkpoint(*found).step, 10);
  }
  // After the marker the new checkpoint is the newest.
  test::TempDir dir;
  write_checkpoint(dir.path(), 10, sample(10));
  write_checkpoint(dir.path(), 20, sample(20));
  EXPECT_EQ(fs::path(*find_resumable(dir.path(), nullptr)).filename(), "step-00000020");
}

// A crash while a file is encoded or written names that file in the report's phase (the chain
// as the write's stage hook sees it, from inside each phase).
TEST(Checkpoint, EachFileWriteIsAPhaseForACrashReport) {
  test::TempDir dir;
  std::map<WriteStage, std::string> seen;
  WriteOptions o;
  o.after_stage = [&seen](WriteStage now) {
    char buf[256];
    CrashPhase::chain(buf, sizeof buf);
    seen[now] = buf;
  };
  CrashPhase outer("checkpoint");
  write_checkpoint(dir.path(), 5, sample(5), o);
  EXPECT_EQ(seen[WriteStage::kModel], "checkpoint > write model.safetensors");
  EXPECT_EQ(seen[WriteStage::kOptimizer], "checkpoint > write optimizer.safetensors");
  EXPECT_EQ(seen[WriteStage::kMarker], "checkpoint > write state.json, rename, mark complete");
}

// A write that fails (here: after the model file, as a full disk would) removes its temp
// directory; repeated failures must not fill the disk with partial checkpoints.
TEST(Checkpoint, AFailedWriteRemovesItsTempDirectory) {
  test::TempDir dir;
  WriteOptions o;
  o.after_stage = [](WriteStage now) {
    if (now == WriteStage::kModel) throw IoError("No space left on device");
  };
  for (int i = 0; i < 3; ++i) EXPECT_THROW(write_checkpoint(dir.path(), 20, sample(20), o), IoError);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// A checkpoint directory copied or renamed to another step's name is not sound: resuming from
// it would continue at the wrong step.
TEST(Checkpoint, ADirectoryWhoseNameDisagreesWithItsStepIsNotSound) {
  test::TempDir dir;
  write_checkpoint(dir.path(), 10, sample(10));
  fs::copy(dir.file("step-00000010"), dir.file("step-00000040"), fs::copy_options::recursive);
  const std::string problem = verify_checkpoint(dir.file("step-00000040"));
  EXPECT_NE(problem.find("step 10"), std::string::npos) << problem;
  EXPECT_NE(problem.find("step 40"), std::string::npos) << problem;
  auto listing = list_checkpoints(dir.path());
  ASSERT_EQ(listing.size(), 2u);
  EXPECT_FALSE(listing[0].complete);
  EXPECT_EQ(fs::path(*find_resumable(dir.path(), nullptr)).filename(), "step-00000010");
}

TEST(Checkpoint, CorruptNewestIsReportedAndThePreviousUsed) {
  test::TempDir dir;
  write_checkpoint(dir.path(), 10, sample(10));
  const std::string newest = write_checkpoint(dir.path(), 20, sample(20));
  test::flip_byte(newest + "/optimizer.safetensors", 100);
  const std::string problem = verify_checkpoint(newest);
  EXPECT_NE(problem.find("optimizer.safetensors"), std::string::npos) << problem;
  EXPECT_NE(problem.find("corrupt"), std::string::npos) << problem;
  std::vector<std::string> warnings;
  auto found = find_resumable(dir.path(), [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(found);
  EXPECT_EQ(fs::path(*found).filename(), "step-00000010");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("step-00000020"), std::string::npos) << warnings[0];
  try {
    load_checkpoint(newest);
    FAIL() << "a corrupt checkpoint loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("--resume auto"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, TruncatedFileAndEditedStateAreDetected) {
  test::TempDir dir;
  const std::string p = write_checkpoint(dir.path(), 5, sample(5));
  fs::resize_file(p + "/model.safetensors", fs::file_size(p + "/model.safetensors") - 4);
  EXPECT_NE(verify_checkpoint(p).find("truncated"), std::string::npos) << verify_checkpoint(p);

  const std::string q = write_checkpoint(dir.path(), 6, sample(6));
  std::string state = test::read_text(q + "/state.json");
  state.replace(state.find("\"step\": 6"), 9, "\"step\": 9");
  test::write_text(q + "/state.json", state);
  EXPECT_NE(verify_checkpoint(q).find("COMPLETE"), std::string::npos) << verify_checkpoint(q);

  const std::string r = write_checkpoint(dir.path(), 7, sample(7));
  fs::remove(r + "/COMPLETE");
  EXPECT_NE(verify_checkpoint(r).find("marker"), std::string::npos);
  EXPECT_FALSE(find_resumable(dir.path(), nullptr).has_value());
}

// state.json edited and re-signed (COMPLETE recomputed, so its checksum holds): every edit the
// loader cannot live with is refused by name. Without the schema check a `files: {}` skipped the
// checksum of every file, and impossible values were taken as they were.
TEST(Checkpoint, AReSignedStateJsonWithMissingFilesOrImpossibleValuesIsNotSound) {
  test::TempDir dir;
  CheckpointData d = sample(5);
  d.state["loop"] = {{"step", 5}, {"tokens", 640}, {"elapsed_s", 1.5}, {"startup_s", 0.5}, {"last_eval_step", -1}};
  d.state["world_size"] = 1;
  d.state["global_batch"] = 8;
  d.state["optimizer_steps"] = 5;
  d.state["precision"] = "fp32";
  const std::string path = write_checkpoint(dir.path(), 5, d);
  ASSERT_EQ(verify_checkpoint(path), "");
  const std::string original = test::read_text(path + "/state.json");
  const std::string original_data = test::read_text(path + "/data_state.json");
  // Writes `state` (and `data_state`, listed with its new checksum) and re-signs COMPLETE.
  auto forge = [&](nlohmann::json state, const std::string& data_state) {
    test::write_text(path + "/data_state.json", data_state);
    if (state["files"].contains("data_state.json"))
      state["files"]["data_state.json"] = {{"bytes", data_state.size()}, {"xxh3", xxh3_hex(data_state)}};
    const std::string bytes = state.dump(1) + "\n";
    test::write_text(path + "/state.json", bytes);
    test::write_text(path + "/COMPLETE",
                     fmt::format("frugal-checkpoint 1 state.json xxh3={} bytes={}\n", xxh3_hex(bytes), bytes.size()));
    return verify_checkpoint(path);
  };
  const nlohmann::json good = nlohmann::json::parse(original);
  ASSERT_EQ(forge(good, original_data), "") << "the re-signing itself is faithful";
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& s) { s["files"] = nlohmann::json::object(); }, "\"files\" lists nothing"},
      {[](nlohmann::json& s) { s["files"].erase("optimizer.safetensors"); }, "optimizer.safetensors"},
      {[](nlohmann::json& s) { s["weights_dtype"] = "fp64"; }, "weights_dtype"},
      {[](nlohmann::json& s) { s["exact"] = "yes"; }, "exact"},
      {[](nlohmann::json& s) { s["weights_dtype"] = "bf16"; }, "master.safetensors"},  // exact bf16 needs masters
      {[](nlohmann::json& s) { s["loop"]["elapsed_s"] = -3.0; }, "loop.elapsed_s"},
      {[](nlohmann::json& s) { s["loop"]["step"] = 4; }, "loop.step"},
      {[](nlohmann::json& s) { s["loop"]["tokens"] = -1; }, "loop.tokens"},
      {[](nlohmann::json& s) { s["world_size"] = 0; }, "world_size"},
      {[](nlohmann::json& s) { s["global_batch"] = "8"; }, "global_batch"},
      {[](nlohmann::json& s) { s["optimizer_steps"] = -2; }, "optimizer_steps"},
      {[](nlohmann::json& s) { s["precision"] = "fp64"; }, "precision"},
      {[](nlohmann::json& s) { s["kernels"] = 1; }, "kernels"},
      {[](nlohmann::json& s) { s["files"]["model.safetensors"]["xxh3"] = "zz"; }, "model.safetensors"},
      {[](nlohmann::json& s) { s["loop"]["lr_scale"] = 1e308; }, "loop.lr_scale"},
      {[](nlohmann::json& s) { s["loop"]["lr_scale"] = "1"; }, "loop.lr_scale"},
      {[](nlohmann::json& s) { s["loop"]["decay_from"] = -5; }, "loop.decay_from"},
      {[](nlohmann::json& s) {
         s["loss_scaler"] = {{"scale", -1.0}};
       },
       "loss_scaler.scale"},
      {[](nlohmann::json& s) {
         s["loss_scaler"] = {{"scale", 1.0}, {"skipped", "2"}};
       },
       "loss_scaler.skipped"},
      {[](nlohmann::json& s) {
         s["rng"] = {{"cpu", "00ff"}};
       },
       "rng.cpu"},  // hex, but not a generator's state
      {[](nlohmann::json& s) {
         s["rng"] = {{"cpu", 12}};
       },
       "rng.cpu"},
      {[](nlohmann::json& s) {
         s["rng"] = {{"cuda", {"xyz"}}};
       },
       "rng.cuda"},
      {[](nlohmann::json& s) {
         s["frozen"] = {{"init_from", "hf:/base"}, {"tensors", {{"wte.weight", "xyz"}}}};
       },
       "frozen.tensors"},
      {[](nlohmann::json& s) { s["frozen"] = "hf:/base"; }, "\"frozen\""},
  };
  for (const auto& [edit, named] : edits) {
    nlohmann::json s = good;
    edit(s);
    const std::string problem = forge(s, original_data);
    EXPECT_NE(problem.find(named), std::string::npos) << "edit naming " << named << ": " << problem;
  }
  for (const char* data : {R"({"kind": "shuffle"})", R"({"kind": "index", "next_micro_batch": -4})", "[1, 2]"}) {
    const std::string problem = forge(good, data);
    EXPECT_NE(problem.find("data_state.json"), std::string::npos) << data << ": " << problem;
  }
  forge(good, original_data);
  EXPECT_EQ(verify_checkpoint(path), "");
}

TEST(Checkpoint, ListingIsNewestFirstWithMetrics) {
  test::TempDir dir;
  for (int64_t s : {5, 15, 10}) write_checkpoint(dir.path(), s, sample(s));
  fs::create_directories(dir.file("step-00000020"));  // incomplete
  fs::create_directories(dir.file("notes"));
  auto l = list_checkpoints(dir.path());
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].step, 20);
  EXPECT_FALSE(l[0].complete);
  EXPECT_EQ(l[1].step, 15);
  EXPECT_TRUE(l[1].complete);
  ASSERT_TRUE(l[1].metric.has_value());
  EXPECT_DOUBLE_EQ(*l[1].metric, 1.0 / 15);
  EXPECT_TRUE(list_checkpoints(dir.file("missing")).empty());
}

TEST(Checkpoint, RewritingAnUnfinishedStepReplacesIt) {
  test::TempDir dir;
  fs::create_directories(dir.file("step-00000004"));
  test::write_text(dir.file("step-00000004/model.safetensors"), "torn");
  const std::string p = write_checkpoint(dir.path(), 4, sample(4));
  EXPECT_EQ(verify_checkpoint(p), "");
}

}  // namespace
}  // namespace frugal::checkpoint_test
