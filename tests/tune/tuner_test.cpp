// `frugal tune` end to end on a tiny config: a table, a JSON report whose figures are
// consistent, and a complete tuned config that `frugal train` accepts; train.auto_tune records
// its choice in summary.json.
#include "frugal/tune/tuner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/core/config_loader.h"
#include "test_util.h"

namespace frugal::tuner_test {
namespace {

// train.steps is large so that the time bound (a fraction of the projected run) never skips a
// candidate here; the table must hold every one.
std::string tune_sets(const test::TempDir& dir) {
  return test::tiny_sets(dir.path()) +
         " --set train.steps=100000 --set tune.probe_steps=2 --set tune.max_fraction=1 --set budget.usd_per_hour=2 "
         "--set budget.watts=300 --set tune.rounds=2 --set tune.loss_check_steps=8";
}

// A measured candidate, as the tuner records one: 1000 tokens a step, each round's tokens/s.
TuneCandidate measured(const std::string& precision, const std::vector<double>& rounds, double loss,
                       double peak_mb = 10) {
  TuneCandidate k;
  k.label = precision;
  k.sets = {"precision.mode=" + precision};
  k.ran = true;
  k.tokens_per_step = 1000;
  k.round_tokens_per_s = rounds;
  for (double r : rounds) k.round_step_s.push_back(1000 / r);
  summarize_rounds(k);
  k.loss = loss;
  k.peak_mb = peak_mb;
  return k;
}

// The choice from injected measurements: the fastest candidate that qualifies, by its median over
// the rounds (one lucky round does not win), never one whose loss is off or that does not fit.
TEST(Tune, TheChoiceIsTheFastestQualifyingCandidateByItsMedian) {
  std::vector<TuneCandidate> c = {
      measured("bf16", {10000, 10000, 10000}, 2.00),       // 0: as configured
      measured("fp32", {6000, 6100, 5900}, 2.00),          // 1: the loss reference
      measured("fp16", {30000, 30000, 30000}, 2.50),       // 2: fastest, but learns differently
      measured("bf16", {25000, 25000, 25000}, 2.01, 500),  // 3: fast, but over the memory limit
      measured("bf16", {40000, 9000, 9500}, 2.00),         // 4: one lucky round
      measured("bf16", {12000, 12500, 12200}, 2.02)};      // 5: steadily the fastest that qualifies
  TuneRules rules;
  rules.limit_mb = 100;
  EXPECT_EQ(choose_candidate(c, rules), 5);
  EXPECT_FALSE(c[2].qualifies);
  EXPECT_NE(c[2].note.find("probe loss 2.5000 is more than 5% from fp32's 2.0000"), std::string::npos) << c[2].note;
  EXPECT_FALSE(c[3].qualifies);
  EXPECT_NE(c[3].note.find("exceeds memory.limit_mb"), std::string::npos) << c[3].note;
  EXPECT_TRUE(c[4].qualifies);
  EXPECT_TRUE(c[1].qualifies);
}

// One figure per candidate: its median step time, of an even count of rounds the slower middle
// one, and its tokens/s that step time's, so that tok/s and the run time agree. With 2 rounds
// ([326, 24225] tok/s) a lucky round does not win: it used to be "12276 tok/s" (the mean of the
// two) beside a run time from the mean step time, and chosen over a steady candidate.
TEST(Tune, EachCandidatesFigureIsItsMedianStepTimeAndOfTwoRoundsTheSlower) {
  TuneCandidate odd = measured("fp32", {100, 400, 200}, 2.0);
  EXPECT_DOUBLE_EQ(odd.step_s, 1000.0 / 200);
  EXPECT_DOUBLE_EQ(odd.tokens_per_s, 200);
  std::vector<TuneCandidate> c = {measured("bf16", {10000, 10000}, 2.0),   // 0: as configured, steady
                                  measured("fp32", {6000, 6000}, 2.0),     // 1: the loss reference
                                  measured("bf16", {326, 24225}, 2.0),     // 2: one lucky round of two
                                  measured("bf16", {11000, 11500}, 2.0)};  // 3: steadily faster
  const TuneCandidate& lucky = c[2];
  EXPECT_DOUBLE_EQ(lucky.step_s, 1000.0 / 326) << "the slower of the two rounds";
  EXPECT_DOUBLE_EQ(lucky.tokens_per_s, 326);
  for (const TuneCandidate& k : c) EXPECT_NEAR(k.tokens_per_s * k.step_s, k.tokens_per_step, 1e-9) << k.label;
  TuneRules rules;
  EXPECT_EQ(choose_candidate(c, rules), 3);
  c[3] = measured("bf16", {9000, 30000}, 2.0);  // lucky too: its slower round is below the baseline
  EXPECT_EQ(choose_candidate(c, rules), 0);
  TuneCandidate none;
  summarize_rounds(none);
  EXPECT_EQ(none.step_s, 0);
  EXPECT_EQ(none.tokens_per_s, 0);
}

// When no candidate qualified and the time bound skipped some, the message names the skipped ones
// and suggests only what would change something: a larger tune.max_fraction only below 1 (its
// largest value), more train.steps always.
TEST(Tune, TheTooShortMessageSuggestsOnlyWhatWouldChangeSomething) {
  TuneReport r;
  r.candidates = {measured("fp32", {100}, 2.0), measured("fp32", {100}, 2.0), TuneCandidate(), TuneCandidate()};
  r.candidates[0].failed = r.candidates[1].failed = true;
  r.candidates[2].label = "bf16 recompute=none micro 16x4";
  r.candidates[3].label = "fp32 recompute=none micro 16x4";
  r.bound_skipped = 2;
  r.projected_run_s = 3.3;
  r.bound_s = 3.3;
  Config c;
  c.train.steps = 40;
  c.tune.max_fraction = 1;
  std::string why = too_short_to_tune(r, c, "tiny.toml");
  EXPECT_NE(why.find("tiny.toml: no candidate qualified"), std::string::npos) << why;
  EXPECT_NE(why.find("skipped 2 of the 4 candidates (bf16 recompute=none micro 16x4; fp32 recompute=none micro 16x4)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("raise train.steps"), std::string::npos) << why;
  EXPECT_EQ(why.find("--set tune.max_fraction=1"), std::string::npos) << "it is 1 already: " << why;
  c.tune.max_fraction = 0.05;
  why = too_short_to_tune(r, c, "tiny.toml");
  EXPECT_NE(why.find("raise train.steps or tune.max_fraction (e.g. --set tune.max_fraction=1)"), std::string::npos)
      << why;
  r.bound_skipped = 0;  // nothing skipped: not the bound's doing
  EXPECT_EQ(too_short_to_tune(r, c, "tiny.toml"), "");
}

// A candidate within tune.min_speedup of the configuration as given does not replace it; when
// the configuration as given does not qualify, the fastest that does is chosen regardless.
TEST(Tune, OnlyACandidateThatBeatsTheConfigurationAsGivenByTheMarginReplacesIt) {
  std::vector<TuneCandidate> c = {measured("bf16", {10000}, 2.0), measured("fp32", {6000}, 2.0),
                                  measured("bf16", {10400}, 2.0)};
  TuneRules rules;  // min_speedup 5%
  EXPECT_EQ(choose_candidate(c, rules), 0);
  EXPECT_NE(c[2].note.find("only +4.0% over the configuration as given"), std::string::npos) << c[2].note;
  c[2] = measured("bf16", {10600}, 2.0);
  EXPECT_EQ(choose_candidate(c, rules), 2);
  c[2] = measured("bf16", {10400}, 2.0);
  c[0].loss = 3.0;  // the configuration as given learns differently (a broken fp16, say)
  EXPECT_EQ(choose_candidate(c, rules), 2);
}

// With a loss check for both the candidate and the fp32 reference, their check losses decide
// (the probe's few steps agree where a longer run does not).
TEST(Tune, TheLossCheckDecidesWhenTheCandidateAndTheReferenceHaveOne) {
  std::vector<TuneCandidate> c = {measured("fp32", {6000}, 2.0), measured("fp32", {6000}, 2.0),
                                  measured("bf16", {20000}, 2.0)};
  TuneRules rules;
  rules.loss_check_steps = 40;
  EXPECT_EQ(choose_candidate(c, rules), 2);
  c[0].check_loss = 1.50;  // the reference is the first fp32 candidate
  c[2].check_loss = 1.70;
  EXPECT_EQ(choose_candidate(c, rules), 0);
  EXPECT_NE(c[2].note.find("loss after 40 steps 1.7000 is more than 5% from fp32's 1.5000"), std::string::npos)
      << c[2].note;
  c[2].check_loss = 1.52;
  EXPECT_EQ(choose_candidate(c, rules), 2);
}

TEST(Tune, TinyConfigPrintsATableAndWritesAConfigThatTrainAccepts) {
  test::TempDir dir;
  auto r = test::run_frugal("tune" + tune_sets(dir) + " --out " + dir.file("tuned.toml") + " --json-out " +
                            dir.file("tune.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("chosen"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tuning took"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("median step time over 2 round(s)"), std::string::npos) << r.output;

  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("tune.json")));
  ASSERT_TRUE(j["chosen"].is_string());
  int ran = 0, bf16 = 0;
  for (const auto& k : j["candidates"]) {
    if (!k["ran"].get<bool>() || !k.contains("tokens_per_s")) continue;
    ++ran;
    EXPECT_GT(k["tokens_per_s"].get<double>(), 0);
    // tok/s and the run time come from the same step time.
    EXPECT_NEAR(k["tokens_per_s"].get<double>() * k["step_s"].get<double>(), k["tokens_per_step"].get<double>(),
                1e-6 * k["tokens_per_step"].get<double>())
        << k.dump();
    EXPECT_NEAR(k["projected_s"].get<double>(), k["step_s"].get<double>() * 100000,
                1e-6 * k["projected_s"].get<double>());
    EXPECT_GT(k["peak_tensor_mb"].get<double>(), 0);
    // $ = projected hours x 2 $/h; kg CO2 = hours x 0.3 kW x 0.475 kg/kWh (the default grid).
    const double hours = k["projected_s"].get<double>() / 3600;
    EXPECT_NEAR(k["projected_usd"].get<double>(), hours * 2, 1e-9);
    EXPECT_NEAR(k["projected_kg_co2"].get<double>(), hours * 0.3 * 0.475, 1e-9);
    bf16 += k["label"].get<std::string>().rfind("bf16", 0) == 0;
  }
  EXPECT_GE(ran, 4) << "fp32 and bf16, recompute off and on";
  EXPECT_GE(bf16, 2);
  EXPECT_EQ(j["rounds"], 2);
  for (const auto& k : j["candidates"])
    if (k.contains("round_tokens_per_s")) {
      EXPECT_EQ(k["round_tokens_per_s"].size(), 2u) << k.dump();
    }
  // A chosen candidate other than fp32 itself passed the loss check against fp32.
  const std::string chosen = j["chosen"].get<std::string>();
  if (chosen.rfind("fp32", 0) != 0) {
    EXPECT_TRUE(j.contains("loss_check")) << j.dump(1);
  }

  // A complete config: every key, and train.auto_tune off so training does not tune again.
  const ResolvedConfig tuned = resolve_config(dir.file("tuned.toml"), {}, {});
  EXPECT_FALSE(tuned.config.train.auto_tune);
  for (const auto& s : j["chosen_sets"]) {
    const std::string kv = s.get<std::string>();
    const std::string key = kv.substr(0, kv.find('='));
    EXPECT_EQ(tuned.origins.at(key).kind, ValueOrigin::Kind::kFile) << key;
  }
  // Each chosen value is marked as tune's, not as a --set the user never gave.
  const std::string written = test::read_text(dir.file("tuned.toml"));
  for (const auto& s : j["chosen_sets"]) {
    const std::string kv = s.get<std::string>();
    const size_t dot = kv.find('.');
    const std::string name = kv.substr(dot + 1, kv.find('=') - dot - 1);
    const size_t line = written.find("\n" + name + " = ", written.find("[" + kv.substr(0, dot) + "]\n"));
    ASSERT_NE(line, std::string::npos) << name << "\n" << written;
    EXPECT_NE(written.substr(line, written.find('\n', line + 1) - line).find("# frugal tune"), std::string::npos)
        << kv << "\n"
        << written;
  }
  auto t =
      test::run_frugal("train " + dir.file("tuned.toml") + " --set train.steps=2 --set run.name=from-tuned --quiet");
  EXPECT_EQ(t.exit_code, 0) << t.output;
  const nlohmann::json summary = nlohmann::json::parse(test::read_text(dir.file("from-tuned/summary.json")));
  EXPECT_EQ(summary["stop_kind"], "completed");
}

// A QLoRA run is tuned as it trains (adapters over an NF4 base: the probes install them), and the
// tuned config keeps its [lora].
TEST(Tune, AQloraRunIsMeasuredWithItsAdaptersAndKeepsThem) {
  test::TempDir dir;
  auto r = test::run_frugal("tune" + test::tiny_sets(dir.path()) +
                            " --set train.steps=100000 --set tune.probe_steps=2 --set tune.rounds=1 --set "
                            "tune.max_fraction=1 --set lora.rank=2 --set lora.base_dtype=nf4 --out " +
                            dir.file("tuned.toml") + " --json-out " + dir.file("tune.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("tune.json")));
  int ran = 0;
  for (const auto& k : j["candidates"])
    if (k["ran"].get<bool>() && k.contains("tokens_per_s")) {
      EXPECT_GT(k["tokens_per_s"].get<double>(), 0) << k.dump();
      ++ran;
    }
  EXPECT_GE(ran, 2);
  const ResolvedConfig tuned = resolve_config(dir.file("tuned.toml"), {}, {});
  EXPECT_EQ(tuned.config.lora.rank, 2);
  EXPECT_EQ(tuned.config.lora.base_dtype, LoraConfig::BaseDtype::kNf4);
}

// A missing data file is the user's to fix: exit 2 with the cause once, not a table of candidates
// that all failed the same way (and no tuned config).
TEST(Tune, BadInputExitsTwoOnceInsteadOfFailingEveryCandidate) {
  test::TempDir dir;
  auto r = test::run_frugal("tune" + tune_sets(dir) + " --set data.source=text:" + dir.file("missing.txt") + " --out " +
                            dir.file("tuned.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string cause = dir.file("missing.txt");
  const size_t first = r.output.find(cause);
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(cause, first + 1), std::string::npos) << "reported more than once:\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("tuned.toml")));
}

TEST(Tune, AutoTuneTrainsWithTheChoiceAndRecordsItInTheSummary) {
  test::TempDir dir;
  auto r =
      test::run_frugal("train" + tune_sets(dir) +
                       " --set tune.probe_steps=1 --set train.auto_tune=true --set train.steps=3 --set run.name=auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json s = nlohmann::json::parse(test::read_text(dir.file("auto/summary.json")));
  ASSERT_TRUE(s.contains("auto_tune")) << s.dump(2);
  const nlohmann::json& a = s["auto_tune"];
  ASSERT_TRUE(a["chosen"].is_string());
  // The run used the chosen precision.
  for (const auto& kv : a["chosen_sets"]) {
    const std::string set = kv.get<std::string>();
    if (set.rfind("precision.mode=", 0) == 0) {
      EXPECT_EQ(s["precision"], set.substr(15));
    }
  }
  EXPECT_TRUE(std::filesystem::exists(dir.file("auto/auto_tune.json")));
}

// Where the results go is checked before anything is measured: a folder, a path below a file and
// a --json-out folder exit 2 naming the flag and the path, and no candidate runs. They used to be
// found after all the measuring, as "rename failed" with exit 1.
TEST(Tune, BadOutputPathsExitTwoBeforeAnythingIsMeasured) {
  test::TempDir dir;
  test::write_text(dir.file("file.toml"), "");
  for (const std::string& bad :
       {"--out " + dir.path(), "--out " + dir.file("file.toml/x.toml"), "--json-out " + dir.path()}) {
    auto r = test::run_frugal("tune" + tune_sets(dir) + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("tok/s"), std::string::npos) << "measured first:\n" << r.output;
  }
}

// The printed next step runs as printed where the config's run directory already holds a run
// (trained once, then tuned): it names a run of its own and the earlier one is kept. It used to be
// `frugal train TUNED.toml`, which train refuses there (exit 2).
TEST(Tune, ThePrintedTrainCommandRunsWhereTheRunDirectoryHoldsAnEarlierRun) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set run.name=t";
  ASSERT_EQ(test::run_frugal("train" + sets + " --set train.steps=2 --quiet").exit_code, 0);
  const std::string before = test::read_text(dir.file("t/summary.json"));
  auto r = test::run_frugal("tune" + sets +
                            " --set train.steps=100000 --set tune.probe_steps=1 --set tune.rounds=1 "
                            "--set tune.max_fraction=1 --set tune.loss_check_steps=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string hint = "train with: frugal ";
  const size_t at = r.output.find(hint);
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string printed = r.output.substr(at + hint.size(), r.output.find('\n', at) - at - hint.size());
  EXPECT_NE(printed.find("--set run.name=t-tuned"), std::string::npos) << printed;
  auto t = test::run_frugal(printed + " --set train.steps=2 --quiet");
  EXPECT_EQ(t.exit_code, 0) << printed << "\n" << t.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("t-tuned/summary.json"))) << printed;
  EXPECT_EQ(test::read_text(dir.file("t/summary.json")), before) << "the earlier run was replaced";
}

// A stop signal ends `frugal tune` at its probe's step end: exit 75 with a line saying so, nothing
// written and no temporary folder left in TMPDIR; the folder of a process that died before its
// cleanup goes as tune starts. Each probe here would take a minute. SIGINT used to be ignored or
// to kill it (the folder left), SIGTERM to kill it (exit 143).
TEST(Tune, AStopSignalEndsItWithExit75NothingWrittenAndNoTemporaryFolder) {
  test::TempDir dir;
  const std::string tmp = dir.file("tmp");
  const std::string dead = "frugal-tune-999999999-dead01";  // a dead process's
  std::filesystem::create_directories(tmp + "/" + dead);
  std::vector<std::string> args = {"tune", "--out", dir.file("tuned.toml")};
  for (const std::string& o : test::tiny_overrides(dir.path())) args.insert(args.end(), {"--set", o});
  for (const char* o : {"train.steps=1000000", "tune.probe_steps=10000", "tune.max_fraction=1"})
    args.insert(args.end(), {"--set", o});
  const int pid = test::start_frugal(args, dir.file("tune.log"), {"TMPDIR=" + tmp});
  const bool probing = test::wait_for_entry(tmp, "frugal-tune-", 120, dead);
  ::kill(pid, SIGINT);
  const int status = test::wait_for_child(pid, 120);
  const std::string log = test::read_text(dir.file("tune.log"));
  ASSERT_TRUE(probing) << log;
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), 75) << log;
  EXPECT_NE(log.find("frugal: stopped: tuning was stopped by SIGINT before it finished; nothing written"),
            std::string::npos)
      << log;
  EXPECT_FALSE(std::filesystem::exists(dir.file("tuned.toml")));
  EXPECT_TRUE(test::entries_starting(tmp, "frugal-tune-").empty()) << test::entries_starting(tmp, "frugal-tune-")[0];
}

}  // namespace
}  // namespace frugal::tuner_test
