// The `frugal` tool as a user runs it: help, exit codes for bad input, train then sample.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace frugal {
namespace {
using test::run_frugal;

using test::tiny_sets;

TEST(Cli, HelpOnEveryCommandExitsZero) {
  for (const char* cmd : {"", "train", "sample", "doctor", "config", "launch"}) {
    auto r = run_frugal(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << cmd;
  }
}

TEST(Cli, UnknownKeyExitsTwoAndNamesIt) {
  auto r = run_frugal("train --set train.stepz=3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown config key 'train.stepz'"), std::string::npos) << r.output;
}

TEST(Cli, BadEnvironmentValueExitsTwo) {
  auto r = run_frugal("config", "FRUGAL_MODEL_LAYERS=0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("FRUGAL_MODEL_LAYERS"), std::string::npos) << r.output;
}

TEST(Cli, BadConfigFileExitsTwoWithFileAndLine) {
  test::TempDir dir;
  test::write_text(dir.file("bad.toml"), "[model]\nlayers = -4\n");
  auto r = run_frugal("train " + dir.file("bad.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.toml:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.layers"), std::string::npos) << r.output;
}

TEST(Cli, MissingConfigFileAndUnknownFlagExitTwo) {
  EXPECT_EQ(run_frugal("train /nonexistent.toml").exit_code, 2);
  EXPECT_EQ(run_frugal("train --no-such-flag").exit_code, 2);
  EXPECT_EQ(run_frugal("").exit_code, 2);
}

TEST(Cli, MissingTextDataExitsTwoAndLeavesNoRunDirectory) {
  test::TempDir dir;
  auto r = run_frugal("train --set data.source=text:/nonexistent/c.txt --set run.out_dir=" + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/c.txt"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("demo")));
}

TEST(Cli, EnvironmentDefaultsReachTheResolvedConfig) {
  auto r = run_frugal("config --set train.lr=0.002", "FRUGAL_TRAIN_STEPS=77");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps = 77  # env FRUGAL_TRAIN_STEPS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr = 0.002  # --set"), std::string::npos) << r.output;
}

TEST(Cli, TrainThenSampleFromTheRun) {
  test::TempDir dir;
  auto r = run_frugal("train" + tiny_sets(dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("summary:"), std::string::npos);
  auto s = run_frugal("sample " + dir.file("demo") + " --prompt '12+7=' --max-tokens 4");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(s.output.rfind("12+7=", 0), 0u) << s.output;
  // A second train into the same run directory is refused without --overwrite: exit 2.
  auto again = run_frugal("train" + tiny_sets(dir.path()));
  EXPECT_EQ(again.exit_code, 2) << again.output;
}

TEST(Cli, SampleOnANonRunDirectoryExitsTwo) {
  test::TempDir dir;
  auto r = run_frugal("sample " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config.toml is missing"), std::string::npos) << r.output;
}

TEST(Cli, DoctorJsonReportsMeasuredMatmulSpeed) {
  auto r = run_frugal("doctor --json --seconds 0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["matmul_fp32_gflops"].get<double>(), 0);
  EXPECT_GT(j["matmul_bf16_gflops"].get<double>(), 0);
  EXPECT_TRUE(j["blas_library"].is_string());
  EXPECT_TRUE(j["warnings"].is_array());
}

}  // namespace
}  // namespace frugal
