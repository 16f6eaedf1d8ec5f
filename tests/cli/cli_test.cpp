// The `frugal` tool as a user runs it: help, exit codes for bad input, train then sample.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/threads.h"
#include "frugal/model/gpt.h"
#include "frugal/model/weights.h"
#include "frugal/tune/doctor.h"
#include "model/internal/attention_kernel.h"
#include "test_util.h"

namespace frugal::cli_test {
namespace {
using test::run_frugal;

using test::tiny_sets;

TEST(Cli, HelpOnEveryCommandExitsZero) {
  for (const char* cmd : {"", "train", "sample", "doctor", "config", "launch"}) {
    auto r = run_frugal(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << cmd;
  }
  // search's help lists the search file's [search] keys with what each does.
  auto r = run_frugal("search --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"max_trials", "rung_steps", "metric", "mode", "max_hours"})
    EXPECT_NE(r.output.find(fmt::format("  {:<11} ", key)), std::string::npos) << key << "\n" << r.output;
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

// An option no command knows is named as such (not read as the config file's name), with the
// closest choice; an unknown command lists the commands; words after "--" belong to the launched
// program and are not checked.
TEST(Cli, UnknownOptionsAndCommandsAreNamedWithTheClosestChoice) {
  auto bogus = run_frugal("train --bogus x");
  EXPECT_EQ(bogus.exit_code, 2) << bogus.output;
  EXPECT_NE(bogus.output.find("unknown option '--bogus' for `frugal train`"), std::string::npos) << bogus.output;
  EXPECT_EQ(bogus.output.find("File does not exist"), std::string::npos) << bogus.output;
  auto typo = run_frugal("train --sett train.steps=3");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("'--sett' for `frugal train` (did you mean '--set'?)"), std::string::npos) << typo.output;
  auto joined = run_frugal("train --sett=train.steps=3");
  EXPECT_NE(joined.output.find("unknown option '--sett'"), std::string::npos) << joined.output;
  auto command = run_frugal("trian");
  EXPECT_EQ(command.exit_code, 2) << command.output;
  EXPECT_NE(command.output.find("unknown command 'trian' (did you mean 'train'?)"), std::string::npos)
      << command.output;
  EXPECT_NE(command.output.find("prepare"), std::string::npos) << command.output;  // the list
  test::TempDir dir;  // --emit resolves its CONFIG: the files must exist (in the folder it runs in)
  test::write_text(dir.file("--dashed-name.toml"), "");
  test::write_text(dir.file("c.toml"), "");
  const std::string in_dir = "cd '" + dir.path() + "' &&";
  auto launched = run_frugal("launch --emit slurm -n 1 -- --dashed-name.toml", in_dir);
  EXPECT_EQ(launched.exit_code, 0) << launched.output;
  EXPECT_NE(launched.output.find("--dashed-name.toml"), std::string::npos) << launched.output;
  // Known options, short and long, with the value attached or apart, keep working.
  auto known = run_frugal("launch --emit slurm -n1 --time=01:00:00 --name job -- c.toml", in_dir);
  EXPECT_EQ(known.exit_code, 0) << known.output;
}

// --emit resolves CONFIG with its --set flags as `frugal train` would, so a job that would fail
// after queueing is refused here: a missing file, an unknown key, a bad value (exit 2, no job).
TEST(Cli, LaunchEmitRefusesAConfigTheJobWouldRefuse) {
  test::TempDir dir;
  test::write_text(dir.file("c.toml"), "[train]\nsteps = 10\n");
  const std::string job = " -o " + dir.file("job.sbatch");
  for (const std::string& bad : {" " + dir.file("none.toml"), " --set train.stpes=5 " + dir.file("c.toml"),
                                 " --set train.steps=abc " + dir.file("c.toml")}) {
    for (const char* kind : {"slurm", "skypilot"}) {
      auto r = run_frugal(std::string("launch --emit ") + kind + job + bad);
      EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
      EXPECT_FALSE(std::filesystem::exists(dir.file("job.sbatch"))) << bad;
    }
  }
  EXPECT_NE(run_frugal("launch --emit slurm --set train.stpes=5 " + dir.file("c.toml")).output.find("train.steps"),
            std::string::npos);
  auto ok = run_frugal("launch --emit slurm --set train.steps=5" + job + " " + dir.file("c.toml"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("job.sbatch")));
}

// frugal launch's own flags are checked before any rank starts (a bad --port used to reach every
// rank as a malformed MASTER_PORT), and a --set before -- (which only --emit reads) is refused with
// the command line that works.
TEST(Cli, LaunchRefusesBadFlagsBeforeAnyRankStarts) {
  for (const std::string flag : {"--port 70000", "--port 0", "--grace -5"}) {
    auto r = run_frugal("launch -n 2 " + flag + " -- train none.toml");
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(flag.substr(0, flag.find(' ')) + ": must be a "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("started"), std::string::npos) << r.output;
  }
  auto set = run_frugal("launch -n 2 --set dist.zero=3 -- train none.toml");
  EXPECT_EQ(set.exit_code, 2) << set.output;
  EXPECT_NE(set.output.find("frugal launch -n 2 -- train none.toml --set dist.zero=3"), std::string::npos)
      << set.output;
  EXPECT_EQ(set.output.find("started"), std::string::npos) << set.output;
}

// A value out of an option's range names the flag, what it takes and the value given. CLI11's own
// checks printed "Value 0 not in range 0.000000 to 17976931348623157..." (a 309-digit number).
TEST(Cli, AnOptionOutOfItsRangeSaysWhatItTakes) {
  test::TempDir dir;
  test::write_text(dir.file("s.toml"), "[search]\nmax_trials = 2\n[space]\n\"train.lr\" = [0.001, 0.01]\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan --from " + dir.path() + " --gpus 0", "--gpus: must be a positive integer (1 or more), not 0"},
      {"plan --from " + dir.path() + " --peak-tflops 0", "--peak-tflops: must be a positive number (above 0), not 0"},
      {"search " + dir.file("s.toml") + " --parallel 0", "--parallel: must be a positive integer (1 or more), not 0"},
      {"search " + dir.file("s.toml") + " --max-usd -1", "--max-usd: must be a number (0 or more), not -1"},
      {"train --stop-at-step 0", "--stop-at-step: must be a positive integer (1 or more), not 0"},
      {"train --stop-at-step 2.5", "--stop-at-step: must be a positive integer (1 or more), not 2.5"},
      {"doctor --seconds 20", "--seconds: must be a number from 0.05 to 10, not 20"}};
  for (const auto& [args, message] : cases) {
    const auto r = run_frugal(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("179769313486231570"), std::string::npos) << args << "\n" << r.output;
  }
}

TEST(Cli, ARunShorterThanItsWarmUpIsWarnedAbout) {
  test::TempDir dir;
  auto short_run = run_frugal("train" + tiny_sets(dir.path()) + " --set train.steps=3 --set train.warmup_steps=10");
  EXPECT_EQ(short_run.exit_code, 0) << short_run.output;
  EXPECT_NE(short_run.output.find("warning: train.steps = 3 ends within the warm-up (train.warmup_steps = 10)"),
            std::string::npos)
      << short_run.output;
  auto long_run =
      run_frugal("train" + tiny_sets(dir.path()) + " --set train.steps=3 --set train.warmup_steps=2 --overwrite");
  EXPECT_EQ(long_run.exit_code, 0) << long_run.output;
  EXPECT_EQ(long_run.output.find("ends within the warm-up"), std::string::npos) << long_run.output;
}

// dist.zero in one process shards nothing: the run says so instead of accepting it without a word.
TEST(Cli, ZeroInASingleProcessIsNamedAsShardingNothing) {
  test::TempDir dir;
  auto r = run_frugal("train" + tiny_sets(dir.path()) + " --set train.steps=2 --set dist.zero=3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dist.zero = 3: this run is one process, so nothing is sharded"), std::string::npos)
      << r.output;
  auto plain = run_frugal("train" + tiny_sets(dir.path()) + " --set train.steps=2 --overwrite");
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("nothing is sharded"), std::string::npos) << plain.output;
}

TEST(Cli, HelpForOneCommandAndForAnUnknownOne) {
  auto train = run_frugal("help train");
  EXPECT_EQ(train.exit_code, 0) << train.output;
  EXPECT_NE(train.output.find("--resume"), std::string::npos) << train.output;
  EXPECT_EQ(train.output.find("--prompt"), std::string::npos) << "only train's help:\n" << train.output;
  auto bogus = run_frugal("help trian");
  EXPECT_EQ(bogus.exit_code, 2) << bogus.output;
  EXPECT_NE(bogus.output.find("'trian' is not a command of `frugal` (did you mean 'train'?)"), std::string::npos)
      << bogus.output;
}

TEST(Cli, ResumeFromAPathThatDoesNotExistIsBadInput) {
  test::TempDir dir;
  auto r = run_frugal("train --resume " + dir.file("nope") + " --set run.out_dir=" + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("nope") + ": no such directory"), std::string::npos) << r.output;
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
  // Without a stop text exactly 4 tokens follow the prompt: the model's greedy continuation.
  auto four = run_frugal("sample " + dir.file("demo") + " --prompt '12+7=' --max-tokens 4 --stop ''");
  ASSERT_EQ(four.exit_code, 0) << four.output;
  Config c = resolve_config(dir.file("demo/config.toml"), {}, {}).config;
  at::set_num_threads(1);  // as the run (run.threads = 1): the same summation order
  Gpt model(c.model);
  const std::string weights = dir.file("demo/final/model.safetensors");
  load_parameters(model->named_parameter_list(), load_safetensors(weights), weights);
  const std::string prompt = "12+7=";
  std::string expected = prompt;
  for (int64_t t : model->generate(std::vector<int64_t>(prompt.begin(), prompt.end()), 4, 0.0, 0))
    expected.push_back(static_cast<char>(t));
  ASSERT_EQ(expected.size(), prompt.size() + 4);
  if (expected.back() != '\n') expected += "\n";
  EXPECT_EQ(four.output, expected);
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
  // The CUDA architectures of frugal's kernels, which decide the GPUs they run on.
  EXPECT_EQ(j["cuda_kernel_architectures"].get<std::string>().empty(), !j["cuda_kernels_compiled"].get<bool>())
      << r.output;
  // The level frugal's own kernels run at: the best this CPU has.
  EXPECT_EQ(j["kernel_level"].get<int>(), internal::attention_levels().back()) << r.output;
  // What the doctor recommends is what train then uses (it saves its choice; train reads it).
  EXPECT_EQ(j["threads_frugal"], j["threads_recommended"]) << r.output;
  const std::string saved = j["threads_choice_file"].get<std::string>();
  EXPECT_EQ(saved, std::string(std::getenv("FRUGAL_CACHE_DIR")) + "/threads.json");
  test::TempDir dir;
  std::string sets;
  for (const auto& o : test::tiny_overrides(dir.path()))
    if (o != "run.threads=1") sets += " --set " + o;
  auto t = run_frugal("train" + sets + " --set train.steps=2");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find(fmt::format("threads {} (auto: {} thread(s), kept by frugal doctor on",
                                      j["threads_recommended"].get<int>(), j["threads_recommended"].get<int>())),
            std::string::npos)
      << t.output;
}

}  // namespace
}  // namespace frugal::cli_test
