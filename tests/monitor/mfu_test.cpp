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

TEST(Mfu, RunReportsMfuSamplesPerSecondAndEvalCheckpointTime) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("monitor.peak_tflops=0.001");  // 1 GFLOP/s
  sets.push_back("checkpoint.every_steps=10");
  nlohmann::json s = Trainer(resolve_config("", sets, {}), test::quiet_run()).fit();
  const double fpt = s["flops_per_token"].get<double>();
  EXPECT_DOUBLE_EQ(s["peak_tflops"].get<double>(), 0.001);
  EXPECT_NEAR(s["mfu"].get<double>(), s["tokens_per_s"].get<double>() * fpt / 1e9, 1e-12);
  // Sequences = tokens / block (16) in this config.
  EXPECT_NEAR(s["samples_per_s"].get<double>(), s["tokens_per_s"].get<double>() / 16, 1e-9);
  EXPECT_GT(s["eval_ms_per_step"].get<double>(), 0);
  EXPECT_GT(s["checkpoint_ms_per_step"].get<double>(), 0);

  std::ifstream in(dir.file("demo/metrics.jsonl"));
  std::string line;
  double eval_s = 0, ckpt_s = 0;
  int steps = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] != "step") continue;
    ++steps;
    const double tps = j["tokens_per_s"].get<double>();
    EXPECT_NEAR(j["mfu"].get<double>(), tps * fpt / 1e9, 1e-9 * tps * fpt / 1e9);
    EXPECT_NEAR(j["samples_per_s"].get<double>(), tps / 16, 1e-9 * tps);
    eval_s += j["eval_s"].get<double>();
    ckpt_s += j["checkpoint_s"].get<double>();
  }
  EXPECT_EQ(steps, 6);
  // Evaluations after steps 15 and 30: the first lands in the line of step 20, the final one
  // after the last line. Checkpoints after 10 and 20 land in the lines of 15 and 25.
  EXPECT_GT(eval_s, 0);
  EXPECT_GT(ckpt_s, 0);
  EXPECT_LE(eval_s, s["eval_s_total"].get<double>());
}

}  // namespace
}  // namespace frugal::mfu_test
