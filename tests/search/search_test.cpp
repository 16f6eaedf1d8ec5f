// `frugal search`: whole searches of a tiny GPT run through the binary (the halving rule and the
// search file's checks are in halving_test.cpp). The halving search keeps the trial that running
// every trial to the end ranks best and measures each rung exactly as the straight run does; the
// same seed gives the same decisions, also with two trials at once; a search killed outright and
// resumed repeats no finished trial-rung; a budget stops it with exit 3 and a larger one lets it
// finish; a bad space is an error before any trial and an invalid combination is skipped and counted.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/search/halving.h"
#include "frugal/search/search_space.h"
#include "test_util.h"

extern char** environ;

namespace frugal::search_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// ---- whole searches, through the binary ---------------------------------------------------------

// A GPT small enough that a trial process takes about a second: 40 steps, evaluations every 10.
constexpr const char* kBase = R"([run]
threads = 1
[model]
layers = 1
heads = 2
embd = 32
block = 16
[data]
micro_batch = 8
arith_lines = 2000
[train]
steps = 40
warmup_steps = 5
eval_every = 10
eval_batches = 2
log_every = 5
answer_samples = 0
[precision]
mode = "fp32"
[monitor]
peak_tflops = 1.0
)";

json read_json(const std::string& path) { return json::parse(test::read_text(path)); }

json trial(const json& search, const std::string& id) {
  for (const auto& t : search["trials"])
    if (t["id"] == id) return t;
  ADD_FAILURE() << "no trial " << id;
  return json::object();
}

// The trial processes of one trial, from its trial.log: where each began and ended.
struct Session {
  int64_t start = -1, end = -1;
};
std::vector<Session> sessions(const std::string& log) {
  std::vector<Session> out;
  std::ifstream in(log);
  std::string line;
  std::smatch m;
  const std::regex resumed("^resume: continuing from .* \\(step ([0-9]+)"), fresh("starting from step 0"),
      steps("^  steps +([0-9]+)$");
  while (std::getline(in, line)) {
    if (line.rfind("== frugal search:", 0) == 0) out.push_back({});
    if (out.empty()) continue;
    if (std::regex_search(line, m, resumed)) out.back().start = std::stoll(m[1]);
    if (std::regex_search(line, fresh)) out.back().start = 0;
    if (std::regex_search(line, m, steps)) out.back().end = std::stoll(m[1]);
  }
  return out;
}

// No step of any trial was trained twice: every process began where the previous one ended.
void expect_no_step_trained_twice(const json& search) {
  for (const auto& t : search["trials"]) {
    const auto s = sessions(t["run_dir"].get<std::string>() + "/trial.log");
    ASSERT_FALSE(s.empty()) << t["id"];
    // A search killed between counting a launch and starting it counts one more than ran.
    EXPECT_LE(static_cast<int64_t>(s.size()), t["sessions"].get<int64_t>()) << t["id"];
    int64_t at = 0;
    for (const auto& x : s) {
      if (x.start < 0 && x.end < 0) continue;  // stopped by the search's death before it began: trained nothing
      EXPECT_EQ(x.start, at) << t["id"] << ": a process began at step " << x.start << ", the previous ended at " << at;
      at = x.end;
    }
    EXPECT_EQ(at, t["steps"].get<int64_t>()) << t["id"];
  }
}

// The decisions and every measurement, without timings: what must be the same for the same seed.
json decisions_and_metrics(const json& search) {
  json out = {{"decisions", search["decisions"]}, {"best", search["best"]}};
  for (const auto& t : search["trials"]) {
    json rungs = json::array();
    for (const auto& r : t["rungs"]) rungs.push_back({r["rung"], r["steps"], r["metric"]});
    out["trials"][t["id"].get<std::string>()] = {
        {"values", t["values"]}, {"rank", t["rank"]}, {"rungs", rungs}, {"status", t["status"]}};
  }
  return out;
}

double eval_at(const std::string& run_dir, int64_t step) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j["event"] == "eval" && j["step"] == step) return j["val_loss"].is_number() ? j["val_loss"].get<double>() : NAN;
  }
  ADD_FAILURE() << run_dir << " has no evaluation at step " << step;
  return NAN;
}

// The planted case: one learning rate (8.0) diverges; of the others, the largest clearly learns
// fastest in 40 steps, so the best trial is not a near tie.
void write_planted(const test::TempDir& dir, int64_t rungs, const std::string& name) {
  test::write_text(dir.file("base.toml"), kBase);
  test::write_text(dir.file(name), fmt::format("[search]\nbase = \"base.toml\"\nseed = 7\nmax_trials = 8\nrungs = {}\n"
                                               "eta = 2\n[space]\n\"train.lr\" = [0.0003, 0.001, 0.003, 8.0]\n"
                                               "\"model.layers\" = [1, 2]\n",
                                               rungs));
}

TEST(Search, HalvingKeepsTheTrialFullRunsRankBestMeasuresRungsExactlyAndRepeatsItsDecisions) {
  test::TempDir dir;
  write_planted(dir, 3, "halving.toml");
  write_planted(dir, 1, "full.toml");  // the same trials, every one trained to the end
  const auto h = test::run_frugal("search " + dir.file("halving.toml") + " --out " + dir.file("h"));
  ASSERT_EQ(h.exit_code, 0) << h.output;
  EXPECT_NE(h.output.find("search [14/14]"), std::string::npos) << h.output;  // one line per trial-rung
  const auto f = test::run_frugal("search " + dir.file("full.toml") + " --out " + dir.file("f"));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const json H = read_json(dir.file("h/search.json")), F = read_json(dir.file("f/search.json"));
  ASSERT_EQ(H["trials"].size(), 8u);  // the 8 combinations, each once
  EXPECT_EQ(H["rung_steps"], json({10, 20, 40}));
  EXPECT_EQ(H["best"], F["best"]) << "halving chose " << H["best"] << ", the full runs rank " << F["best"] << " best";
  for (const auto& t : H["trials"]) {
    const json full = trial(F, t["id"].get<std::string>());
    EXPECT_EQ(t["values"], full["values"]);
    // Every rung's measurement is the straight run's evaluation at that step, bitwise: the trial
    // stopped and resumed is the trial that ran straight through (same schedule, same weights).
    for (const auto& r : t["rungs"]) {
      if (!r["metric"].is_number()) continue;
      EXPECT_EQ(r["metric"].get<double>(), eval_at(full["run_dir"].get<std::string>(), r["steps"].get<int64_t>()))
          << t["id"] << " rung " << r["rung"];
    }
    if (t["values"]["train.lr"] == "8.0") {  // the diverging learning rate never gets past the first rung
      EXPECT_LE(t["rung"].get<int64_t>(), 0) << t.dump();
      EXPECT_TRUE(t["status"] == "stopped" || t["status"] == "failed") << t.dump();
    }
  }
  const json best = trial(H, H["best"].get<std::string>());
  EXPECT_EQ(best["rung"], 2);
  EXPECT_EQ(best["metric"], trial(F, best["id"].get<std::string>())["metric"]);
  // Compute: the rungs resumed, so the search trained 8 x 10 + 4 x 10 + 2 x 20 steps (less where a
  // trial failed early), against 8 x 40 for the full runs; no step twice.
  EXPECT_LE(H["compute"]["trial_steps"].get<int64_t>(), 160);
  EXPECT_GT(H["compute"]["trial_steps"].get<int64_t>(), 100);
  EXPECT_LE(F["compute"]["trial_steps"].get<int64_t>(), 8 * 40);
  EXPECT_LT(H["compute"]["trial_steps"].get<int64_t>(), F["compute"]["trial_steps"].get<int64_t>());
  expect_no_step_trained_twice(H);
  // Outputs: the best configuration trains as it is; the page is self-contained and has its charts.
  const std::string toml = test::read_text(dir.file("h/best.toml"));
  // The searched value says where it came from: the trial, not a --set the user never gave.
  EXPECT_NE(toml.find("lr = " + best["values"]["train.lr"].get<std::string>() + "  # frugal search, trial " +
                      H["best"].get<std::string>()),
            std::string::npos)
      << toml;
  // best.toml names a run of its own (the base's run.name may be a finished run that training it
  // must not touch), and the command the search prints trains it verbatim.
  const std::string best_run = "h-" + H["best"].get<std::string>();
  EXPECT_NE(toml.find("name = '" + best_run + "'"), std::string::npos) << toml;
  const std::string hint = "(train it: frugal ";
  const size_t at = h.output.find(hint);
  ASSERT_NE(at, std::string::npos) << h.output;
  const std::string printed = h.output.substr(at + hint.size(), h.output.find(')', at) - at - hint.size());
  const auto trained = test::run_frugal(printed + " -q", "cd '" + dir.path() + "' &&");
  EXPECT_EQ(trained.exit_code, 0) << printed << "\n" << trained.output;
  EXPECT_TRUE(fs::exists(dir.file("runs/" + best_run + "/summary.json"))) << printed;
  const std::string html = test::read_text(dir.file("h/search.html"));
  for (const char* id : {"id='pareto-cost'", "id='pareto-speed'", "id='trials'", "id='decisions'", "class='front'"})
    EXPECT_NE(html.find(id), std::string::npos) << id;
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("://"), std::string::npos);
  ASSERT_FALSE(H["pareto"].empty());
  // The same space and seed give the same trials and decisions, also with two trials at once.
  const auto p = test::run_frugal("search " + dir.file("halving.toml") + " --out " + dir.file("p") + " --parallel 2");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const json P = read_json(dir.file("p/search.json"));
  EXPECT_EQ(decisions_and_metrics(P), decisions_and_metrics(H));
  EXPECT_EQ(P["max_running"], 2);
  EXPECT_EQ(H["max_running"], 1);
}

pid_t spawn_frugal(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {FRUGAL_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, FRUGAL_BINARY, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int64_t finished_trial_rungs(const std::string& state_path) {
  try {
    const json s = read_json(state_path);
    int64_t n = 0;
    for (const auto& t : s["trials"]) n += static_cast<int64_t>(t["results"].size());
    return n;
  } catch (const std::exception&) {
    return 0;  // not written yet
  }
}

void write_small(const test::TempDir& dir) {
  test::write_text(dir.file("base.toml"), kBase);
  test::write_text(dir.file("s.toml"),
                   "[search]\nbase = \"base.toml\"\nseed = 11\nmax_trials = 4\nrungs = 2\n"
                   "[space]\n\"train.lr\" = [0.003, 0.01, 0.03]\n\"model.layers\" = [1, 2]\n");
}

// Waits until the search's state records `n` finished trial-rungs (at most two minutes).
void wait_for_trial_rungs(const std::string& state, int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  while (finished_trial_rungs(state) < n && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(Search, StoppedBySignalOrKilledOutrightAndResumedItRepeatsNoFinishedTrialRungAndDecidesTheSame) {
  test::TempDir dir;
  write_small(dir);
  const auto u = test::run_frugal("search " + dir.file("s.toml") + " --out " + dir.file("u"));
  ASSERT_EQ(u.exit_code, 0) << u.output;
  const std::string state = dir.file("k/search_state.json");
  // SIGTERM: the running trial checkpoints, the search writes what it has and exits 75.
  // With a --set flag of no consequence for the figures, which the printed hint must keep.
  pid_t pid = spawn_frugal({"search", dir.file("s.toml"), "--out", dir.file("k"), "--set", "train.log_every=5"},
                           dir.file("k.log"));
  wait_for_trial_rungs(state, 1);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << test::read_text(dir.file("k.log"));
  EXPECT_EQ(WEXITSTATUS(status), 75) << test::read_text(dir.file("k.log"));
  EXPECT_EQ(read_json(dir.file("k/search.json"))["status"], "interrupted");
  const std::string log = test::read_text(dir.file("k.log")), hint = "continue with: frugal ";
  const size_t at = log.find(hint);
  ASSERT_NE(at, std::string::npos) << log;
  const std::string printed = log.substr(at + hint.size(), log.find('\n', at) - at - hint.size());
  EXPECT_NE(printed.find("--set train.log_every=5"), std::string::npos) << printed;
  // SIGKILL of the resumed search: no chance to stop its trials or save anything.
  pid = spawn_frugal(
      {"search", dir.file("s.toml"), "--out", dir.file("k"), "--resume", "auto", "--set", "train.log_every=5"},
      dir.file("k.log"));
  wait_for_trial_rungs(state, finished_trial_rungs(state) + 2);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const int64_t before = finished_trial_rungs(dir.file("k/search_state.json"));
  EXPECT_GE(before, 2);
  EXPECT_LT(before, 6) << "the search had finished before it was killed";
  const auto again = test::run_frugal("search " + dir.file("s.toml") + " --out " + dir.file("k"));
  EXPECT_EQ(again.exit_code, 2) << again.output;  // a folder holding a search needs --resume auto
  EXPECT_NE(again.output.find("--resume auto"), std::string::npos) << again.output;
  const auto r = test::run_frugal(printed);  // the hint, verbatim
  ASSERT_EQ(r.exit_code, 0) << printed << "\n" << test::read_text(dir.file("k.log")) << r.output;
  EXPECT_NE(r.output.find("resumed at rung"), std::string::npos) << r.output;
  const json U = read_json(dir.file("u/search.json")), K = read_json(dir.file("k/search.json"));
  EXPECT_EQ(decisions_and_metrics(K), decisions_and_metrics(U));
  EXPECT_EQ(K["sessions"], 3);
  EXPECT_EQ(K["compute"]["trial_steps"], U["compute"]["trial_steps"]);
  expect_no_step_trained_twice(K);
  expect_no_step_trained_twice(U);
  // Resuming a finished search trains nothing and writes the same ranking.
  const auto done = test::run_frugal(printed);
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_EQ(decisions_and_metrics(read_json(dir.file("k/search.json"))), decisions_and_metrics(U));
  EXPECT_EQ(read_json(dir.file("k/search.json"))["compute"]["trial_sessions"], K["compute"]["trial_sessions"]);
  // Other --set flags on a resume: exit 2 naming what changed, as written, with both values.
  const auto other = test::run_frugal("search " + dir.file("s.toml") + " --out " + dir.file("k") +
                                      " --resume auto --set train.log_every=3");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(
      other.output.find("fixed settings (the search file's sections and --set): began with [\"train.log_every=5\"], "
                        "now [\"train.log_every=3\"]"),
      std::string::npos)
      << other.output;
}

TEST(Search, ABudgetStopRanksWhatWasMeasuredExitsThreeAndALargerBudgetFinishesIt) {
  test::TempDir dir;
  test::write_text(dir.file("base.toml"), kBase);
  test::write_text(dir.file("s.toml"),
                   "[search]\nbase = \"base.toml\"\nseed = 5\nmax_trials = 6\nrungs = 2\n"
                   "[budget]\nusd_per_hour = 360000\n"  // $100 per second of training
                   "[space]\n\"train.lr\" = [0.003, 0.01, 0.03]\n\"model.layers\" = [1, 2]\n");
  const std::string search = "search " + dir.file("s.toml") + " --out " + dir.file("b");
  // A time budget already spent: the search stops before it trains anything, and says so.
  auto r = test::run_frugal(search + " --max-hours 0.000000001");
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("search.max_hours"), std::string::npos) << r.output;
  json B = read_json(dir.file("b/search.json"));
  EXPECT_EQ(B["status"], "budget");
  EXPECT_EQ(B["compute"]["trial_sessions"], 0);
  EXPECT_TRUE(B["best"].is_null());
  // A dollar budget of about four of the nine trial-rungs (each 20 steps, ~$3 here; the machine's
  // speed moves it): the running trial is stopped with a checkpoint, the rest are not started.
  r = test::run_frugal(search + " --resume auto --max-hours 0 --max-usd 13");
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("search.max_usd"), std::string::npos) << r.output;
  B = read_json(dir.file("b/search.json"));
  EXPECT_EQ(B["status"], "budget");
  EXPECT_EQ(B["sessions"], 2);
  const double spent = B["spent"]["usd"].get<double>();
  EXPECT_GT(spent, 0.0);
  EXPECT_LT(spent, 13 * 1.5) << "the running trial was not stopped in time";
  int64_t measured = 0;
  for (const auto& t : B["trials"]) measured += static_cast<int64_t>(t["rungs"].size());
  EXPECT_LT(measured, 9);
  if (measured > 0) {  // ranked from what was measured
    EXPECT_FALSE(B["best"].is_null());
    EXPECT_TRUE(fs::exists(dir.file("b/best.toml")));
  }
  // The budget is not part of what is searched: a larger one continues the same search to its end.
  r = test::run_frugal(search + " --resume auto --max-usd 100000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json C = read_json(dir.file("b/search.json"));
  EXPECT_EQ(C["status"], "completed");
  EXPECT_EQ(C["sessions"], 3);
  expect_no_step_trained_twice(C);
  // A changed space is refused: it would not be the same search.
  r = test::run_frugal(search + " --resume auto --set train.weight_decay=0.0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fixed settings (the search file's sections and --set): began with"), std::string::npos)
      << r.output;
}

// A trial SIGKILLed before its summary (here: every trial, while writing the checkpoint of rung 0
// at step 20) trained the steps its metrics.jsonl logged: they are its `steps` and part of
// compute.trial_steps. They used to count 0.
TEST(Search, AKilledTrialsStepsAreTheStepsItLogged) {
  test::TempDir dir;
  test::write_text(dir.file("base.toml"), kBase);
  test::write_text(dir.file("s.toml"),
                   "[search]\nbase = \"base.toml\"\nseed = 1\nmax_trials = 2\nrungs = 2\n"
                   "[space]\n\"train.lr\" = [0.001, 0.003]\n");
  const auto r =
      test::run_frugal("search " + dir.file("s.toml") + " --out " + dir.file("k"), "FRUGAL_FAULT_KILL_AT=model:1");
  const json K = read_json(dir.file("k/search.json"));
  int64_t steps = 0;
  for (const auto& t : K["trials"]) {
    EXPECT_EQ(t["status"], "failed") << r.output;
    EXPECT_EQ(t["steps"], 20) << t.dump() << "\n" << r.output;
    steps += t["steps"].get<int64_t>();
  }
  EXPECT_EQ(K["compute"]["trial_steps"], steps);
  EXPECT_EQ(steps, 40) << r.output;
}

TEST(Search, ABadSpaceStopsBeforeAnyTrialAndAnInvalidCombinationIsSkippedAndCounted) {
  test::TempDir dir;
  test::write_text(dir.file("base.toml"), kBase);
  test::write_text(dir.file("bad.toml"), "[search]\nbase = \"base.toml\"\n[space]\n\"model.layres\" = [1, 2]\n");
  auto r = test::run_frugal("search " + dir.file("bad.toml") + " --out " + dir.file("bad"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("did you mean 'model.layers'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("bad/trials")));
  // model.heads = 3 does not divide model.embd = 32: that trial is skipped, the search goes on.
  test::write_text(dir.file("heads.toml"),
                   "[search]\nbase = \"base.toml\"\nmax_trials = 4\nrungs = 1\n[train]\n"
                   "steps = 10\n[space]\n\"model.heads\" = [2, 3]\n");
  r = test::run_frugal("search " + dir.file("heads.toml") + " --out " + dir.file("heads"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json S = read_json(dir.file("heads/search.json"));
  ASSERT_EQ(S["trials"].size(), 1u);  // the space holds 2 points, one of them invalid
  EXPECT_EQ(S["trials"][0]["values"]["model.heads"], "2");
  EXPECT_GE(S["skipped_invalid"].get<int64_t>(), 1);
  EXPECT_NE(S["skipped"][0]["why"].get<std::string>().find("must divide model.embd"), std::string::npos);
  EXPECT_NE(r.output.find("invalid"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace frugal::search_test
