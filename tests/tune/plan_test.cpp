// `frugal plan` end to end on tiny configs: the table and a JSON whose figures agree with each
// other and with the price table; a run directory as the source; an instance projection scaled by
// peak FLOP/s; bad input once, before any probe; `frugal train` with plan.before_train refusing a
// limit the projection exceeds before step 1, and recording projected against measured otherwise.
// PlanAccuracy: a demo-shaped run's measured time and cost fall inside the range projected for it.
#include "frugal/tune/plan.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "frugal/tune/projection.h"
#include "test_util.h"

namespace frugal::plan_test {
namespace {
namespace fs = std::filesystem;

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(test::read_text(path)); }

void expect_ordered(const nlohmann::json& r, const std::string& what) {
  EXPECT_LE(r["low"].get<double>(), r["central"].get<double>()) << what << ": " << r.dump();
  EXPECT_LE(r["central"].get<double>(), r["high"].get<double>()) << what << ": " << r.dump();
  EXPECT_GT(r["low"].get<double>(), 0) << what;
}

// The tiny run priced as the price table's cpu-2vcpu row ($0.08/h on demand, $0.03/h spot, 30 W).
TEST(CostPlan, TinyConfigPrintsATableAndWritesAConsistentJson) {
  test::TempDir dir;
  auto r =
      test::run_frugal("plan" + test::tiny_sets(dir.path()) +
                       " --set budget.instance=cpu-2vcpu --set plan.probe_steps=4 --set train.steps=500 --json-out " +
                       dir.file("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"wall time", "on demand at $0.0800/h", "spot at $0.0300/h", "energy at 30 W",
                        "where the time goes", "evaluations", "Young-Daly", "the probe took", "wrote "})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  const nlohmann::json j = read_json(dir.file("plan.json"));
  EXPECT_EQ(j["steps"], 500);
  EXPECT_EQ(j["tokens_per_step"], 8 * 16);  // data.micro_batch x model.block, one micro-batch a step
  EXPECT_EQ(j["tokens"], 500 * 8 * 16);
  EXPECT_NE(r.output.find("64000 tokens (128 a step)"), std::string::npos) << r.output;
  EXPECT_EQ(j["figures"]["source"], "probe");
  EXPECT_EQ(j["figures"]["step_s"].size(), 4u);
  EXPECT_GT(j["figures"]["probe_s"].get<double>(), 0);
  EXPECT_GT(j["figures"]["startup_s"].get<double>(), 0);
  EXPECT_GT(j["figures"]["eval_s"].get<double>(), 0);
  EXPECT_TRUE(j["figures"]["saved"].get<bool>());        // the probe's final save was measured
  EXPECT_GT(j["figures"]["launch_s"].get<double>(), 0);  // this frugal process's own launch
  expect_ordered(j["seconds"], "seconds");
  // Counts by the trainer's rules: evaluations at 15, 30, ..., 495 and the final one; the final save.
  EXPECT_EQ(j["terms"]["evals"], 34);
  EXPECT_EQ(j["terms"]["saves"], 1);
  // The central time is the sum of its terms; $, kWh and CO2 follow it at the table's row.
  const auto& t = j["terms"];
  double sum = 0;
  for (const char* k : {"launch_s", "startup_s", "first_step_s", "steps_s", "evals_s", "saves_s", "finish_s"})
    sum += t[k].get<double>();
  const double central = j["seconds"]["central"].get<double>();
  EXPECT_NEAR(sum, central, 1e-9 * central);
  EXPECT_NEAR(j["on_demand"]["usd"]["central"].get<double>(), central / 3600 * 0.08, 1e-12);
  EXPECT_NEAR(j["on_demand"]["kwh"]["central"].get<double>(), central / 3600 * 0.030, 1e-12);
  EXPECT_NEAR(j["on_demand"]["kg_co2"]["central"].get<double>(), central / 3600 * 0.030 * 0.475, 1e-12);
  const double spot = j["spot"]["seconds"]["central"].get<double>();
  EXPECT_GT(spot, central);  // preemptions at checkpoint.mtbf_minutes cost time
  EXPECT_NEAR(j["spot"]["usd"]["central"].get<double>(), spot / 3600 * 0.03, 1e-12);
  EXPECT_EQ(j["billed"], "on_demand");
  EXPECT_TRUE(j["within_limit"].get<bool>());
  // No run directory was left behind by the probe, and none was made for the run.
  EXPECT_FALSE(fs::exists(dir.file("demo/metrics.jsonl")));
}

// A LoRA run's plan measures it as it trains: its probe holds the adapters' gradients and moments
// alone, which the figures say.
TEST(CostPlan, ALoraRunsPlanCountsItsTrainableParametersAndTheirState) {
  test::TempDir dir;
  nlohmann::json j[2];
  for (int lora = 0; lora < 2; ++lora) {
    const std::string out = dir.file(lora ? "lora.json" : "full.json");
    auto r = test::run_frugal("plan" + test::tiny_sets(dir.path()) +
                              " --set plan.probe_steps=3 --set lora.rank=" + (lora ? "2" : "0") + " --json-out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    j[lora] = read_json(out);
    if (lora) {
      EXPECT_NE(r.output.find("of them train"), std::string::npos) << r.output;
    }
  }
  const auto& full = j[0]["figures"];
  const auto& lora = j[1]["figures"];
  EXPECT_EQ(full["trainable_params"], full["params"]);
  EXPECT_LT(lora["trainable_params"].get<int64_t>() * 5, lora["params"].get<int64_t>());
  EXPECT_LT(lora["optimizer_state_mb"].get<double>() * 5, full["optimizer_state_mb"].get<double>());
}

// The schedule outlook on a hand-made projection: 1 s launch, 2 s start-up, a 3 s first step,
// then 0.5 s a step, a 10 s save. WSD over 600 steps (warm-up 50, the last 20% decaying) decays
// from step 481, 6 + 479 x 0.5 = 245.5 s in; cosine from step 51. A deadline 200 s away with a
// 10 s margin lets 1 + 347 steps fit (6 s, then 347 x 0.5 < 174 s).
TEST(CostPlan, TheScheduleOutlookPlacesTheDecayAndTheDeadlineInSteps) {
  CostPlan plan;
  plan.steps = 600;
  plan.projection.launch_s = 1;
  plan.projection.startup_s = 2;
  plan.projection.first_step_s = 3;
  plan.projection.step_s = {0.4, 0.5, 0.6};
  plan.inputs.save_s = 10;
  plan.projection.on_demand.priced = true;
  plan.projection.on_demand.seconds = {300, 400, 500};
  plan.projection.on_demand.usd = {1.5, 2, 2.5};
  Config c;
  c.train.steps = 600;
  c.train.warmup_steps = 50;
  c.train.schedule = LrSchedule::kWsd;
  c.train.decay_fraction = 0.2;
  c.train.target_loss = 2.3;
  c.checkpoint.deadline = "1200";
  c.checkpoint.deadline_margin_s = 10;
  c.checkpoint.deadline_action = DeadlineAction::kDecay;
  plan.schedule = plan_schedule(c, plan, 1000);
  EXPECT_EQ(plan.schedule.kind, "wsd");
  EXPECT_EQ(plan.schedule.decay_start, 481);
  EXPECT_DOUBLE_EQ(plan.schedule.decay_start_s, 245.5);
  EXPECT_EQ(plan.schedule.deadline_steps, 348);
  EXPECT_DOUBLE_EQ(plan.schedule.deadline_in_s, 200);
  const std::string table = plan.table();
  for (const char* said : {"schedule: wsd: warm-up 50 steps, the peak rate to step 480", "train.target_loss = 2.3",
                           "about 348 of the 600 steps fit", "the decay moves to end there",
                           // the table prices all 600 steps; the run ends at the deadline, 200 of 400 s
                           "50% of the wall time above (which is for all 600 steps), and costs about $1.00 of the "
                           "central $2.00"})
    EXPECT_NE(table.find(said), std::string::npos) << said << "\n" << table;
  const nlohmann::json j = plan.to_json();
  EXPECT_EQ(j["schedule"]["decay_start_step"], 481);
  EXPECT_EQ(j["deadline"]["steps_that_fit"], 348);
  EXPECT_EQ(j["deadline"]["action"], "decay");
  // Cosine decays right after the warm-up; a deadline far away lets the whole run fit; none, no line.
  c.train.schedule = LrSchedule::kCosine;
  c.checkpoint.deadline = "100000";
  plan.schedule = plan_schedule(c, plan, 1000);
  EXPECT_EQ(plan.schedule.decay_start, 51);
  EXPECT_DOUBLE_EQ(plan.schedule.decay_start_s, 6 + 49 * 0.5);
  EXPECT_EQ(plan.schedule.deadline_steps, -1);
  EXPECT_NE(plan.table().find("the whole run fits"), std::string::npos) << plan.table();
  c.checkpoint.deadline = "";
  plan.schedule = plan_schedule(c, plan, 1000);
  EXPECT_EQ(plan.table().find("deadline"), std::string::npos) << plan.table();
  EXPECT_FALSE(plan.to_json().contains("deadline"));
}

// Bad input is reported once with exit 2, before any probe: an unknown instance lists the table's
// names; a config that cannot train names its cause once.
TEST(CostPlan, BadInputExitsTwoOnceBeforeProbing) {
  test::TempDir dir;
  auto r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + " --instance gpu-9000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--instance \"gpu-9000\" is not in the price table"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("known: cpu-16vcpu, cpu-2vcpu, gpu-1xa100"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("probing"), std::string::npos) << r.output;
  r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + " --set data.source=text:" + dir.file("missing.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string cause = dir.file("missing.txt");
  const size_t first = r.output.find(cause);
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(cause, first + 1), std::string::npos) << "reported more than once:\n" << r.output;
  r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + " --instance cpu-2vcpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // no peak_tflops in its row: nothing to scale by
  EXPECT_NE(r.output.find("no peak_tflops"), std::string::npos) << r.output;
}

// A finished run directory as the source: its log windows' step times, and its config unless one
// is given; a partial one (no summary.json) still projects. Then onto an instance by peak FLOP/s.
TEST(CostPlan, ARunDirectoryIsASourceAndAnInstanceScalesItByPeak) {
  test::TempDir dir;
  auto t = test::run_frugal("train" + test::tiny_sets(dir.path()) +
                            " --set run.name=done --set train.log_every=2 --set monitor.peak_tflops=0.5 --quiet");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string run = dir.file("done");
  auto r = test::run_frugal("plan --from " + run + " --set train.steps=3000 --json-out " + dir.file("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = read_json(dir.file("p.json"));
  EXPECT_EQ(j["figures"]["source"], "run");
  EXPECT_EQ(j["steps"], 3000);
  EXPECT_EQ(j["run_name"], "done");  // the run's own config.toml
  // --json: the same plan as one JSON object on stdout (the table goes to stderr), as train --json.
  auto js = test::run_frugal("plan --from " + run + " --set train.steps=3000 --json 2>/dev/null | cat");
  EXPECT_EQ(nlohmann::json::parse(js.output)["steps"], 3000) << js.output;
  // The windows' step times, recomputed here from metrics.jsonl: elapsed less evaluations and saves.
  std::vector<double> windows;
  nlohmann::json prev;
  for (const auto& m : test::read_jsonl(run + "/metrics.jsonl")) {
    if (m.value("event", "") != "step") continue;
    if (!prev.is_null())
      windows.push_back((m["elapsed_s"].get<double>() - prev["elapsed_s"].get<double>() - m["eval_s"].get<double>() -
                         m["checkpoint_s"].get<double>()) /
                        (m["step"].get<double>() - prev["step"].get<double>()));
    prev = m;
  }
  ASSERT_EQ(j["figures"]["step_s"].size(), windows.size());
  EXPECT_NEAR(j["terms"]["step_s"]["central"].get<double>(), median_of(windows), 1e-12);
  const nlohmann::json summary = read_json(run + "/summary.json");
  EXPECT_DOUBLE_EQ(j["figures"]["startup_s"].get<double>(), summary["startup_s"].get<double>());
  EXPECT_DOUBLE_EQ(j["figures"]["save_s"].get<double>(), summary["checkpoint"]["stall_s_mean"].get<double>());
  // The run's summary lists each save's stall: one per save, summing to the total.
  const nlohmann::json& each = summary["checkpoint"]["stall_s_each"];
  ASSERT_EQ(each.size(), summary["checkpoint"]["saves"].get<size_t>());
  ASSERT_GT(each.size(), 0u);
  double sum = 0;
  for (const auto& x : each) sum += x.get<double>();
  EXPECT_NEAR(sum, summary["checkpoint"]["stall_s_total"].get<double>(), 1e-9);
  EXPECT_EQ(j["tokens"], 3000 * summary["tokens"].get<int64_t>() / summary["steps"].get<int64_t>());

  // Onto gpu-1xh100 (peak_tflops 989 in the table): steps x 0.5 / 989, the range 3x each way.
  r = test::run_frugal("plan --from " + run + " --instance gpu-1xh100 --json-out " + dir.file("h.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = read_json(dir.file("h.json"));
  EXPECT_NEAR(j["compute_scale"].get<double>(), 0.5 / 989, 1e-12);
  EXPECT_EQ(j["scale_spread"], kCrossMachineSpread);
  EXPECT_NEAR(j["on_demand"]["usd_per_hour"].get<double>(), 3.0, 1e-12);
  EXPECT_NEAR(j["spot"]["usd_per_hour"].get<double>(), 1.5, 1e-12);
  EXPECT_NE(r.output.find("a rough model"), std::string::npos) << r.output;
  r = test::run_frugal("plan --from " + run + " --instance gpu-1xh100 --peak-tflops 100 --json-out " +
                       dir.file("h.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(read_json(dir.file("h.json"))["compute_scale"].get<double>(), 0.5 / 100, 1e-12);

  fs::remove(run + "/summary.json");  // a partial run: the start-up estimated from the first window
  r = test::run_frugal("plan --from " + run + " --json-out " + dir.file("q.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a partial run"), std::string::npos) << r.output;
  expect_ordered(read_json(dir.file("q.json"))["seconds"], "partial");
}

// The budget check on injected figures: a limit above the central cost passes (even below the high
// end: the run may still finish), one below it fails, naming the cost and about how many steps the
// limit pays for; the spot price bills when budget.spot.
TEST(CostPlan, TheBudgetCheckComparesTheLimitWithTheCentralCostOfTheBilledPrice) {
  CostPlan plan;
  plan.steps = 1000;
  plan.inputs.steps = 1000;
  plan.inputs.step_s.assign(8, 3.6);  // $0.001 a step at $1/h
  plan.inputs.margin = 0.1;
  plan.inputs.checkpoint.enabled = false;
  plan.inputs.prices = {"", 1.0, 0.25, 0, 0};
  plan.projection = project_run(plan.inputs);  // 1000 x 3.6 s = 1 h: $1 (0.90 to 1.10)
  plan.limit_usd = 1.05;
  EXPECT_EQ(budget_shortfall(plan), "");
  plan.limit_usd = 0.5005;  // 1801.8 s of machine time: 500.5 steps
  const std::string why = budget_shortfall(plan);
  EXPECT_NE(why.find("the projected run costs $1.00 (central; $0.9000 to $1.10) at $1.00/h"), std::string::npos) << why;
  EXPECT_NE(why.find("more than budget.limit_usd = $0.5005"), std::string::npos) << why;
  EXPECT_NE(why.find("lower train.steps to about 500 "), std::string::npos) << why;
  plan.spot_billed = true;  // a quarter of the price: $0.25 fits
  EXPECT_EQ(budget_shortfall(plan), "");
  plan.spot_billed = false;
  plan.limit_usd = 0;  // no limit, nothing to check
  EXPECT_EQ(budget_shortfall(plan), "");
  plan.limit_usd = 0.5;
  plan.inputs.prices = {};
  plan.projection = project_run(plan.inputs);  // no price: nothing to check either
  EXPECT_EQ(budget_shortfall(plan), "");
}

// plan.before_train with a limit below the projection: exit 3 before step 1, with the figures and
// what to do; nothing trained, checkpointed or written (no run directory at all).
TEST(CostPlan, TrainRefusesToStartWhenTheLimitCannotCoverTheProjection) {
  test::TempDir dir;
  auto r = test::run_frugal("train" + test::tiny_sets(dir.path()) +
                            " --set run.name=capped --set plan.before_train=true --set plan.probe_steps=3 "
                            "--set budget.usd_per_hour=1000 --set budget.limit_usd=0.01");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  for (const char* s :
       {"more than budget.limit_usd = $0.0100", "Raise budget.limit_usd to at least", "nothing was trained"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << "a step ran:\n" << r.output;
  EXPECT_FALSE(fs::exists(dir.file("capped"))) << "the refusal wrote a run directory";
  // `frugal plan` says the same with the same exit code, and its JSON says why.
  r = test::run_frugal(
      "plan" + test::tiny_sets(dir.path()) +
      " --set plan.probe_steps=3 --set budget.usd_per_hour=1000 --set budget.limit_usd=0.01 --json-out " +
      dir.file("p.json"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("more than budget.limit_usd = $0.0100"), std::string::npos) << r.output;
  const nlohmann::json plan = read_json(dir.file("p.json"));
  EXPECT_FALSE(plan["within_limit"].get<bool>());
  EXPECT_GT(plan["on_demand"]["usd"]["central"].get<double>(), 0.01);
  // A limit that covers it: the same command passes (the check is the limit, not the price).
  r = test::run_frugal("plan" + test::tiny_sets(dir.path()) +
                       " --set plan.probe_steps=3 --set budget.usd_per_hour=1000 --set budget.limit_usd=1000");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// plan.before_train with enough money: the banner shows the projection and summary.json records
// it beside the trainer's measured time.
TEST(CostPlan, TrainShowsThePlanAndRecordsProjectedAgainstMeasured) {
  test::TempDir dir;
  auto r = test::run_frugal("train" + test::tiny_sets(dir.path()) +
                            " --set run.name=planned --set plan.before_train=true --set plan.probe_steps=3 "
                            "--set budget.usd_per_hour=1 --set budget.limit_usd=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("plan: projected"), std::string::npos) << r.output;
  const nlohmann::json s = read_json(dir.file("planned/summary.json"));
  ASSERT_TRUE(s.contains("plan")) << s.dump(1);
  expect_ordered(s["plan"]["projected_s"], "projected_s");
  expect_ordered(s["plan"]["trainer_s_projected"], "trainer_s_projected");
  EXPECT_NEAR(s["plan"]["trainer_s_measured"].get<double>(), s["wall_s"].get<double>() + s["startup_s"].get<double>(),
              1e-9);
  EXPECT_TRUE(s["plan"].contains("trainer_s_within_range"));
  EXPECT_TRUE(fs::exists(dir.file("planned/plan.json")));
}

// Projected against measured, on this machine: a demo-shaped run (the demo's model and batch, its
// evaluation and checkpoint cadence scaled down to 120 steps) is planned by one `frugal plan`
// process and then trained by one `frugal train` process, timed from outside from its launch to
// its exit. Its measured time, and so its cost at the plan's price, must lie within a factor of 3
// of the central projection: a bound generous enough for a loaded machine (tests never assert
// wall-clock times strictly), tight enough to catch a projection that drops or double-counts a
// term (the evaluations, the answer samples at the end, the start-up). The precise error is
// bench/plan_accuracy.py's (docs/plan.md). Run alone (RUN_SERIAL): a test beside it would slow
// one of the two processes and not the other.
TEST(PlanAccuracy, ADemoShapedRunTakesAndCostsWhatItsPlanProjected) {
  test::TempDir dir;
  const std::string sets =
      " --set run.out_dir=" + dir.path() +
      " --set run.name=accuracy --set train.steps=120 --set train.eval_every=40 "
      "--set train.answer_samples=20 --set checkpoint.every_steps=60 --set budget.usd_per_hour=0.08";
  auto p = test::run_frugal("plan" + sets + " --json-out " + dir.file("plan.json"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_frugal("train" + sets + " --quiet");
  const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = read_json(dir.file("plan.json"));
  const auto& s = j["seconds"];
  const double usd = measured / 3600 * 0.08;
  RecordProperty("projected_s", std::to_string(s["central"].get<double>()));
  RecordProperty("measured_s", std::to_string(measured));
  const double central = s["central"].get<double>(), central_usd = j["on_demand"]["usd"]["central"].get<double>();
  EXPECT_GE(measured, central / 3) << j.dump(1);
  EXPECT_LE(measured, central * 3) << j.dump(1);
  EXPECT_GE(usd, central_usd / 3);
  EXPECT_LE(usd, central_usd * 3);
  EXPECT_NEAR(central_usd, central / 3600 * 0.08, 1e-12);
  // The counts the plan assumed are the ones the run made.
  const nlohmann::json summary = read_json(dir.file("accuracy/summary.json"));
  EXPECT_EQ(summary["checkpoint"]["saves"], j["terms"]["saves"]);
  int evals = 0;
  for (const auto& m : test::read_jsonl(dir.file("accuracy/metrics.jsonl"))) evals += m.value("event", "") == "eval";
  EXPECT_EQ(evals, j["terms"]["evals"].get<int>());
}

// --gpus with --gpu-memory-gb: the memory table from the probe's own figures, in plan.json too;
// either alone is refused.
TEST(CostPlan, GpusAndTheirMemorySayWhichZeroStageFits) {
  test::TempDir dir;
  auto r =
      test::run_frugal("plan" + test::tiny_sets(dir.path()) +
                       " --set plan.probe_steps=3 --gpus 4 --gpu-memory-gb 80 --json-out " + dir.file("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"memory per GPU, 4 GPU(s) of 80 GB", "use dist.zero = 0", "\n  3  "})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  const nlohmann::json j = read_json(dir.file("plan.json"));
  EXPECT_EQ(j["zero"]["gpus"], 4);
  EXPECT_EQ(j["zero"]["recommended"], 0);
  EXPECT_TRUE(j["zero"]["activations_measured"].get<bool>()) << j["zero"].dump();
  EXPECT_GT(j["zero"]["levels"][0]["parameters_gb"].get<double>(), 0);
  EXPECT_EQ(j["zero"]["optimizer"], "fused_adamw") << "from the probe's summary.json levers";
  // Muon: the state its probe measured (a momentum for the hidden matrices: less than AdamW's), and
  // ZeRO-2 and 3 refused.
  r = test::run_frugal("plan" + test::tiny_sets(dir.path()) +
                       " --set plan.probe_steps=3 --set train.optimizer=muon --gpus 4 --gpu-memory-gb 80 --json-out " +
                       dir.file("muon.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json m = read_json(dir.file("muon.json"));
  EXPECT_EQ(m["zero"]["optimizer"], "muon");
  EXPECT_EQ(m["zero"]["recommended"], 0);
  EXPECT_EQ(m["zero"]["levels"][2]["refused"], "refused with muon");
  EXPECT_LT(m["zero"]["levels"][0]["optimizer_gb"].get<double>(), j["zero"]["levels"][0]["optimizer_gb"].get<double>());
  EXPECT_NE(r.output.find("Muon's state as the probe measured it"), std::string::npos) << r.output;
  // The offloaded ZeRO-3 row under bf16 (the probe's levers): the GPU keeps the shard as its bf16
  // copy, the fp32 master goes to host memory; in fp32 the GPU's shard is the master's width.
  for (const std::string mode : {"bf16", "fp32"}) {
    r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + " --set plan.probe_steps=3 --set precision.mode=" +
                         mode + " --gpus 4 --gpu-memory-gb 80 --json-out " + dir.file(mode + ".json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json levels = read_json(dir.file(mode + ".json"))["zero"]["levels"];
    const double on_gpu = levels[3]["parameters_gb"].get<double>(),
                 offloaded = levels[7]["parameters_gb"].get<double>();
    if (mode == "bf16") {
      EXPECT_LT(offloaded, on_gpu) << levels.dump();
    } else {
      EXPECT_DOUBLE_EQ(offloaded, on_gpu) << levels.dump();
    }
    EXPECT_GT(levels[7]["optimizer_host_gb"].get<double>(), levels[6]["optimizer_host_gb"].get<double>())
        << "the master shard in host memory at stage 3: " << levels.dump();
  }
  r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + " --gpus 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--gpus and --gpu-memory-gb go together"), std::string::npos) << r.output;
}

// --from a run whose model or batch differs from the config planned: the run's measured step time
// is not that config's, so the plan is refused (exit 2) naming each key that differs and what to
// do. It used to project the run's step time onto the other model silently.
TEST(CostPlan, ARunOfAnotherModelOrBatchIsRefusedNamingTheKeysThatDiffer) {
  test::TempDir dir;
  const std::string run = dir.file("r");  // a partial run: two step lines and its config
  fs::create_directories(run);
  test::write_text(run + "/metrics.jsonl",
                   "{\"event\":\"step\",\"step\":5,\"elapsed_s\":0.5}\n"
                   "{\"event\":\"step\",\"step\":10,\"elapsed_s\":1.0}\n");
  test::write_text(run + "/config.toml",
                   "[model]\nlayers = 2\nheads = 2\nembd = 32\nblock = 32\n[data]\nmicro_batch = 8\n");
  auto r = test::run_frugal("plan --from " + run + " --set model.layers=12 --set model.embd=512 --json-out " +
                            dir.file("p.json"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* s : {"model.layers = 12 (the run: 2)", "model.embd = 512 (the run: 32)",
                        "Drop --from to probe this config", "or plan the run's own config"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  EXPECT_FALSE(fs::exists(dir.file("p.json")));
  test::write_text(dir.file("other.toml"),
                   "[model]\nlayers = 2\nheads = 2\nembd = 32\nblock = 32\n[data]\nmicro_batch = 16\n");
  r = test::run_frugal("plan " + dir.file("other.toml") + " --from " + run + " --json-out " + dir.file("p.json"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.micro_batch = 16 (the run: 8)"), std::string::npos) << r.output;
  // The run's own config with another length, cadence or price plans as before.
  r = test::run_frugal("plan --from " + run + " --set train.steps=3000 --set train.eval_every=100 --json-out " +
                       dir.file("p.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_json(dir.file("p.json"))["steps"], 3000);
}

// Where the plan goes is checked before the probe: a folder, or a path below a file, exit 2 naming
// --json-out and the path. They used to fail after the probe with exit 1.
TEST(CostPlan, BadOutputPathsExitTwoBeforeProbing) {
  test::TempDir dir;
  test::write_text(dir.file("file.txt"), "");
  for (const std::string& bad : {dir.path(), dir.file("file.txt/p.json")}) {
    auto r = test::run_frugal("plan" + test::tiny_sets(dir.path()) + " --set plan.probe_steps=3 --json-out " + bad);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--json-out " + bad), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("probing"), std::string::npos) << r.output;
  }
}

// A stop signal ends `frugal plan` at its probe's step end: exit 75 with a line saying so, nothing
// written and no temporary folder left in TMPDIR. The probe here would take minutes. SIGTERM used
// to kill it (exit 143) and leave the folder.
TEST(CostPlan, AStopSignalEndsTheProbeWithExit75NothingWrittenAndNoTemporaryFolder) {
  test::TempDir dir;
  const std::string tmp = dir.file("tmp");
  fs::create_directories(tmp);
  std::vector<std::string> args = {"plan", "--json-out", dir.file("p.json")};
  for (const std::string& o : test::tiny_overrides(dir.path())) args.insert(args.end(), {"--set", o});
  for (const char* o : {"plan.probe_steps=100000", "plan.max_probe_s=100000"}) args.insert(args.end(), {"--set", o});
  const int pid = test::start_frugal(args, dir.file("plan.log"), {"TMPDIR=" + tmp});
  const bool probing = test::wait_for_entry(tmp, "frugal-plan-", 120);
  ::kill(pid, SIGTERM);
  const int status = test::wait_for_child(pid, 120);
  const std::string log = test::read_text(dir.file("plan.log"));
  ASSERT_TRUE(probing) << log;
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), 75) << log;
  EXPECT_NE(log.find("frugal: stopped: the plan's probe was stopped by SIGTERM; nothing written"), std::string::npos)
      << log;
  EXPECT_FALSE(fs::exists(dir.file("p.json")));
  EXPECT_TRUE(test::entries_starting(tmp, "frugal-plan-").empty()) << test::entries_starting(tmp, "frugal-plan-")[0];
}

}  // namespace
}  // namespace frugal::plan_test
