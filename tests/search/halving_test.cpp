// `frugal search`'s pure parts: the halving rule (rungs, survivors, decisions, ranking, Pareto
// fronts) and the search file (its checks, dotted and quoted keys, seeded sampling, a combination
// the config rejects). Whole searches run through the binary in search_test.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/search/halving.h"
#include "frugal/search/search.h"
#include "frugal/search/search_space.h"
#include "test_util.h"

namespace frugal::halving_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// ---- the halving rule ------------------------------------------------------------------------

TEST(Halving, RungStepsDivideTheFullLengthByEtaPerRung) {
  EXPECT_EQ(rung_steps_for(600, 3, 2), (std::vector<int64_t>{150, 300, 600}));
  EXPECT_EQ(rung_steps_for(600, 3, 3), (std::vector<int64_t>{67, 200, 600}));
  EXPECT_EQ(rung_steps_for(40, 1, 2), (std::vector<int64_t>{40}));
  EXPECT_THROW(rung_steps_for(4, 4, 2), ConfigError);  // 1, 1, 2, 4: two rungs coincide
  EXPECT_THROW(rung_steps_for(600, 3, 1), ConfigError);
}

TEST(Halving, ScheduleKeepsTheBestFractionAndCountsTrialSteps) {
  EXPECT_EQ(survivors(0, 2), 0);
  EXPECT_EQ(survivors(1, 2), 1);  // the last one always goes on
  EXPECT_EQ(survivors(5, 2), 2);
  EXPECT_EQ(survivors(8, 3), 2);
  const HalvingSchedule p = halving_schedule(8, {150, 300, 600}, 2);
  EXPECT_EQ(p.trials, (std::vector<int64_t>{8, 4, 2}));
  EXPECT_EQ(p.trial_steps, 8 * 150 + 4 * 150 + 2 * 300);  // each rung resumes the last one's step
  EXPECT_EQ(p.full_trial_steps, 8 * 600);
  EXPECT_EQ(p.trial_rungs, 14);
  const HalvingSchedule q = halving_schedule(9, {10, 30, 90}, 3);
  EXPECT_EQ(q.trials, (std::vector<int64_t>{9, 3, 1}));
  EXPECT_EQ(q.trial_steps, 9 * 10 + 3 * 20 + 1 * 60);
}

TEST(Halving, DecisionPromotesTheBestThatCanContinueAndNeverAFailure) {
  std::vector<RungEntry> e = {{"t000", 2.0, true},  {"t001", NAN, false}, {"t002", 1.0, true},
                              {"t003", 1.5, false},  // ended on its own: ranked, but nothing left to train
                              {"t004", 1.5, true},  {"t005", 1.0, true},  {"t006", 3.0, true},
                              {"t007", 2.5, true}};
  RungDecision d = decide_rung(0, e, 2, MetricMode::kMin);
  EXPECT_EQ(d.ranked, (std::vector<std::string>{"t002", "t005", "t003", "t004", "t000", "t007", "t006", "t001"}));
  EXPECT_EQ(d.promoted, (std::vector<std::string>{"t002", "t005", "t004", "t000"}));  // 8 / 2 = 4, t003 skipped
  EXPECT_EQ(d.stopped, (std::vector<std::string>{"t003", "t007", "t006", "t001"}));
  d = decide_rung(1, e, 2, MetricMode::kMax);  // larger is better: the order turns, failures stay last
  EXPECT_EQ(d.ranked.front(), "t006");
  EXPECT_EQ(d.ranked.back(), "t001");
  EXPECT_EQ(d.promoted, (std::vector<std::string>{"t006", "t007", "t000", "t004"}));
  // Only failures: nobody goes on.
  d = decide_rung(0, {{"t000", NAN, true}, {"t001", INFINITY, true}}, 2, MetricMode::kMin);
  EXPECT_TRUE(d.promoted.empty());
}

// search.metric = "usd_to_target": a trial that has not reached the target is measured (not a
// failure): it ranks after every trial that reached it and is promoted where there is room (here
// no trial reached it yet at the first rung, and the best half still goes on to train longer).
TEST(Halving, ATrialThatHasNotReachedTheTargetRanksLastButMayGoOn) {
  const double no = not_reached_metric(MetricMode::kMin);
  EXPECT_TRUE(is_not_reached(no));
  EXPECT_FALSE(is_not_reached(12.5));
  RungDecision d =
      decide_rung(0, {{"t1", no, true}, {"t0", 0.30, true}, {"t2", NAN, true}, {"t3", no, true}}, 2, MetricMode::kMin);
  EXPECT_EQ(d.ranked, (std::vector<std::string>{"t0", "t1", "t3", "t2"}));
  EXPECT_EQ(d.promoted, (std::vector<std::string>{"t0", "t1"}));
  d = decide_rung(0, {{"t0", no, true}, {"t1", no, true}, {"t2", NAN, true}}, 2, MetricMode::kMin);
  EXPECT_EQ(d.promoted, (std::vector<std::string>{"t0"})) << "nobody reached it yet: the search goes on anyway";
}

// The text table keeps a *_to_target metric's significant digits (a small run's dollars to target
// are fractions of a cent), and loss-like metrics their four decimals.
TEST(Halving, TheTableShowsDollarsToTargetWithTheirSignificantDigits) {
  auto table_of = [](const std::string& metric, double value) {
    const json trial = {{"rank", 1},        {"id", "t000"},
                        {"rung", 0},        {"steps", 40},
                        {"metric", value},  {"tokens_per_s", 1e4},
                        {"cost_usd", 1e-4}, {"kg_co2", 1e-6},
                        {"status", "done"}, {"values", {{"train.lr", "0.01"}}}};
    const json search = {{"metric", metric},
                         {"trials", json::array({trial})},
                         {"rung_steps", {40}},
                         {"compute", {{"trial_steps", 40}, {"fraction_of_full", 1.0}, {"full_trial_steps", 40}}}};
    return search_table(search);
  };
  EXPECT_NE(table_of("usd_to_target", 3.14159e-5).find("3.14159e-05"), std::string::npos)
      << table_of("usd_to_target", 3.14159e-5);
  EXPECT_NE(table_of("val_loss", 2.345678).find("2.3457"), std::string::npos);
  EXPECT_NE(table_of("usd_to_target", not_reached_metric(MetricMode::kMin)).find("not reached"), std::string::npos);
}

TEST(Halving, RankingComparesTrialsAtEqualRungsThenByCost) {
  std::vector<Standing> s = {{"t000", 0, 0.5, 1.0},  // best metric, but stopped at the first rung
                             {"t001", 2, 1.2, 5.0},  {"t002", 2, 1.1, 9.0},
                             {"t003", 2, 1.1, 3.0},  // the tie goes to the cheaper
                             {"t004", -1, NAN, 0.0}, {"t005", 1, 0.9, 1.0}};
  EXPECT_EQ(rank_standings(s, MetricMode::kMin),
            (std::vector<std::string>{"t003", "t002", "t001", "t005", "t000", "t004"}));
}

TEST(Halving, ParetoFrontKeepsThePointsNoOtherBeats) {
  // (cost, loss): the front is a, c, d; b is beaten by a, e by d; f is not a number.
  const std::vector<std::pair<double, double>> p = {{1, 3}, {2, 3.5}, {2, 2}, {4, 1}, {5, 1}, {NAN, 0}};
  EXPECT_EQ(pareto_front(p), (std::vector<size_t>{0, 2, 3}));
  EXPECT_TRUE(pareto_front({}).empty());
}

// ---- the search file ---------------------------------------------------------------------------

std::string error_of(const std::string& path) {
  try {
    load_search_spec(path, {}, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SearchSpace, UnknownKeysEmptyRangesAndRejectedValuesAreErrorsNamingTheKeyAndLine) {
  test::TempDir dir;
  const std::string f = dir.file("s.toml");
  auto expect = [&](const std::string& space, std::vector<std::string> words) {
    test::write_text(f, "[train]\nsteps = 40\n[space]\n" + space + "\n");
    const std::string e = error_of(f);
    for (const auto& w : words) EXPECT_NE(e.find(w), std::string::npos) << space << " -> " << e;
  };
  expect("\"train.lrr\" = [0.1]", {"unknown config key 'train.lrr'", "s.toml:4", "did you mean 'train.lr'"});
  expect("\"train.lr\" = { range = [0.01, 0.01] }", {"train.lr", "is empty"});
  expect("\"train.lr\" = { range = [0.1, 0.01] }", {"is empty"});
  expect("\"train.lr\" = []", {"train.lr", "empty"});
  expect("\"train.lr\" = { log_range = [0, 0.1] }", {"low > 0"});
  expect("\"model.layers\" = [2, 0]", {"model.layers", "out of range", "allowed"});
  expect("\"precision.mode\" = [\"fp4\"]", {"precision.mode", "not a known choice"});
  expect("\"precision.mode\" = { range = [1, 2] }", {"list its choices"});
  expect("\"model.layers\" = { range = [1.5, 3] }", {"integer"});
  expect("\"train.steps\" = [10, 20]", {"cannot be searched over"});
  expect("\"train.lr\" = 0.1", {"expected a list of choices"});
  expect("", {"no [space] entries"});
  test::write_text(f, "[search]\nrungz = 3\n[space]\n\"train.lr\" = [0.1]\n");
  EXPECT_NE(error_of(f).find("unknown key search.rungz"), std::string::npos) << error_of(f);
  test::write_text(f, "[search]\nmetric = \"answer_accuracy\"\n[space]\n\"train.lr\" = [0.1]\n");
  EXPECT_NE(error_of(f).find("search.mode"), std::string::npos) << error_of(f);
  test::write_text(f, "[search]\nrung_steps = [10, 20]\n[train]\nsteps = 40\n[space]\n\"train.lr\" = [0.1]\n");
  EXPECT_NE(error_of(f).find("full length"), std::string::npos) << error_of(f);
}

// Every [search] key `frugal search --help` documents is one the reader takes (a wrong type is
// refused by the key's name, never as unknown), and docs/search.md's table has a row for each.
TEST(SearchSpace, EveryDocumentedSearchKeyIsReadAndInTheDocsTable) {
  test::TempDir dir;
  const std::string f = dir.file("s.toml");
  const std::string docs = test::read_text(std::string(FRUGAL_SOURCE_DIR) + "/docs/search.md");
  ASSERT_EQ(search_keys().size(), 12u);
  for (const auto& [key, help] : search_keys()) {
    EXPECT_FALSE(help.empty()) << key;
    test::write_text(f, "[search]\n" + key + " = { not = \"a value\" }\n[space]\n\"train.lr\" = [0.1]\n");
    const std::string e = error_of(f);
    EXPECT_EQ(e.find("unknown key"), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
    EXPECT_NE(docs.find("| `" + key + "` |"), std::string::npos) << key << " has no row in docs/search.md";
  }
}

TEST(SearchSpace, DottedAndQuotedKeysAndFixedSectionsAreRead) {
  test::TempDir dir;
  test::write_text(dir.file("s.toml"),
                   "[search]\nrungs = 2\n[train]\nsteps = 100\n[space]\ntrain.lr = { log_range = "
                   "[1e-4, 1e-2] }\n\"model.layers\" = { choices = [1, 2] }\n");
  const SearchSpec s = load_search_spec(dir.file("s.toml"), {"train.warmup_steps=3"}, {});
  ASSERT_EQ(s.params.size(), 2u);
  EXPECT_EQ(s.params[0].key, "model.layers");
  EXPECT_EQ(s.params[1].key, "train.lr");
  EXPECT_EQ(s.params[1].kind, SearchParam::Kind::kLogRange);
  EXPECT_EQ(s.fixed, (std::vector<std::string>{"train.steps=100", "train.warmup_steps=3"}));
  EXPECT_EQ(s.rung_steps, (std::vector<int64_t>{50, 100}));
  EXPECT_EQ(s.out, (fs::path("runs") / "s").string());
}

TEST(SearchSpace, SamplingIsAPureFunctionOfTheSeedAndTheDrawAndCoversTheRanges) {
  test::TempDir dir;
  test::write_text(dir.file("s.toml"),
                   "[search]\nseed = 3\n[space]\n\"train.lr\" = { log_range = [1e-5, 1e-1] }\n"
                   "\"data.micro_batch\" = { range = [4, 6] }\n\"model.embd\" = [32, 64]\n");
  SearchSpec s = load_search_spec(dir.file("s.toml"), {}, {});
  std::set<std::string> micro, embd;
  std::map<int, int> decades;
  for (int d = 0; d < 400; ++d) {
    const auto v = sample_point(s, d);
    EXPECT_EQ(v, sample_point(s, d));
    micro.insert(v[0].second);
    embd.insert(v[1].second);
    const double lr = std::stod(v[2].second);
    ASSERT_GE(lr, 1e-5);
    ASSERT_LE(lr, 1e-1);
    decades[static_cast<int>(std::floor(std::log10(lr)))]++;
  }
  EXPECT_EQ(micro, (std::set<std::string>{"4", "5", "6"}));  // both ends of an integer range
  EXPECT_EQ(embd, (std::set<std::string>{"32", "64"}));
  for (int e = -5; e <= -2; ++e) EXPECT_GT(decades[e], 60) << "decade 1e" << e;  // log-uniform: ~100 each
  const auto first = sample_point(s, 0);
  s.seed = 4;
  EXPECT_NE(sample_point(s, 0), first);
}

// LoRA's rank and alpha are axes like any key (docs/lora.md); a rank the config refuses is a problem
// of its trial only.
TEST(SearchSpace, LorasRankAndAlphaAreAxes) {
  test::TempDir dir;
  test::write_text(dir.file("s.toml"),
                   "[lora]\ntargets = \"c_attn\"\n[space]\n\"lora.rank\" = [4, 8, 16]\n"
                   "\"lora.alpha\" = { log_range = [8, 64] }\n");
  const SearchSpec s = load_search_spec(dir.file("s.toml"), {}, {});
  std::set<std::string> ranks;
  for (int d = 0; d < 50; ++d) {
    const auto v = sample_point(s, d);
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(trial_problem(s, v, {}), "") << v[0].second << " " << v[1].second;
    for (const auto& [k, x] : v)
      if (k == "lora.rank") ranks.insert(x);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"4", "8", "16"}));
  EXPECT_NE(trial_problem(s, {{"lora.rank", "5000"}, {"lora.alpha", "16"}}, {}).find("lora.rank"), std::string::npos);
}

TEST(SearchSpace, ACombinationTheConfigRejectsIsAProblemOfThatTrialOnly) {
  test::TempDir dir;
  test::write_text(dir.file("s.toml"), "[model]\nembd = 32\n[space]\n\"model.heads\" = [2, 3]\n");
  const SearchSpec s = load_search_spec(dir.file("s.toml"), {}, {});
  EXPECT_EQ(trial_problem(s, {{"model.heads", "2"}}, {}), "");
  EXPECT_NE(trial_problem(s, {{"model.heads", "3"}}, {}).find("must divide model.embd"), std::string::npos);
}

// A --set of a searched key would be overridden by every trial's value (search.json listed it as
// fixed, best.toml said `# --set`): it is refused, naming the [space] line; other --set keys pass.
TEST(SearchSpace, ASetOfASearchedKeyIsRefusedWithItsSpaceLine) {
  test::TempDir dir;
  test::write_text(dir.file("s.toml"), "[search]\nmax_trials = 2\n[space]\n\"model.embd\" = [64, 128]\n");
  try {
    load_search_spec(dir.file("s.toml"), {"model.embd=32"}, {});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--set model.embd: it is an axis of the search space in " + dir.file("s.toml") +
                                         ":4; drop it from --set or from [space]");
  }
  EXPECT_EQ(load_search_spec(dir.file("s.toml"), {"model.layers=1"}, {}).fixed,
            (std::vector<std::string>{"model.layers=1"}));
}

}  // namespace
}  // namespace frugal::halving_test
