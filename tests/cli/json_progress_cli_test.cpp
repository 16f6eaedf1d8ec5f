// `frugal train --json`: stdout carries only JSON objects, one per line (start, each log step,
// each evaluation, the summary), with human lines on stderr.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <vector>

#include "test_util.h"

namespace frugal::json_progress_cli_test {
namespace {

struct Output {
  int exit_code = -1;
  std::string out;
};

// Runs `frugal ARGS` keeping stdout only (stderr goes to `stderr_path`).
Output run_stdout(const std::string& args, const std::string& stderr_path) {
  const std::string cmd = "'" + std::string(FRUGAL_BINARY) + "' " + args + " 2>'" + stderr_path + "'";
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

TEST(JsonProgressCli, EveryStdoutLineIsAJsonObject) {
  test::TempDir dir;
  Output o = run_stdout("train --json" + test::tiny_sets(dir.path()) + " --set monitor.http=127.0.0.1:0",
                        dir.file("stderr.txt"));
  ASSERT_EQ(o.exit_code, 0) << o.out << test::read_text(dir.file("stderr.txt"));
  std::istringstream in(o.out);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    ASSERT_TRUE(j.is_object()) << line;
    ASSERT_TRUE(j.contains("event")) << line;
    lines.push_back(j);
  }
  ASSERT_GE(lines.size(), 1u + 6 + 2 + 1);
  EXPECT_EQ(lines.front()["event"], "start");
  EXPECT_EQ(lines.front()["total_steps"], 30);
  EXPECT_EQ(lines.front()["dashboard"].get<std::string>().rfind("http://127.0.0.1:", 0), 0u);
  EXPECT_EQ(lines.back()["event"], "summary");
  EXPECT_EQ(lines.back()["steps"], 30);
  int steps = 0, evals = 0;
  for (const auto& j : lines) {
    if (j["event"] == "step") {
      ++steps;
      for (const char* k : {"step", "loss", "tokens_per_s", "samples_per_s", "mfu", "cost_usd"})
        EXPECT_TRUE(j.contains(k)) << k;
    }
    evals += j["event"] == "eval";
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(evals, 2);
  // The step lines are the metrics.jsonl lines.
  std::istringstream file(test::read_text(dir.file("demo/metrics.jsonl")));
  std::getline(file, line);
  EXPECT_EQ(nlohmann::json::parse(line), lines[1]);
  // Human lines went to stderr.
  const std::string err = test::read_text(dir.file("stderr.txt"));
  EXPECT_NE(err.find("summary:"), std::string::npos) << err;
  EXPECT_NE(err.find("dashboard: http://127.0.0.1:"), std::string::npos) << err;
}

// Every line of stdout parsed as one JSON object.
std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) {
    nlohmann::json j;
    EXPECT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    EXPECT_TRUE(j.is_object()) << line;
    lines.push_back(j);
  }
  return lines;
}

// A short tune: one round of one probe step per candidate.
std::string quick_tune_sets(const test::TempDir& dir) {
  return test::tiny_sets(dir.path()) +
         " --set train.steps=100000 --set tune.probe_steps=1 --set tune.max_fraction=1 --set tune.rounds=1 "
         "--set tune.loss_check_steps=2";
}

TEST(JsonProgressCli, TuneJsonPrintsOnlyItsObjectOnStdout) {
  test::TempDir dir;
  Output o =
      run_stdout("tune --json" + quick_tune_sets(dir) + " --out " + dir.file("tuned.toml"), dir.file("stderr.txt"));
  const std::string err = test::read_text(dir.file("stderr.txt"));
  ASSERT_EQ(o.exit_code, 0) << o.out << err;
  const auto lines = json_lines(o.out);
  ASSERT_EQ(lines.size(), 1u) << o.out;
  EXPECT_TRUE(lines[0].contains("candidates")) << o.out;
  for (const char* human : {"tune: ", "tuning took", "wrote "})
    EXPECT_NE(err.find(human), std::string::npos) << human << " not on stderr:\n" << err;
}

// train.auto_tune and train.smoke_first keep stdout JSON only; --quiet prints neither their table nor report.
TEST(JsonProgressCli, AutoTuneAndSmokeFirstKeepStdoutJsonOnly) {
  test::TempDir dir;
  const std::string sets = quick_tune_sets(dir) + " --set train.steps=3 --set train.auto_tune=true";
  Output o =
      run_stdout("train --json" + sets + " --set train.smoke_first=true --set run.name=json", dir.file("stderr.txt"));
  const std::string err = test::read_text(dir.file("stderr.txt"));
  ASSERT_EQ(o.exit_code, 0) << o.out << err;
  const auto lines = json_lines(o.out);
  ASSERT_GE(lines.size(), 2u) << o.out;
  for (const auto& j : lines) EXPECT_TRUE(j.contains("event")) << j.dump();
  EXPECT_EQ(lines.back()["event"], "summary");
  for (const char* human : {"auto_tune: training with", "smoke test:", "tuning took"})
    EXPECT_NE(err.find(human), std::string::npos) << human << " not on stderr:\n" << err;

  auto q = test::run_frugal("train -q" + sets + " --set run.name=quiet");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  for (const char* human : {"auto_tune:", "tuning took", "tok/s"})
    EXPECT_EQ(q.output.find(human), std::string::npos) << human << " printed with -q:\n" << q.output;
}

}  // namespace
}  // namespace frugal::json_progress_cli_test
