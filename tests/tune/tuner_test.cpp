// `frugal tune` end to end on a tiny config: a table, a JSON report whose figures are
// consistent, and a complete tuned config that `frugal train` accepts; train.auto_tune records
// its choice in summary.json.
#include "frugal/tune/tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// A measured candidate, as the tuner records one.
TuneCandidate measured(const std::string& precision, std::vector<double> rounds, double loss, double peak_mb = 10) {
  TuneCandidate k;
  k.label = precision;
  k.sets = {"precision.mode=" + precision};
  k.ran = true;
  k.round_tokens_per_s = rounds;
  std::sort(rounds.begin(), rounds.end());
  k.tokens_per_s = rounds[rounds.size() / 2];
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
  EXPECT_NE(r.output.find("the median of 2 round(s)"), std::string::npos) << r.output;

  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("tune.json")));
  ASSERT_TRUE(j["chosen"].is_string());
  int ran = 0, bf16 = 0;
  for (const auto& k : j["candidates"]) {
    if (!k["ran"].get<bool>() || !k.contains("tokens_per_s")) continue;
    ++ran;
    EXPECT_GT(k["tokens_per_s"].get<double>(), 0);
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

}  // namespace
}  // namespace frugal::tuner_test
