// report.html shows what a person would check: every chart, the numbers of summary.json, the
// stop reason; `frugal compare` prints the ratio.
#include "frugal/monitor/report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/svg_chart.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::report_test {
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
  Trainer(resolve_config("", sets, {}), test::quiet_run()).fit();
  std::string html = test::read_text(dir.file("demo/report.html"));
  for (const char* id : {"id='loss'", "id='lr'", "id='grad-norm'", "id='throughput'", "id='breakdown'", "id='memory'",
                         "id='cost'", "id='config'"})
    EXPECT_NE(html.find(id), std::string::npos) << id;
  EXPECT_NE(html.find("lr = "), std::string::npos);  // the resolved config.toml, folded
  EXPECT_EQ(html.find("e+0"), std::string::npos);    // no engineering notation anywhere
  EXPECT_EQ(html.find("://"), std::string::npos);    // nothing loaded from the network
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
  test::write_text(a.file("summary.json"), R"({"run_name":"a","tokens_per_s":100.0,"final_val_loss":1.5,"steps":60})");
  test::write_text(b.file("summary.json"),
                   R"({"run_name":"b","tokens_per_s":250.0,"final_val_loss":1.5,"steps":1200})");
  std::string out = compare_runs(a.path(), b.path());
  EXPECT_NE(out.find("                      60            1,200"), std::string::npos) << out;  // counts whole
  EXPECT_NE(out.find("2.500"), std::string::npos) << out;
  EXPECT_NE(out.find("B trains 2.50x faster"), std::string::npos) << out;
  const nlohmann::json j = compare_runs_json(a.path(), b.path());
  EXPECT_EQ(j["figures"]["tokens_per_s"]["b_over_a"], 2.5);
  EXPECT_EQ(j["figures"]["steps"]["b"], 1200.0);
  EXPECT_TRUE(j["figures"]["kg_co2"]["a"].is_null());
  auto cli = test::run_frugal("compare " + a.path() + " " + b.path() + " --json");
  ASSERT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_EQ(nlohmann::json::parse(cli.output), j);
  EXPECT_THROW(render_report(a.path()), DataError);  // no metrics.jsonl
  auto r = test::run_frugal("report " + a.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl"), std::string::npos) << r.output;
}

// summary.json's levers: compare and report.html show which optimizer and schedule each run used,
// rendered by the one function the banner uses (monitor/levers.h).
TEST(Report, CompareAndTheReportSayWhichOptimizerAndScheduleEachRunUsed) {
  test::TempDir a, b;
  const nlohmann::json muon = {
      {"precision", {{"mode", "bf16"}, {"reason", "auto"}}},
      {"batch", {{"micro_batch", 8}, {"accum", 2}, {"world_size", 1}}},
      {"optimizer", {{"kind", "muon"}, {"muon", {{"momentum", 0.95}, {"newton_schulz", "bf16"}}}}},
      {"schedule", {{"kind", "wsd"}, {"warmup_steps", 50}, {"decay_fraction", 0.2}}},
      {"checkpoints", "async"}};
  nlohmann::json adamw = muon;
  adamw["optimizer"] = {{"kind", "fused_adamw"}};
  adamw["schedule"] = {{"kind", "cosine"}, {"warmup_steps", 50}, {"min_lr_ratio", 0.1}};
  test::write_text(a.file("summary.json"), nlohmann::json{{"run_name", "a"}, {"levers", adamw}}.dump());
  test::write_text(b.file("summary.json"), nlohmann::json{{"run_name", "b"}, {"levers", muon}}.dump());
  const std::string out = compare_runs(a.path(), b.path());
  EXPECT_NE(out.find("fused_adamw"), std::string::npos) << out;
  EXPECT_NE(out.find("muon (Newton-Schulz bf16, momentum 0.95)"), std::string::npos) << out;
  EXPECT_NE(out.find("cosine (warm-up 50, to 0.1 x lr)"), std::string::npos) << out;
  EXPECT_NE(out.find("wsd (warm-up 50, decay the last 20%)"), std::string::npos) << out;
  const nlohmann::json j = compare_runs_json(a.path(), b.path());
  EXPECT_EQ(j["labels"]["optimizer"]["a"], "fused_adamw");
  EXPECT_EQ(j["labels"]["schedule"]["b"], "wsd (warm-up 50, decay the last 20%)");
  const std::string html = render_report_html(nlohmann::json{{"run_name", "b"}, {"levers", muon}}, {}, {});
  EXPECT_NE(html.find("optimizer muon (Newton-Schulz bf16, momentum 0.95) | schedule wsd"), std::string::npos);
}

// Both runs reached their target: the verdict is the time and money to it, not the speed per
// token that contradicted it (B slower per token yet there in half the time).
TEST(Report, CompareJudgesByTheTimeAndCostToTheTargetWhenBothReachedIt) {
  test::TempDir a, b;
  test::write_text(a.file("summary.json"), R"({"run_name":"a","tokens_per_s":141.0,"wall_s_to_target":100.0,)"
                                           R"("usd_to_target":2.0})");
  test::write_text(b.file("summary.json"), R"({"run_name":"b","tokens_per_s":100.0,"wall_s_to_target":54.0,)"
                                           R"("usd_to_target":1.08})");
  const std::string out = compare_runs(a.path(), b.path());
  EXPECT_NE(out.find("B reaches the target in 0.54x A's billed time and 0.54x A's cost"), std::string::npos) << out;
  EXPECT_EQ(out.find("slower"), std::string::npos) << out;
  EXPECT_NE(out.find("billed_s_to_target"), std::string::npos) << out;
}

// Ticks are round: a step of 1, 2, 2.5 or 5 times a power of ten, covering the data, at most as
// many as asked; their labels fit the 6 characters the axis titles leave room for.
TEST(Report, TicksAreRoundAndCoverTheData) {
  auto expect_round = [](double lo, double hi, int max) {
    const auto t = nice_ticks(lo, hi, max);
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(static_cast<int>(t.size()), max) << lo << ".." << hi;
    EXPECT_LE(t.front(), lo);
    EXPECT_GE(t.back(), hi);
    const double step = t[1] - t[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
    EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 ||
                (std::fabs(mantissa - 2.5) < 1e-6 && step >= 1) || std::fabs(mantissa - 5) < 1e-6 ||
                std::fabs(mantissa - 10) < 1e-6)
        << step;
    for (double v : t) {
      EXPECT_NEAR(std::remainder(v, step), 0, step * 1e-6) << v;
      EXPECT_LE(format_tick(v, step).size(), 6u) << format_tick(v, step);
    }
  };
  expect_round(0, 1.0, 5);
  expect_round(1.083, 2.71, 5);   // a loss curve
  expect_round(0, 23617, 5);      // tokens/s
  expect_round(0, 0.0009651, 5);  // dollars of a short run
  expect_round(2e-4, 6e-4, 5);    // a learning rate
  expect_round(0, 6e-5, 5);       // a small one
  expect_round(0, 1'048'576, 5);  // bytes
  expect_round(1, 30, 6);         // steps
  expect_round(3, 3, 5);          // a flat line
  EXPECT_EQ(nice_ticks(0, 23617, 5), (std::vector<double>{0, 10000, 20000, 30000}));
  EXPECT_EQ(format_tick(20000, 10000), "20k");
  const auto dollars = nice_ticks(0, 0.0009651, 5);
  ASSERT_EQ(dollars.size(), 3u);
  EXPECT_NEAR(dollars[1], 0.0005, 1e-15);
  EXPECT_NEAR(dollars[2], 0.001, 1e-15);
  EXPECT_EQ(format_tick(dollars[1], dollars[1] - dollars[0]), "0.0005");
  EXPECT_EQ(format_tick(250, 250), "250");
  EXPECT_EQ(format_tick(3e-5, 1e-5), "3e-5");
  EXPECT_EQ(format_tick(1.5, 0.5), "1.5");
  EXPECT_EQ(format_tick(0.0004, 0.0002), "0.0004");
}

// A series measured once (a run with one evaluation) is drawn as a dot, not an empty polyline.
TEST(Report, ASeriesWithOnePointIsDrawnAsADot) {
  const std::string one = chart::line_chart("loss", "loss", "nats",
                                            {{"val", "#f00", {{10, 2.5}}}, {"train", "#00f", {{5, 3.0}, {10, 2.7}}}});
  EXPECT_NE(one.find("<circle class='point' data-name='val'"), std::string::npos) << one;
  EXPECT_EQ(one.find("<circle class='point' data-name='train'"), std::string::npos) << one;
}

// A series that is all zero (a run without a price: $0 throughout) sits on the axis's 0 at the
// bottom, not mid-chart between -1 and 1.
TEST(Report, AnAllZeroSeriesStartsItsAxisAtZero) {
  const std::string cost = chart::line_chart("cost", "cost so far", "USD", {{"USD", "#000", {{5, 0}, {10, 0}}}}, true);
  EXPECT_EQ(cost.find(">-1"), std::string::npos) << cost;
  EXPECT_EQ(cost.find(">-0.5"), std::string::npos) << cost;
  EXPECT_NE(cost.find("data-axis='y' text-anchor='end'>0.5<"), std::string::npos) << cost;
}

// MFU is a share of a peak: the headline card and the chart's axis name it (summary.json's
// peak_tflops).
TEST(Report, TheMfuChartAndCardNameThePeakTheyAreAShareOf) {
  const nlohmann::json summary = {{"run_name", "r"}, {"mfu", 0.285}, {"peak_tflops", 0.5866}};
  const std::vector<nlohmann::json> lines = {{{"step", 5}, {"loss", 3.0}, {"mfu", 0.28}},
                                             {{"step", 10}, {"loss", 2.9}, {"mfu", 0.29}}};
  const std::string page = render_report_html(summary, lines, {});
  const size_t chart = page.find("<svg id='mfu'");
  ASSERT_NE(chart, std::string::npos);
  EXPECT_NE(page.find("% of 0.587 TFLOP/s", chart), std::string::npos) << page.substr(chart, 3000);
  EXPECT_LT(page.find("% of 0.587 TFLOP/s"), chart) << "the headline card names it too";
}

// The live page's reload link carries the request's ?token= inside a single-quoted attribute: a
// quote in it stays text (it closed the attribute, and what followed became markup).
TEST(Report, TheLivePagesReloadLinkEscapesTheTokenItEchoes) {
  ReportPageOptions o;
  o.refresh_s = 2;
  o.token_query = "?token=a'><b id='x'>";
  const std::string page = render_report_html(nlohmann::json{{"run_name", "r"}}, {}, o);
  EXPECT_NE(page.find("url=/?token=a&#39;&gt;&lt;b id=&#39;x&#39;&gt;'>"), std::string::npos) << page;
  EXPECT_EQ(page.find("<b id='x'>"), std::string::npos) << page;
}

// Headline figures are read by people: grouped digits or M, 3 significant digits, no "e+04".
TEST(Report, HeadlineFiguresAvoidEngineeringNotation) {
  EXPECT_EQ(format_figure(14213.7), "14,214");
  EXPECT_EQ(format_figure(1234567), "1.23M");
  EXPECT_EQ(format_figure(45.678), "45.7");
  EXPECT_EQ(format_figure(1.534), "1.53");
  EXPECT_EQ(format_figure(0.0009651), "0.000965");
  EXPECT_EQ(format_figure(0), "0");
  EXPECT_EQ(format_figure(-2.5), "-2.50");
}

// compare names what differs between the two configurations, and warns when their per-token
// losses come from different tokenizers.
TEST(Report, CompareListsTheConfigDifferencesAndWarnsAboutDifferentTokenizers) {
  test::TempDir a, b, ds;
  for (const auto* d : {&a, &b})
    test::write_text(d->file("summary.json"), R"({"run_name":"r","tokens_per_s":100.0,"final_val_loss":1.5})");
  test::write_text(ds.file("manifest.json"),
                   R"({"format":"frugal-dataset","kind":"tokens","tokenizer":{"name":"sentencepiece","vocab":8000}})");
  test::write_text(a.file("config.toml"), resolve_config("", {"train.lr=0.001", "run.name=a"}, {}).to_toml());
  test::write_text(b.file("config.toml"), resolve_config("", {"train.lr=0.003", "run.name=b"}, {}).to_toml());
  std::string same_data = compare_runs(a.path(), b.path());
  EXPECT_NE(same_data.find("config differences (A, B):"), std::string::npos) << same_data;
  EXPECT_NE(same_data.find("train.lr"), std::string::npos) << same_data;
  EXPECT_EQ(same_data.find("run.name"), std::string::npos) << same_data;
  EXPECT_EQ(same_data.find("warning"), std::string::npos) << same_data;
  test::write_text(b.file("config.toml"),
                   resolve_config("", {"train.lr=0.001", "data.source=shards:" + ds.path()}, {}).to_toml());
  std::string other = compare_runs(a.path(), b.path());
  EXPECT_NE(other.find("data.source"), std::string::npos) << other;
  EXPECT_NE(other.find("warning: A's tokenizer is bytes (256 symbols), B's is sentencepiece (8000 symbols)"),
            std::string::npos)
      << other;
  test::write_text(b.file("config.toml"), resolve_config("", {"train.lr=0.001", "run.name=b"}, {}).to_toml());
  EXPECT_NE(compare_runs(a.path(), b.path()).find("config: the same"), std::string::npos);
  // train.global_batch 0 (derived) against the number it came to, as a tuned config writes it: the
  // same batch when the summaries say so, a difference when they do not.
  test::write_text(b.file("config.toml"),
                   resolve_config("", {"train.lr=0.001", "train.global_batch=8", "data.micro_batch=8"}, {}).to_toml());
  test::write_text(a.file("config.toml"), resolve_config("", {"train.lr=0.001", "data.micro_batch=8"}, {}).to_toml());
  for (const auto* d : {&a, &b})
    test::write_text(d->file("summary.json"), R"({"run_name":"r","tokens_per_s":100.0,"global_batch":8})");
  EXPECT_NE(compare_runs(a.path(), b.path()).find("config: the same"), std::string::npos);
  EXPECT_FALSE(compare_runs_json(a.path(), b.path())["config_differences"].contains("train.global_batch"));
  test::write_text(b.file("summary.json"), R"({"run_name":"r","tokens_per_s":100.0,"global_batch":16})");
  EXPECT_NE(compare_runs(a.path(), b.path()).find("train.global_batch"), std::string::npos);
}

// compare --json gives each differing config value as JSON (a string without TOML's quotes, a
// number, a boolean); the text table keeps the TOML spelling.
TEST(Report, CompareJsonGivesConfigDifferencesAsJsonValues) {
  test::TempDir a, b;
  for (const auto* d : {&a, &b}) test::write_text(d->file("summary.json"), R"({"run_name":"r","tokens_per_s":100.0})");
  test::write_text(
      a.file("config.toml"),
      resolve_config("", {"train.lr=0.001", "train.steps=100", "precision.mode=fp32", "run.deterministic=false"}, {})
          .to_toml());
  test::write_text(
      b.file("config.toml"),
      resolve_config("", {"train.lr=0.003", "train.steps=200", "precision.mode=auto", "run.deterministic=true"}, {})
          .to_toml());
  auto cli = test::run_frugal("compare " + a.path() + " " + b.path() + " --json");
  ASSERT_EQ(cli.exit_code, 0) << cli.output;
  const nlohmann::json d = nlohmann::json::parse(cli.output)["config_differences"];
  EXPECT_EQ(d["precision.mode"], (nlohmann::json{{"a", "fp32"}, {"b", "auto"}})) << d;
  EXPECT_EQ(d["train.lr"], (nlohmann::json{{"a", 0.001}, {"b", 0.003}})) << d;
  EXPECT_TRUE(d["train.steps"]["a"].is_number_integer()) << d;
  EXPECT_EQ(d["train.steps"], (nlohmann::json{{"a", 100}, {"b", 200}})) << d;
  EXPECT_EQ(d["run.deterministic"], (nlohmann::json{{"a", false}, {"b", true}})) << d;
  const std::string text = compare_runs(a.path(), b.path());
  EXPECT_NE(text.find("'fp32'"), std::string::npos) << text;
}

// A SIGKILL mid-write can leave metrics.jsonl ending in a cut-off line: the report leaves it out
// and says so, on the page and the console. A bad line before the last, or a last line that
// ends with its newline, is still an error naming the line.
TEST(Report, ATornLastMetricsLineIsLeftOutWithANote) {
  test::TempDir dir;
  test::write_text(dir.file("summary.json"), R"({"run_name":"r","steps":2,"stop_reason":"killed"})");
  const std::string good = R"({"event":"step","step":1,"loss":3.5})"
                           "\n"
                           R"({"event":"step","step":2,"loss":3.25})"
                           "\n";
  test::write_text(dir.file("metrics.jsonl"), good + R"({"event":"step","step":3,"lo)");
  auto r = test::run_frugal("report " + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: " + dir.file("metrics.jsonl") + ":3, its last line, is cut short"), std::string::npos)
      << r.output;
  const std::string html = test::read_text(dir.file("report.html"));
  EXPECT_NE(html.find("id='report-note'"), std::string::npos);
  EXPECT_NE(html.find("is cut short"), std::string::npos);
  // An intact file has no note.
  test::write_text(dir.file("metrics.jsonl"), good);
  std::string note = "unset";
  render_report(dir.path(), &note);
  EXPECT_EQ(note, "");
  for (const std::string& bad : {std::string(R"({"event":"step","lo)") + "\n" + good, good + "{\"lo\n"}) {
    test::write_text(dir.file("metrics.jsonl"), bad);
    auto e = test::run_frugal("report " + dir.path());
    EXPECT_EQ(e.exit_code, 2) << e.output;
    EXPECT_NE(e.output.find("metrics.jsonl:"), std::string::npos) << e.output;
    EXPECT_NE(e.output.find("is not a JSON object"), std::string::npos) << e.output;
  }
}

}  // namespace
}  // namespace frugal::report_test
