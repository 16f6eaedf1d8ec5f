// report.html shows what a person would check: every chart, the numbers of summary.json, the
// stop reason; `frugal compare` prints the ratio.
#include "frugal/monitor/report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal {
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Report, TrainingWritesASelfContainedReportWithEveryChart) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("budget.usd_per_hour=3.0");
  Trainer(resolve_config("", sets, {}), TrainerOptions{true, true, {}}).fit();
  std::string html = test::read_text(dir.file("demo/report.html"));
  for (const char* id : {"id='loss'", "id='throughput'", "id='breakdown'", "id='memory'", "id='cost'"})
    EXPECT_NE(html.find(id), std::string::npos) << id;
  EXPECT_EQ(html.find("http"), std::string::npos);  // nothing loaded from the network
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // The train-loss line has one point per logged step (30 steps / log_every 5 = 6).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(html, m, std::regex("data-name='train loss'[^>]*points='([^']*)'")));
  EXPECT_EQ(count(m[1].str(), ","), 6);
  // The summary table shows summary.json's figures.
  auto s = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  EXPECT_NE(html.find("<td data-key='steps'>30</td>"), std::string::npos);
  EXPECT_NE(html.find("stop reason: <b>" + s["stop_reason"].get<std::string>() + "</b>"), std::string::npos);
  EXPECT_GT(s["cost_usd"].get<double>(), 0);
}

TEST(Report, CompareShowsTheSpeedRatioAndMissingRunsAreDataErrors) {
  test::TempDir a, b;
  test::write_text(a.file("summary.json"), R"({"run_name":"a","tokens_per_s":100.0,"final_val_loss":1.5})");
  test::write_text(b.file("summary.json"), R"({"run_name":"b","tokens_per_s":250.0,"final_val_loss":1.5})");
  std::string out = compare_runs(a.path(), b.path());
  EXPECT_NE(out.find("2.500"), std::string::npos) << out;
  EXPECT_NE(out.find("B trains 2.50x faster"), std::string::npos) << out;
  EXPECT_THROW(render_report(a.path()), DataError);  // no metrics.jsonl
  auto r = test::run_frugal("report " + a.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace frugal
