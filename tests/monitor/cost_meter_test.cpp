// Cost/carbon arithmetic, the price table, alerts at fractions, and the budget hard stop.
#include "frugal/monitor/cost_meter.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::cost_meter_test {
namespace {

TEST(CostMeter, TimePriceAndPowerGiveDollarsKwhAndCarbon) {
  // 30 minutes at $2/h and 400 W on a 500 g/kWh grid, a quarter of the way through.
  auto f = cost_at(1800, 25, 100, 2.0, 400, 500);
  EXPECT_DOUBLE_EQ(f.usd, 1.0);
  EXPECT_DOUBLE_EQ(f.kwh, 0.2);
  EXPECT_DOUBLE_EQ(f.kg_co2, 0.1);
  EXPECT_DOUBLE_EQ(f.projected_usd, 4.0);
}

TEST(CostMeter, InstanceIsLookedUpInThePriceTable) {
  test::TempDir dir;
  test::write_text(dir.file("p.toml"), "[box]\nusd_per_hour = 1.5\nspot_usd_per_hour = 0.5\nwatts = 200\n");
  ::setenv("FRUGAL_PRICE_TABLE", dir.file("p.toml").c_str(), 1);
  BudgetConfig b;
  b.instance = "box";
  EXPECT_DOUBLE_EQ(CostMeter(b).usd_per_hour(), 1.5);
  EXPECT_DOUBLE_EQ(CostMeter(b).watts(), 200);
  b.spot = true;
  EXPECT_DOUBLE_EQ(CostMeter(b).usd_per_hour(), 0.5);
  b.instance = "nope";
  try {
    CostMeter m(b);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("known: box"), std::string::npos) << e.what();
  }
  ::unsetenv("FRUGAL_PRICE_TABLE");
}

TEST(CostMeter, ShippedPriceTableParses) {
  auto t = load_price_table(std::string(FRUGAL_SOURCE_DIR) + "/data/prices.toml");
  EXPECT_GE(t.size(), 5u);
  for (const auto& e : t) EXPECT_GT(e.usd_per_hour, 0) << e.name;
}

// Where no price table is found, the error names every place looked at and FRUGAL_PRICE_TABLE; a
// FRUGAL_PRICE_TABLE naming a missing file is said to be the variable's. Both used to read
// "price table data/prices.toml: cannot open data/prices.toml: No such file or directory".
TEST(CostMeter, AMissingPriceTableNamesThePlacesTriedAndTheVariable) {
  test::TempDir dir;
  ::setenv("FRUGAL_PRICE_TABLE", dir.file("missing.toml").c_str(), 1);
  BudgetConfig b;
  b.instance = "box";
  try {
    CostMeter m(b);
    ADD_FAILURE() << "a missing FRUGAL_PRICE_TABLE file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("FRUGAL_PRICE_TABLE = " + dir.file("missing.toml") + ": no such file"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("FRUGAL_PRICE_TABLE");
  // A frugal with no table beside it, run where there is no data/prices.toml either.
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  try {
    default_price_table_path(dir.file("bin/frugal"));
    ADD_FAILURE() << "no table, but a path was returned";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    for (const std::string& place : {dir.file("data/prices.toml"), dir.file("share/frugal/prices.toml")})
      EXPECT_NE(what.find(place), std::string::npos) << place << " is not named: " << what;
    EXPECT_NE(what.find("set FRUGAL_PRICE_TABLE=FILE"), std::string::npos) << what;
  }
  // An installed frugal (bin/frugal) finds the table installed beside it (share/frugal/).
  std::filesystem::create_directories(dir.file("share/frugal"));
  test::write_text(dir.file("share/frugal/prices.toml"), "[box]\nusd_per_hour = 1\n");
  std::string found;
  EXPECT_NO_THROW(found = default_price_table_path(dir.file("bin/frugal")));
  std::filesystem::current_path(before);
  EXPECT_EQ(found, std::filesystem::weakly_canonical(dir.file("share/frugal/prices.toml")).string());
}

TEST(CostMeter, AlertFractionsParseAndRejectNonsense) {
  EXPECT_EQ(parse_alert_fractions("0.8, 0.5"), std::vector<double>({0.5, 0.8}));
  EXPECT_THROW(parse_alert_fractions("0.5,2"), ConfigError);
  EXPECT_THROW(resolve_config("", {"budget.alert_at=half"}, {}), ConfigError);
}

TEST(CostMeter, AlertsFireOnceEachAndTheLimitRequestsAGuardStop) {
  BudgetConfig b;
  b.usd_per_hour = 3600;  // $1 per second of training
  b.limit_usd = 10;
  b.alert_at = "0.5,0.8";
  CostMeter meter(b);
  Config c;
  c.train.steps = 100;
  RunInfo info;
  info.config = &c;
  meter.on_train_begin(info);
  Control control;
  StepMetrics m;
  m.total_steps = 100;  // the loop fills the run's end in every event (the meter keeps no copy)
  int last = 0;
  for (int step = 1; step <= 20 && !control.should_stop(); ++step) {
    last = step;
    m.step = step;
    m.elapsed_s = step;  // $1 per step
    meter.on_step_end(m, control);
  }
  ASSERT_EQ(meter.alerts_fired().size(), 2u);
  EXPECT_NE(meter.alerts_fired()[0].find("50%"), std::string::npos);
  // After step 10 ($10 spent) one more step would cross the $10 limit: a guard stop, not later.
  EXPECT_EQ(last, 10);
  EXPECT_TRUE(control.should_stop());
  EXPECT_EQ(control.stop_kind(), StopKind::kBudget);
  EXPECT_NE(control.stop_reason().find("budget"), std::string::npos);
}

// The projection follows the steps the run will take: train.steps, or the earlier end a deadline
// moved it to (StepMetrics::total_steps).
TEST(CostMeter, TheProjectionFollowsAnEndMovedBeforeTrainSteps) {
  BudgetConfig b;
  b.usd_per_hour = 3600;  // $1 per second of training
  CostMeter meter(b);
  Config c;
  c.train.steps = 100;
  RunInfo info;
  info.config = &c;
  meter.on_train_begin(info);
  StepMetrics m;
  m.step = 10;
  m.elapsed_s = 10;
  m.total_steps = 100;
  meter.on_step_metrics(m);
  EXPECT_DOUBLE_EQ(meter.figures().projected_usd, 100.0);
  m.step = 11;
  m.elapsed_s = 11;
  m.total_steps = 40;  // moved
  meter.on_step_metrics(m);
  EXPECT_DOUBLE_EQ(meter.figures().projected_usd, 40.0);
}

// A resumed run must not fire (and run alert_command for) an alert the first session fired: the
// fired fractions travel in the checkpoint.
TEST(CostMeter, FiredAlertsSurviveAResume) {
  BudgetConfig b;
  b.usd_per_hour = 3600;
  b.limit_usd = 10;
  b.alert_at = "0.5,0.8";
  Config c;
  c.train.steps = 100;
  RunInfo info;
  info.config = &c;
  Control control;
  StepMetrics m;
  CostMeter first(b);
  first.on_train_begin(info);
  m.step = 6;
  m.elapsed_s = 6;  // $6: the 50% alert fires
  first.on_step_end(m, control);
  ASSERT_EQ(first.alerts_fired().size(), 1u);
  nlohmann::json saved;
  first.save_state(saved);

  CostMeter resumed(b);
  resumed.load_state(nlohmann::json::parse(saved.dump()));  // through text, as state.json
  resumed.on_train_begin(info);
  m.step = 7;
  m.elapsed_s = 7;
  resumed.on_step_end(m, control);
  EXPECT_EQ(resumed.alerts_fired().size(), 1u) << "the 50% alert fired again after the resume";
  m.step = 8;
  m.elapsed_s = 8.5;  // 85%: the 80% alert is new
  resumed.on_step_end(m, control);
  ASSERT_EQ(resumed.alerts_fired().size(), 2u);
  EXPECT_NE(resumed.alerts_fired()[1].find("85%"), std::string::npos) << resumed.alerts_fired()[1];
}

TEST(CostMeter, BudgetStopEndsTheCliRunWithExitCodeThree) {
  test::TempDir dir;
  const std::string sets = test::tiny_sets(dir.path());
  // At $360000/h ($100/s) even a 5 ms step costs $0.5: a $0.5 limit stops within a few steps.
  auto r = test::run_frugal("train" + sets +
                            " --set budget.usd_per_hour=360000 --set budget.limit_usd=0.5 --set train.log_every=1");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  auto s = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  EXPECT_LT(s["steps"].get<int>(), 30);
  // The guard acts between steps, so the spend may pass the limit by at most one step's cost.
  double longest_step_s = 0;
  std::istringstream lines(test::read_text(dir.file("demo/metrics.jsonl")));
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") longest_step_s = std::max(longest_step_s, j["step_s"].get<double>());
  }
  // Start-up is billed too (data, model, probes before step 1).
  EXPECT_GT(s["startup_s"].get<double>(), 0.0);
  EXPECT_LE(s["cost_usd"].get<double>(), 0.5 + 100.0 * (longest_step_s + s["startup_s"].get<double>()));
  EXPECT_NE(s["stop_reason"].get<std::string>().find("budget.limit_usd"), std::string::npos);
  EXPECT_EQ(s["stop_kind"], "budget");
  // The stop wrote a checkpoint of the last step, so the run can be resumed with a larger budget.
  EXPECT_EQ(s["checkpoint"]["latest"].get<std::string>().empty(), false);
}

}  // namespace
}  // namespace frugal::cost_meter_test
