// MFU: the arithmetic, the configured peak, and the figures a run writes (every metrics line and
// summary.json use tokens/s x flops_per_token / peak), plus samples/s and the eval/checkpoint
// share of the step time.
#include "frugal/monitor/mfu.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>

#include "frugal/core/config_loader.h"
#include "frugal/core/memory.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::mfu_test {
namespace {

TEST(Mfu, IsModelFlopsPerSecondOverThePeak) {
  // 1000 tokens/s x 6 MFLOP/token = 6 GFLOP/s of a 10 GFLOP/s peak.
  EXPECT_DOUBLE_EQ(model_flops_utilization(1000, 6e6, 1e10), 0.6);
  EXPECT_DOUBLE_EQ(model_flops_utilization(1000, 6e6, 0), 0.0);  // unknown peak
}

TEST(Mfu, ConfiguredPeakIsUsedWithoutMeasuring) {
  MonitorConfig c;
  c.peak_tflops = 2.5;
  PeakFlops p = resolve_peak_flops(c, c10::kFloat, c10::kCPU);
  EXPECT_DOUBLE_EQ(p.flops, 2.5e12);
  EXPECT_EQ(p.source, "configured (monitor.peak_tflops)");
}

TEST(Mfu, MeasuredPeakIsAPositiveMatmulRate) {
  MonitorConfig c;
  PeakFlops p = resolve_peak_flops(c, c10::kFloat, c10::kCPU, 0.05);
  EXPECT_GT(p.flops, 1e8);  // any CPU of this century does 0.1 GFLOP/s
  // Up to 5 bursts: fewer when the machine is so loaded that they outlast 5 budgets.
  EXPECT_TRUE(std::regex_search(p.source, std::regex("^measured: Float matmul 1024\\^3 on cpu, best of [1-5], ")))
      << p.source;
}

// A device without room for the probe's matrices (CPU: the counting allocator's limit, the same
// out-of-memory error a full GPU raises) leaves the peak unmeasured instead of failing the run.
TEST(Mfu, AProbeThatDoesNotFitLeavesThePeakUnmeasured) {
  install_counting_allocator();
  TensorBytesLimitGuard limit(tensor_bytes_now() + (int64_t{1} << 20));  // 1 MiB: a 1024^2 fp32 matrix is 4
  PeakFlops p = resolve_peak_flops(MonitorConfig{}, c10::kFloat, c10::kCPU, 0.05);
  EXPECT_EQ(p.flops, 0.0);
  EXPECT_NE(p.source.find("not measured: a 1024^3 Float matmul does not fit"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("monitor.peak_tflops"), std::string::npos) << p.source;
}

// An MFU above 100% is never shown bare: the note says why and what to set.
TEST(Mfu, AboveOneHundredPercentComesWithItsReason) {
  EXPECT_EQ(mfu_note(0.45, "measured: x"), "");
  EXPECT_EQ(mfu_note(1.0, "measured: x"), "");
  const std::string note = mfu_note(1.12, "measured: Float matmul 1024^3 on cpu, best of 5, 90.0 GFLOP/s");
  EXPECT_NE(note.find("above 100%"), std::string::npos) << note;
  EXPECT_NE(note.find("90.0 GFLOP/s"), std::string::npos) << note;
  EXPECT_NE(note.find("monitor.peak_tflops"), std::string::npos) << note;
}

// Log steps as the trainer hands them to the meter: cumulative tokens, the window's tokens/s.
StepMetrics logged_step(int64_t tokens, double tokens_per_s) {
  StepMetrics m;
  m.logged = true;
  m.tokens = tokens;
  m.tokens_per_s = tokens_per_s;
  return m;
}

TEST(Mfu, TheRunsMfuLeavesOutTheFirstWindowAndTimeThatIsNoStep) {
  PeakFlops peak{1e9, "configured (monitor.peak_tflops)", true, 0.0, ""};
  MfuMeter meter(peak, 1e6);
  for (auto m : {logged_step(100, 10), logged_step(300, 100), logged_step(500, 200)}) meter.on_step_metrics(m);
  nlohmann::ordered_json summary;
  summary["tokens_per_s"] = 50.0;  // the whole run, start-up, evaluations and the warm-up window included
  meter.add_to_summary(summary);
  // 400 tokens in 2 s + 1 s of steps after the warm-up window.
  EXPECT_NEAR(summary["train_tokens_per_s"].get<double>(), 400.0 / 3.0, 1e-9);
  EXPECT_NEAR(summary["mfu"].get<double>(), 400.0 / 3.0 * 1e6 / 1e9, 1e-12);
  // A run with one log window has nothing after it: the run's own tokens/s then.
  MfuMeter short_run(peak, 1e6);
  auto only = logged_step(100, 10);
  short_run.on_step_metrics(only);
  nlohmann::ordered_json s2;
  s2["tokens_per_s"] = 50.0;
  short_run.add_to_summary(s2);
  EXPECT_NEAR(s2["mfu"].get<double>(), 50.0 * 1e6 / 1e9, 1e-12);
}

TEST(Mfu, TheDatasheetPeakComesFirstAndTheMeasuredOneSecond) {
  PeakFlops peak{500e12, "measured: BFloat16 matmul 8192^3 on cuda:0", false, 989e12, "NVIDIA H100 SXM datasheet"};
  MfuMeter meter(peak, 1e9);
  auto first = logged_step(1000, 1e5), second = logged_step(3000, 2e5);
  meter.on_step_metrics(first);
  meter.on_step_metrics(second);
  EXPECT_NEAR(second.mfu, 2e5 * 1e9 / 989e12, 1e-12) << "a log line's MFU is against the datasheet";
  nlohmann::ordered_json s;
  meter.add_to_summary(s);
  EXPECT_NEAR(s["mfu"].get<double>(), 2e5 * 1e9 / 989e12, 1e-12);
  EXPECT_NEAR(s["mfu_datasheet"].get<double>(), s["mfu"].get<double>(), 1e-15);
  EXPECT_NEAR(s["mfu_measured"].get<double>(), 2e5 * 1e9 / 500e12, 1e-12);
  EXPECT_DOUBLE_EQ(s["peak_tflops"].get<double>(), 989);
  EXPECT_DOUBLE_EQ(s["peak_tflops_measured"].get<double>(), 500);
  EXPECT_EQ(s["peak_source"], "NVIDIA H100 SXM datasheet");
  // A configured peak is the user's word: it comes first, the datasheet's figure second.
  peak.configured = true;
  MfuMeter configured(peak, 1e9);
  configured.on_step_metrics(first);
  configured.on_step_metrics(second);
  nlohmann::ordered_json c;
  configured.add_to_summary(c);
  EXPECT_NEAR(c["mfu"].get<double>(), 2e5 * 1e9 / 500e12, 1e-12);
  EXPECT_NEAR(c["mfu_datasheet"].get<double>(), 2e5 * 1e9 / 989e12, 1e-12);
}

TEST(Mfu, ADataParallelRunsTokensAreSetAgainstThePeakOfEveryProcess) {
  PeakFlops peak{1e9, "configured (monitor.peak_tflops)", true, 0.0, ""};
  MfuMeter one(peak, 1e6), two(peak, 1e6, 2);
  auto a = logged_step(100, 200), b = logged_step(100, 200);
  one.on_step_metrics(a);
  two.on_step_metrics(b);
  EXPECT_NEAR(a.mfu, 0.2, 1e-12);
  EXPECT_NEAR(b.mfu, 0.1, 1e-12) << "the tokens/s of 2 processes against one process's peak";
}

TEST(Mfu, TheDatasheetTableKnowsTheGpusByTheirReportedNames) {
  EXPECT_DOUBLE_EQ(datasheet_peak_flops("NVIDIA H100 80GB HBM3", c10::kBFloat16).first, 989e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops("NVIDIA H100 PCIe", c10::kBFloat16).first, 756e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops("NVIDIA H100 NVL", c10::kHalf).first, 835e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops("NVIDIA H200", c10::kBFloat16).first, 989e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops("NVIDIA A100-SXM4-80GB", c10::kBFloat16).first, 312e12);
  EXPECT_EQ(datasheet_peak_flops("NVIDIA H200", c10::kFloat).first, 0.0) << "no dense fp32 figure";
  EXPECT_EQ(datasheet_peak_flops("NVIDIA GeForce RTX 4090", c10::kBFloat16).first, 0.0);
  EXPECT_NE(datasheet_peak_flops("NVIDIA H100 80GB HBM3", c10::kBFloat16).second.find("datasheet"), std::string::npos);
}

TEST(Mfu, RunReportsMfuSamplesPerSecondAndEvalCheckpointTime) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("monitor.peak_tflops=0.001");  // 1 GFLOP/s
  sets.push_back("checkpoint.every_steps=10");
  nlohmann::json s = Trainer(resolve_config("", sets, {}), test::quiet_run()).fit();
  const double fpt = s["flops_per_token"].get<double>();
  EXPECT_DOUBLE_EQ(s["peak_tflops"].get<double>(), 0.001);
  // MFU's throughput: the training steps of the log windows after the first.
  EXPECT_NEAR(s["mfu"].get<double>(), s["train_tokens_per_s"].get<double>() * fpt / 1e9, 1e-12);
  EXPECT_TRUE(s["mfu_datasheet"].is_null()) << "a CPU has no datasheet figure";
  EXPECT_DOUBLE_EQ(s["mfu_measured"].get<double>(), s["mfu"].get<double>());
  // Sequences = tokens / block (16) in this config.
  EXPECT_NEAR(s["samples_per_s"].get<double>(), s["tokens_per_s"].get<double>() / 16, 1e-9);
  EXPECT_GT(s["eval_ms_per_step"].get<double>(), 0);
  EXPECT_GT(s["checkpoint_ms_per_step"].get<double>(), 0);

  std::ifstream in(dir.file("demo/metrics.jsonl"));
  std::string line;
  double eval_s = 0, ckpt_s = 0, steady_tokens = 0, steady_s = 0;
  int64_t last_tokens = 0;
  int steps = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] != "step") continue;
    ++steps;
    const double tps = j["tokens_per_s"].get<double>();
    if (steps > 1) {
      steady_tokens += static_cast<double>(j["tokens"].get<int64_t>() - last_tokens);
      steady_s += static_cast<double>(j["tokens"].get<int64_t>() - last_tokens) / tps;
    }
    last_tokens = j["tokens"].get<int64_t>();
    EXPECT_NEAR(j["mfu"].get<double>(), tps * fpt / 1e9, 1e-9 * tps * fpt / 1e9);
    EXPECT_NEAR(j["samples_per_s"].get<double>(), tps / 16, 1e-9 * tps);
    eval_s += j["eval_s"].get<double>();
    ckpt_s += j["checkpoint_s"].get<double>();
  }
  EXPECT_EQ(steps, 6);
  EXPECT_NEAR(s["train_tokens_per_s"].get<double>(), steady_tokens / steady_s, 1e-6 * steady_tokens / steady_s);
  // Evaluations after steps 15 and 30: the first lands in the line of step 20, the final one
  // after the last line. Checkpoints after 10 and 20 land in the lines of 15 and 25.
  EXPECT_GT(eval_s, 0);
  EXPECT_GT(ckpt_s, 0);
  EXPECT_LE(eval_s, s["eval_s_total"].get<double>());
}

}  // namespace
}  // namespace frugal::mfu_test
