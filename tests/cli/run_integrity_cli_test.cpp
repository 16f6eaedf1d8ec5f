// A run is never silently changed or damaged, as a user meets it on the command line: a resume
// told only the run's name continues that run (its data, shape and schedule) bitwise; one asked for
// other data exits 2 naming the key and leaves every file of the run as it was; a deliberate safe
// change is said and recorded; and on a shards dataset with its own vocabulary, `smoke` and the
// config `frugal tune` writes work as printed. What a user would otherwise find out too late is said
// at once: a run that is training now, a WSD decay undone by more steps, a target that only the end
// can check; a FIFO or a planted link is refused by name, never waited on or followed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "frugal/core/dir_lock.h"
#include "frugal/tune/tuner.h"
#include "test_util.h"

namespace frugal::run_integrity_cli_test {
namespace {
namespace fs = std::filesystem;
using test::run_frugal;

// Every file under `dir` with its bytes, to show that a refused command changed nothing.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".lock")
      files[e.path().string()] = test::read_text(e.path().string());
  return files;
}

std::string some_text() {
  std::string t;
  for (int i = 0; i < 400; ++i) t += fmt::format("line {} of a small text: the river runs to the sea.\n", i * 7 % 53);
  return t;
}

TEST(RunIntegrityCli, AResumeToldOnlyTheRunsNameContinuesItsDataShapeAndScheduleBitwise) {
  test::TempDir dir;
  test::write_text(dir.file("a.txt"), some_text());
  const std::string run = test::tiny_sets(dir.path()) + " --set data.source=text:" + dir.file("a.txt") +
                          " --set train.steps=20 --set checkpoint.every_steps=5";
  auto straight = run_frugal("train -q" + run + " --set run.name=straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto first = run_frugal("train -q" + run + " --set run.name=r --stop-at-step 10");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string config_before = test::read_text(dir.file("r/config.toml"));

  // Other data, asked for: exit 2 naming the key and both values; nothing in the run changes.
  const auto before = snapshot(dir.file("r"));
  auto other = run_frugal("train --set run.out_dir=" + dir.path() +
                          " --set run.name=r --set data.source=builtin:arith "
                          "--resume auto");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("data.source: the run has 'text:" + dir.file("a.txt") + "', --set gives 'builtin:arith'"),
            std::string::npos)
      << other.output;
  EXPECT_TRUE(snapshot(dir.file("r")) == before) << "a refused resume changed the run directory";

  // Nothing asked for: the run's own config, to the end, the same as the uninterrupted run.
  auto again = run_frugal("train --set run.out_dir=" + dir.path() + " --set run.name=r --resume auto");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("differs"), std::string::npos) << again.output;
  const auto s = nlohmann::json::parse(test::read_text(dir.file("r/summary.json")));
  EXPECT_EQ(s["steps"], 20);
  EXPECT_FALSE(s.contains("config_changes")) << s.dump();
  EXPECT_TRUE(test::read_text(dir.file("r/final/model.safetensors")) ==
              test::read_text(dir.file("straight/final/model.safetensors")))
      << "the resumed run did not continue the run it resumed";
  EXPECT_NE(test::read_text(dir.file("r/config.toml")).find("source = 'text:" + dir.file("a.txt") + "'"),
            std::string::npos);
  EXPECT_NE(config_before.find("source = 'text:"), std::string::npos);
}

TEST(RunIntegrityCli, ADeliberateChangeOfASafeKeyIsSaidAndRecordedAcrossResumes) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set checkpoint.every_steps=5";
  ASSERT_EQ(run_frugal("train -q" + sets + " --set train.steps=20 --stop-at-step 10").exit_code, 0);
  auto more = run_frugal("train" + sets + " --set train.steps=25 --resume auto --stop-at-step 15");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("resume: train.steps = 20 -> 25 (--set), as asked"), std::string::npos) << more.output;
  // The next resume continues with 25 (the run's value now) and keeps the record.
  auto rest = run_frugal("train -q --set run.out_dir=" + dir.path() + " --resume auto");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto s = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  EXPECT_EQ(s["steps"], 25);
  ASSERT_EQ(s["config_changes"].size(), 1u) << s.dump();
  EXPECT_EQ(s["config_changes"][0]["key"], "train.steps");
  EXPECT_EQ(s["config_changes"][0]["from"], "20");
  EXPECT_EQ(s["config_changes"][0]["to"], "25");
  EXPECT_EQ(s["config_changes"][0]["at_step"], 10);
}

// More train.steps for a WSD run stopped in its decay moves the decay later: the rate goes back up
// to the peak. Allowed, and said (with the way to finish the decay instead); a run stopped before
// its decay is extended without a word.
TEST(RunIntegrityCli, ExtendingAWsdRunInItsDecayWarnsThatTheRateGoesBackUp) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) +
                           " --set checkpoint.every_steps=5 --set train.schedule=wsd --set train.decay_fraction=0.5";
  ASSERT_EQ(run_frugal("train -q" + sets + " --set run.name=late --set train.steps=20 --stop-at-step 15").exit_code, 0);
  auto more = run_frugal("train" + sets + " --set run.name=late --set train.steps=40 --resume auto --stop-at-step 16");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("warning: resume: the WSD decay had begun (at step 10 of train.steps = 20; this "
                             "checkpoint is at step 15); with train.steps = 40 it begins at step 20, so the rate "
                             "goes back up"),
            std::string::npos)
      << more.output;
  EXPECT_NE(more.output.find("(the peak, train.lr, until step 20). To finish the decay instead, keep "
                             "train.steps = 20"),
            std::string::npos)
      << more.output;
  ASSERT_EQ(run_frugal("train -q" + sets + " --set run.name=early --set train.steps=20 --stop-at-step 5").exit_code, 0);
  auto early = run_frugal("train" + sets + " --set run.name=early --set train.steps=40 --resume auto --stop-at-step 6");
  ASSERT_EQ(early.exit_code, 0) << early.output;
  EXPECT_EQ(early.output.find("WSD decay had begun"), std::string::npos) << early.output;
}

// A finished cosine run extended with more train.steps: the decay is recomputed over the new
// length, so the rate jumps back up from the floor. Allowed, and said, with the schedule that
// extends runs without it.
TEST(RunIntegrityCli, ExtendingACosineRunWarnsThatItsRateMoves) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set checkpoint.every_steps=10 --set run.name=cos";
  ASSERT_EQ(run_frugal("train -q" + sets + " --set train.steps=20").exit_code, 0);
  auto more = run_frugal("train" + sets + " --set train.steps=40 --resume auto --stop-at-step 21");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("warning: resume: the cosine decay follows train.steps, so with 40 instead of 20 the "
                             "rate at step 20 is"),
            std::string::npos)
      << more.output;
  EXPECT_NE(more.output.find("train.schedule = \"wsd\" extends a run"), std::string::npos) << more.output;
}

// A target is checked at evaluations: without any before the end, it cannot stop the run early,
// and the start says so (with the key to set); --quiet silences it, and the smoke report too.
TEST(RunIntegrityCli, ATargetWithoutEvaluationsBeforeTheEndIsSaidToWaitForTheEnd) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set train.steps=4 --set train.target_loss=0.5";
  auto none = run_frugal("train" + sets + " --set run.name=none --set train.eval_every=0");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("warning: train.target_loss = 0.5 is checked at evaluations, and train.eval_every = 0 "
                             "evaluates only at the end"),
            std::string::npos)
      << none.output;
  // --quiet means quiet: no warning, and no smoke-test report when it passes.
  auto quiet = run_frugal("train -q" + sets +
                          " --set run.name=quiet --set train.eval_every=0 --set "
                          "train.smoke_first=true");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("is checked at evaluations"), std::string::npos) << quiet.output;
  EXPECT_EQ(quiet.output.find("smoke test:"), std::string::npos) << quiet.output;
  auto some = run_frugal("train" + sets + " --set run.name=some --set train.eval_every=2");
  ASSERT_EQ(some.exit_code, 0) << some.output;
  EXPECT_EQ(some.output.find("is checked at evaluations"), std::string::npos) << some.output;
}

// A second `train` on a run that is training now is told it is running (and by which pid), not to
// pass --resume auto (which the lock then refuses); `plan` leaves its plan.json alone. A .lock planted as a symbolic
// link is refused by name, its target untouched.
TEST(RunIntegrityCli, ASecondTrainOnARunningRunIsToldItIsRunning) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set run.name=r --set train.steps=10";
  ASSERT_EQ(run_frugal("train -q" + sets).exit_code, 0);
  {
    const DirLock running(dir.file("r"));  // as the training process holds it
    auto again = run_frugal("train" + sets);
    EXPECT_EQ(again.exit_code, 2) << again.output;
    EXPECT_NE(again.output.find("is in use by another frugal process"), std::string::npos) << again.output;
    EXPECT_EQ(again.output.find("--resume auto to continue"), std::string::npos) << again.output;
    // `plan` does not put its plan.json into a run that is training (the run writes its own).
    auto plan = run_frugal("plan --from " + dir.file("r"));
    EXPECT_EQ(plan.exit_code, 0) << plan.output;
    EXPECT_NE(plan.output.find(dir.file("r") + " is training now: its plan.json is left as it is"), std::string::npos)
        << plan.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("r/plan.json")));
  }
  std::filesystem::remove(dir.file("r/.lock"));
  test::write_text(dir.file("precious.txt"), "keep me");
  std::filesystem::create_symlink(dir.file("precious.txt"), dir.file("r/.lock"));
  auto linked = run_frugal("train" + sets + " --resume auto");
  EXPECT_EQ(linked.exit_code, 2) << linked.output;
  EXPECT_NE(linked.output.find("r/.lock is a symbolic link"), std::string::npos) << linked.output;
  EXPECT_EQ(test::read_text(dir.file("precious.txt")), "keep me");
}

// A FIFO where a run's metrics.jsonl or summary.json belongs would hang a reader that opens it
// (waiting for a writer that never comes): `report` and `plan --from` refuse it by name instead.
TEST(RunIntegrityCli, ReportAndPlanRefuseAFifoInsteadOfWaitingOnIt) {
  test::TempDir dir;
  ASSERT_EQ(run_frugal("train -q" + test::tiny_sets(dir.path()) + " --set run.name=r --set train.steps=10").exit_code,
            0);
  for (const std::string file : {"metrics.jsonl", "summary.json"}) {
    SCOPED_TRACE(file);
    const std::string path = dir.file("r/" + file), kept = path + ".kept";
    std::filesystem::rename(path, kept);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
    for (const std::string& cmd : {"report " + dir.file("r"), "plan --from " + dir.file("r")}) {
      auto r = run_frugal(cmd);
      EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.output;
      EXPECT_NE(r.output.find(path + " is a FIFO (named pipe), not a regular file"), std::string::npos) << cmd << "\n"
                                                                                                        << r.output;
    }
    std::filesystem::remove(path);
    std::filesystem::rename(kept, path);
  }
}

// The command printed after a stop signal continues the run as printed: it names only the run (the
// resume takes the rest from the checkpoint). The test appends --stop-at-step to end it early.
TEST(RunIntegrityCli, ThePrintedResumeCommandAfterAStopSignalContinuesTheRun) {
  test::TempDir dir;
  // A folder with a space in its name: the printed command quotes it.
  std::string train = "'" + std::string(FRUGAL_BINARY) + "' train";
  for (const auto& o : test::tiny_overrides(dir.path() + "/out dir")) train += " --set '" + o + "'";
  train += " --set run.name=r-1 --set train.steps=100000 --set train.log_every=1";
  const std::string run = dir.path() + "/out dir/r-1";
  const std::string script =
      "(" + train + " & pid=$!; for i in $(seq 1 600); do [ -s '" + run +
      "/metrics.jsonl' ] && break; sleep 0.05; done; kill -TERM $pid; wait $pid; echo rc=$?) 2>&1";
  std::string out;
  FILE* p = popen(script.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  ASSERT_NE(out.find("rc=75"), std::string::npos) << out;
  const std::string hint = "continue with: frugal ";
  const size_t at = out.find(hint);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string printed = out.substr(at + hint.size(), out.find('\n', at) - at - hint.size());
  const int64_t stopped = nlohmann::json::parse(test::read_text(run + "/summary.json"))["steps"];
  auto again = run_frugal(printed + " -q --stop-at-step " + std::to_string(stopped + 3), "cd / &&");
  ASSERT_EQ(again.exit_code, 0) << printed << "\n" << again.output;
  const auto s = nlohmann::json::parse(test::read_text(run + "/summary.json"));
  EXPECT_EQ(s["steps"], stopped + 3);
  EXPECT_FALSE(s.contains("config_changes")) << s.dump();
}

// `frugal smoke` and `frugal tune`'s config take the vocabulary from the manifest as `train` does
// (smoke failed "set model.vocab", and tuned.toml wrote vocab = 256, which `train` then refused).
TEST(RunIntegrityCli, OnShardsWithTheirOwnVocabularySmokeAndTheTunedConfigWorkAsPrinted) {
  FRUGAL_NEED_FEATURE("sentencepiece");
  test::TempDir dir;
  test::write_text(dir.file("corpus.txt"), some_text());
  auto prep = run_frugal(fmt::format("prepare '{}' --out '{}' --tokenizer sentencepiece --vocab 300",
                                     dir.file("corpus.txt"), dir.file("ds")));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  // The command prepare prints trains on it as printed (the vocabulary comes from the manifest);
  // the test appends a tiny shape and two steps.
  const std::string hint = "train with:   frugal ";
  const size_t at = prep.output.find(hint);
  ASSERT_NE(at, std::string::npos) << prep.output;
  const std::string printed = prep.output.substr(at + hint.size(), prep.output.find('\n', at) - at - hint.size());
  auto hinted =
      run_frugal(printed + " -q" + test::tiny_sets(dir.path()) + " --set run.name=hinted --set train.steps=2");
  EXPECT_EQ(hinted.exit_code, 0) << printed << "\n" << hinted.output;
  const std::string data = " --set data.source=shards:" + dir.file("ds");
  auto smoke = run_frugal("smoke" + test::tiny_sets(dir.path()) + data);
  EXPECT_EQ(smoke.exit_code, 0) << smoke.output;

  std::vector<std::string> sets = test::tiny_overrides(dir.path());
  sets.push_back("data.source=shards:" + dir.file("ds"));
  sets.push_back("run.name=tuned");
  const std::string toml = tuned_config_toml("", sets, {}, TuneReport{});
  const int64_t vocab =
      nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")))["tokenizer"]["vocab"].get<int64_t>();
  ASSERT_NE(vocab, 256);  // the test needs a vocabulary other than model.vocab's default
  EXPECT_NE(toml.find(fmt::format("vocab = {}  # file", vocab)), std::string::npos) << toml;
  test::write_text(dir.file("tuned.toml"), toml);
  auto train = run_frugal("train -q " + dir.file("tuned.toml"));
  EXPECT_EQ(train.exit_code, 0) << train.output;
}

// A resume refused for a changed optimizer prints how to start a new run from its weights: the
// export and the init_from it names work as printed.
TEST(RunIntegrityCli, TheHintOfARefusedResumeWorksAsPrinted) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set train.steps=8 --set checkpoint.every_steps=4";
  auto r = run_frugal("train --quiet" + sets + " --set run.name=a");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_frugal("train --quiet" + sets + " --set run.name=a --set train.steps=12 --set train.optimizer=torch_adamw" +
                 " --resume auto");
  ASSERT_EQ(r.exit_code, 2) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("frugal export (\\S+) --weights (\\S+) --out DIR, then "
                                           "--set run.name=NEW --set model.init_from=hf:DIR")))
      << r.output;
  const std::string hf = dir.file("hf");
  r = run_frugal(fmt::format("export {} --weights {} --out {}", m[1].str(), m[2].str(), hf));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_frugal("train --quiet" + sets + " --set train.optimizer=torch_adamw --set run.name=NEW" +
                 " --set model.init_from=hf:" + hf);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// A dataset prepared again in place from other text is not the checkpoint's: the resume is
// refused by name before anything is written; prepared again from the same text, it resumes.
TEST(RunIntegrityCli, AResumeOnADatasetPreparedAgainFromOtherInputsIsRefused) {
  test::TempDir dir;
  auto corpus = [&](const char* word) {
    std::string text;
    for (int i = 0; text.size() < 20000; ++i) text += fmt::format("{} line {} of the corpus\n", word, i);
    test::write_text(dir.file("corpus.txt"), text);
    return run_frugal(fmt::format("prepare '{}' --out '{}' --quiet --force", dir.file("corpus.txt"), dir.file("ds")));
  };
  ASSERT_EQ(corpus("first").exit_code, 0);
  const std::string sets = test::tiny_sets(dir.path()) + " --set data.source=shards:" + dir.file("ds") +
                           " --set train.steps=8 --set checkpoint.every_steps=4 --set run.name=a";
  auto r = run_frugal("train --quiet" + sets + " --stop-at-step 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(corpus("first").exit_code, 0);  // the same inputs again: the same shards
  r = run_frugal("train --quiet" + sets + " --resume auto --stop-at-step 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(corpus("other").exit_code, 0);
  const std::string metrics = test::read_text(dir.file("a/metrics.jsonl"));
  r = run_frugal("train --quiet" + sets + " --resume auto");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is not the dataset this checkpoint trained on"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_text(dir.file("a/metrics.jsonl")), metrics);  // nothing written
  EXPECT_FALSE(fs::exists(dir.file("a/checkpoints/step-00000008")));
}

// Bad data found once the run has started (a shard failing its checksum at the first batch) exits 2
// and leaves no run directory behind: once the data is fixed, as the message says, the same command
// trains. A labelled-sample dataset for the built-in language model is refused before anything.
TEST(RunIntegrityCli, DataThatFailsBeforeTheFirstStepLeavesNoRunDirectory) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; text.size() < 20000; ++i) text += fmt::format("line {} of the corpus\n", i);
  test::write_text(dir.file("corpus.txt"), text);
  const std::string prepare = fmt::format("prepare '{}' --out '{}' --quiet", dir.file("corpus.txt"), dir.file("ds"));
  ASSERT_EQ(run_frugal(prepare).exit_code, 0);
  test::flip_byte(dir.file("ds/train_000000.frs"), 100);
  const std::string train =
      "train --quiet" + test::tiny_sets(dir.path()) + " --set train.steps=2 --set data.source=shards:" + dir.file("ds");
  auto r = run_frugal(train);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("demo"))) << "a run directory was left behind";
  ASSERT_EQ(run_frugal(prepare + " --force").exit_code, 0);
  r = run_frugal(train);
  EXPECT_EQ(r.exit_code, 0) << r.output;

  test::write_text(dir.file("table.csv"), "a,b,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
  ASSERT_EQ(run_frugal(fmt::format("prepare '{}' --format csv --label-column y --out '{}' --quiet",
                                   dir.file("table.csv"), dir.file("recds")))
                .exit_code,
            0);
  r = run_frugal("train --quiet" + test::tiny_sets(dir.path()) +
                 " --set run.name=rec --set data.source=records:" + dir.file("recds"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("holds labelled samples"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("rec")));
}

// A kill while the final weights or summary.json were written left their temporary files
// (final/model.safetensors.tmp-<pid>, as large as the model) forever: the start-time sweep only
// looked under checkpoints/. The resume removes a dead writer's; a live process's stays.
TEST(RunIntegrityCli, AResumeRemovesTheTemporaryFilesOfAKilledWrite) {
  test::TempDir dir;
  const std::string run = test::tiny_sets(dir.path()) + " --set checkpoint.every_steps=5";
  auto first = run_frugal("train -q" + run + " --stop-at-step 10");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string dead_weights = dir.file("demo/final/model.safetensors.tmp-4999999");  // above any Linux pid
  const std::string dead_summary = dir.file("demo/summary.json.tmp-4999999");
  const std::string live = dir.file("demo/metrics.jsonl.tmp-1");  // init: alive
  for (const auto& f : {dead_weights, dead_summary, live}) test::write_text(f, std::string(1000, 'x'));
  auto resumed = run_frugal("train -q" + run + " --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(fs::exists(dead_weights)) << "a killed write's temporary weights were left behind";
  EXPECT_FALSE(fs::exists(dead_summary));
  EXPECT_TRUE(fs::exists(live)) << "a live process's temporary file was removed";
}

// A run.out_dir where no run directory can be made (here under a file: ENOTDIR, as a read-only
// file system gives EROFS) is bad input, exit 2 naming the path and what to change; it was exit 1.
TEST(RunIntegrityCli, ARunDirectoryThatCannotBeCreatedIsBadInputNamingTheOutDir) {
  test::TempDir dir;
  test::write_text(dir.file("file.txt"), "not a directory");
  auto r = run_frugal("train -q" + test::tiny_sets(dir.path()) + " --set run.out_dir=" + dir.file("file.txt/runs"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("file.txt/runs/demo")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("choose another run.out_dir"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_text(dir.file("file.txt")), "not a directory");
}

// A resume continues the run past (or away from) its final/ weights: they go, so sample and export
// read the newest checkpoint until the run's end writes final/ again. Here the resumed session is
// stopped at once (a stop signal from its start); final/ used to stay, and would have been read
// as the run's weights however far the resumed run went.
TEST(RunIntegrityCli, AResumeRemovesTheFinalWeightsItContinuesPast) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set train.steps=20 --set checkpoint.every_steps=5";
  ASSERT_EQ(run_frugal("train -q" + sets + " --stop-at-step 10").exit_code, 0);
  ASSERT_TRUE(fs::exists(dir.file("demo/final/model.safetensors")));
  auto stopped = run_frugal("train" + sets + " --resume auto", "FRUGAL_FAULT_SIGNAL_AT_START=1");
  ASSERT_EQ(stopped.exit_code, 75) << stopped.output;
  EXPECT_NE(stopped.output.find("resume: removed " + dir.file("demo/final")), std::string::npos) << stopped.output;
  EXPECT_FALSE(fs::exists(dir.file("demo/final/model.safetensors")));
  auto sample = run_frugal("sample " + dir.file("demo") + " -p 1+1= -n 2 --json");
  EXPECT_EQ(sample.exit_code, 0) << sample.output;
  EXPECT_NE(sample.output.find("checkpoints/step-00000010/model.safetensors"), std::string::npos) << sample.output;
}

// --resume PATH to one of the run's own earlier checkpoints branches the run there: the newer
// checkpoints (the run it branches from) go, so a later --resume auto continues the branch. They
// used to stay, and --resume auto went back to the abandoned step 20.
TEST(RunIntegrityCli, AResumeFromAnEarlierCheckpointOfTheRunDropsTheNewerOnes) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path()) + " --set train.steps=20 --set checkpoint.every_steps=5";
  ASSERT_EQ(run_frugal("train -q" + sets).exit_code, 0);
  const std::string ckpts = dir.file("demo/checkpoints/");
  ASSERT_TRUE(fs::exists(ckpts + "step-00000020"));
  auto branch = run_frugal("train" + sets + " --resume " + ckpts + "step-00000010 --stop-at-step 12");
  ASSERT_EQ(branch.exit_code, 0) << branch.output;
  EXPECT_NE(branch.output.find("it belongs to the run this one branches from"), std::string::npos) << branch.output;
  for (const char* gone : {"step-00000015", "step-00000020"}) EXPECT_FALSE(fs::exists(ckpts + gone)) << gone;
  EXPECT_TRUE(fs::exists(ckpts + "step-00000012"));
  auto later = run_frugal("train" + sets + " --resume auto");
  ASSERT_EQ(later.exit_code, 0) << later.output;
  EXPECT_NE(later.output.find("step-00000012"), std::string::npos) << later.output;
}

}  // namespace
}  // namespace frugal::run_integrity_cli_test
