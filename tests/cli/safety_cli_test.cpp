// The operational-safety exit codes as a user sees them: 75 after a stop signal (and --resume
// auto continues), 3 when the divergence guard gives up, 0/2/1 from `frugal smoke` (bad input keeps
// its exit 2 through `frugal train`'s smoke test too).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace frugal::safety_cli_test {
namespace {
using test::run_frugal;

using test::tiny_sets;

// Runs a shell script; returns its output (stdout and stderr).
std::string shell(const std::string& script) {
  std::string out;
  FILE* p = popen(("(" + script + ") 2>&1").c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

TEST(SafetyCli, SigtermExits75WithACheckpointAndResumeAutoFinishes) {
  test::TempDir dir;
  // A long run; the signal is sent once the first metrics line shows the loop is running.
  const std::string train = "'" + std::string(FRUGAL_BINARY) + "' train -q" + tiny_sets(dir.path()) +
                            " --set train.steps=100000 --set train.log_every=1";
  const std::string script = train + " & pid=$!; for i in $(seq 1 600); do [ -s '" + dir.file("demo/metrics.jsonl") +
                             "' ] && break; sleep 0.05; done; kill -TERM $pid; wait $pid; echo rc=$?";
  const std::string out = shell(script);
  EXPECT_NE(out.find("rc=75"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("demo/checkpoints")));
  // The signal lands at whatever step the loop reached; the resumed run continues to 40 steps or
  // stops at once if it was already past them.
  const int64_t stopped_at =
      nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")))["steps"].get<int64_t>();
  auto again = run_frugal("train -q --resume auto" + tiny_sets(dir.path()) + " --set train.steps=40");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  auto s = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  EXPECT_EQ(s["steps"].get<int64_t>(), std::max<int64_t>(40, stopped_at));
  EXPECT_NE(s["checkpoint"]["resumed_from"].get<std::string>(), "");
}

TEST(SafetyCli, GuardGivingUpExitsThreeWithTheReason) {
  test::TempDir dir;
  auto r = run_frugal("train -q" + tiny_sets(dir.path()) +
                      " --set guard.spike_factor=0.5 --set guard.spike_windows=1 --set checkpoint.every_steps=5");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("divergence guard"), std::string::npos) << r.output;
}

TEST(SafetyCli, SmokeExitsZeroOnASoundPipelineAndTwoForBadInputNamingTheStage) {
  test::TempDir dir;
  auto ok = run_frugal("smoke" + tiny_sets(dir.path()));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("compare     ok"), std::string::npos) << ok.output;
  auto bad = run_frugal("smoke" + tiny_sets(dir.path()) + " --set data.source=text:" + dir.file("none.txt"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("data        FAILED"), std::string::npos) << bad.output;
  auto first = run_frugal("train" + tiny_sets(dir.path()) + " --set train.smoke_first=true --set train.steps=3");
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("compare     ok"), std::string::npos) << first.output;
}

// Bad input that the smoke test of train.smoke_first finds is still bad input: exit 2, with the stage
// and the cause (it was a generic error, exit 1); a bad lora.targets is found at the config stage,
// before the data and the forward pass, by `frugal smoke` as by `frugal train`.
TEST(SafetyCli, SmokeFirstKeepsABadInputsExitCode) {
  test::TempDir dir;
  const std::string smoke_first = " --set train.smoke_first=true --set run.name=s";
  auto r = run_frugal("train" + tiny_sets(dir.path()) + smoke_first + " --set lora.rank=4 --set lora.targets=c_atn");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad input: train.smoke_first: the smoke test failed at stage config: lora.targets: "
                          "\"c_atn\" names no projection"),
            std::string::npos)
      << r.output;
  r = run_frugal("train" + tiny_sets(dir.path()) + smoke_first + " --set data.source=text:" + dir.file("none.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the smoke test failed at stage data: data.source: text file"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("s/summary.json")));
  r = run_frugal("smoke" + tiny_sets(dir.path()) + " --set lora.rank=4 --set lora.targets=c_atn");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config      FAILED: lora.targets: \"c_atn\""), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("forward     ok"), std::string::npos) << r.output;
}

// A checkpoint, weights file or archive the user names that cannot be read is bad input: exit 2
// with the name first, as the help promises (it was exit 1, as for a bug).
TEST(SafetyCli, AnUnreadableCheckpointWeightsFileOrArchiveTheUserNamesExitsTwo) {
  test::TempDir dir;
  ASSERT_EQ(run_frugal("train -q" + tiny_sets(dir.path()) + " --set checkpoint.every_steps=10").exit_code, 0);
  std::string ck;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("demo/checkpoints")))
    if (e.path().filename().string().rfind("step-", 0) == 0) ck = e.path().string();
  ASSERT_FALSE(ck.empty());
  std::string model = test::read_text(ck + "/model.safetensors");
  model[model.size() / 2] = static_cast<char>(model[model.size() / 2] ^ 0x5a);  // checksums catch it
  test::write_text(ck + "/model.safetensors", model);
  auto r = run_frugal("train -q" + tiny_sets(dir.path()) + " --resume " + ck);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--resume " + ck + ":"), std::string::npos) << r.output;

  test::write_text(dir.file("junk.safetensors"), "not a safetensors file at all");
  r = run_frugal("sample " + dir.file("demo") + " --weights " + dir.file("junk.safetensors") + " --prompt 1+1=");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not a valid safetensors file"), std::string::npos) << r.output;

  test::write_text(dir.file("junk.tar.zst"), "not an archive");
  r = run_frugal("restore " + dir.file("junk.tar.zst") + " --runs " + dir.file("restored"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the archive " + dir.file("junk.tar.zst")), std::string::npos) << r.output;
}

// A stop signal while the process exits after its run keeps the run's exit code: a budget stop
// stays 3 (it gave 143, the signal's default action, once the handlers were restored).
TEST(SafetyCli, AStopSignalDuringTheExitKeepsTheRunsExitCode) {
  test::TempDir dir;
  auto r =
      run_frugal("train -q" + tiny_sets(dir.path()) + " --set budget.usd_per_hour=360000 --set budget.limit_usd=0.5",
                 "FRUGAL_FAULT_SIGNAL_AT_EXIT=1 ");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  r = run_frugal("train -q" + tiny_sets(dir.path()) + " --overwrite", "FRUGAL_FAULT_SIGNAL_AT_EXIT=1 ");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// --resume given a run directory says so and names the forms that work (it read like a damaged
// checkpoint: "no COMPLETE marker").
TEST(SafetyCli, ResumeFromARunDirectoryNamesTheFormsThatWork) {
  test::TempDir dir;
  ASSERT_EQ(run_frugal("train -q" + tiny_sets(dir.path()) + " --set checkpoint.every_steps=10").exit_code, 0);
  auto r = run_frugal("train -q" + tiny_sets(dir.path()) + " --resume " + dir.file("demo"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a run directory, not a checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--resume auto"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--resume " + dir.file("demo/checkpoints/step-")), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("COMPLETE"), std::string::npos) << r.output;
}

// A path that cannot be used (a loop of symbolic links, a name too long) is bad input named in
// plain words, not the library's "filesystem error: status: ..." with exit 1.
TEST(SafetyCli, AnUnusablePathExitsTwoNamingItWithoutTheLibrarysText) {
  test::TempDir dir;
  std::filesystem::create_directory_symlink(dir.file("b"), dir.file("a"));
  std::filesystem::create_directory_symlink(dir.file("a"), dir.file("b"));
  auto r = run_frugal("train -q --set run.out_dir=" + dir.file("a") + " --set train.steps=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("a")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Too many levels of symbolic links"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output;
  r = run_frugal("train -q --set run.out_dir=" + dir.file(std::string(300, 'x')) + " --set train.steps=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("File name too long"), std::string::npos) << r.output;
}

TEST(SafetyCli, ExistingRunWithoutResumeOrOverwriteIsRefusedWithBothHints) {
  test::TempDir dir;
  ASSERT_EQ(run_frugal("train -q" + tiny_sets(dir.path())).exit_code, 0);
  auto r = run_frugal("train -q" + tiny_sets(dir.path()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--resume auto"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace frugal::safety_cli_test
