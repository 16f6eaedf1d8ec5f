// The profiler: the self-time arithmetic on a hand-built event tree, the window schedule, and a
// real capture: a Chrome trace that parses as JSON and holds frugal's phase spans and LibTorch's
// operator events, and the top-operators table in summary.json and report.html.
#include "frugal/monitor/profiler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/svg_chart.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::profiler_test {
namespace {

TEST(Profiler, SelfTimeSubtractsDirectChildrenOnTheSameTrack) {
  // Track 1: A [0,100) holds B [10,40) (which holds D [15,20)) and C [50,60).
  // Track 2: another B [0,7), and a second A [10,30) with nothing inside.
  std::vector<TraceEvent> ev = {
      {"A", "op", 1, 0, 100}, {"B", "op", 1, 10, 30}, {"D", "op", 1, 15, 5},
      {"C", "op", 1, 50, 10}, {"B", "op", 2, 0, 7},   {"A", "op", 2, 10, 20},
  };
  auto rows = top_ops_by_self_time(ev, 0);
  ASSERT_EQ(rows.size(), 4u);
  std::map<std::string, OpStat> by;
  for (const auto& r : rows) by[r.name] = r;
  EXPECT_DOUBLE_EQ(by["A"].self_us, (100 - 30 - 10) + 20);  // 80
  EXPECT_DOUBLE_EQ(by["A"].total_us, 120);
  EXPECT_EQ(by["A"].calls, 2);
  EXPECT_DOUBLE_EQ(by["B"].self_us, (30 - 5) + 7);  // 32
  EXPECT_DOUBLE_EQ(by["C"].self_us, 10);
  EXPECT_DOUBLE_EQ(by["D"].self_us, 5);
  EXPECT_EQ(rows[0].name, "A");  // sorted by self time
  EXPECT_EQ(rows[1].name, "B");
  EXPECT_EQ(top_ops_by_self_time(ev, 2).size(), 2u);
}

TEST(Profiler, BackToBackEventsAreSiblingsNotParents) {
  // B starts exactly where A ends: B is not A's child.
  std::vector<TraceEvent> ev = {{"A", "op", 1, 0, 10}, {"B", "op", 1, 10, 10}};
  auto rows = top_ops_by_self_time(ev, 0);
  for (const auto& r : rows) EXPECT_DOUBLE_EQ(r.self_us, 10) << r.name;
}

TEST(Profiler, WindowsOpenAtStartStepAndEveryNStepsAfter) {
  ProfileConfig c;
  c.capture_steps = 2;
  c.start_step = 3;
  c.every_steps = 0;
  std::vector<int64_t> opens;
  for (int64_t s = 0; s <= 20; ++s)
    if (profile_window_opens_after(c, s)) opens.push_back(s);
  EXPECT_EQ(opens, std::vector<int64_t>({3}));
  c.every_steps = 5;
  opens.clear();
  for (int64_t s = 0; s <= 20; ++s)
    if (profile_window_opens_after(c, s)) opens.push_back(s);
  EXPECT_EQ(opens, std::vector<int64_t>({3, 8, 13, 18}));
  c.capture_steps = 0;
  EXPECT_FALSE(profile_window_opens_after(c, 3));
}

TEST(Profiler, OverlappingWindowsAreRejectedAtValidation) {
  try {
    resolve_config("", {"profile.capture_steps=5", "profile.every_steps=3"}, {});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("profile.every_steps = 3"), std::string::npos) << e.what();
  }
}

TEST(Profiler, CaptureWritesAChromeTraceWithPhaseSpansOperatorsAndATopOpsTable) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  // Steps 14-16 are captured; the evaluation after step 15 falls inside the window.
  for (const char* s :
       {"profile.capture_steps=3", "profile.start_step=13", "profile.top_ops=8", "checkpoint.every_steps=15"})
    sets.push_back(s);
  // LibTorch's profiler logs to standard error by itself; on a CPU run it must not print an
  // ERROR line about a CUDA driver the machine does not need.
  ::testing::internal::CaptureStderr();
  nlohmann::json summary = Trainer(resolve_config("", sets, {}), test::quiet_run()).fit();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("gpuGetDeviceCount"), std::string::npos) << err;

  const std::string trace_path = dir.file("demo/profile/trace-steps-000014-000016.json");
  ASSERT_TRUE(std::filesystem::exists(trace_path));
  nlohmann::json trace = nlohmann::json::parse(test::read_text(trace_path));  // throws if not JSON
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::set<std::string> phases;
  std::set<int64_t> phase_steps;
  int64_t ops = 0;
  bool saw_matmul = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e.contains("ts") && e.contains("dur") && e.contains("pid") && e.contains("tid"));
    if (e["cat"] == "phase") {
      phases.insert(e["name"].get<std::string>());
      phase_steps.insert(e["args"]["step"].get<int64_t>());
    } else {
      ++ops;
      const std::string n = e["name"];
      saw_matmul |= n == "aten::mm" || n == "aten::addmm" || n == "aten::matmul" || n == "aten::linear";
      EXPECT_FALSE(e.contains("args")) << n << ": input shapes without profile.record_shapes";
    }
  }
  for (const char* p : {"step", "data", "forward", "backward", "optimizer", "eval", "checkpoint"})
    EXPECT_TRUE(phases.count(p)) << "no phase span " << p;
  EXPECT_EQ(phase_steps, std::set<int64_t>({14, 15, 16}));
  EXPECT_GT(ops, 100);
  EXPECT_TRUE(saw_matmul);
  EXPECT_EQ(trace["otherData"]["first_step"], 14);
  EXPECT_EQ(trace["otherData"]["last_step"], 16);

  // The table: at most top_ops rows, sorted by self time, shares of the profiled op time.
  ASSERT_TRUE(summary.contains("profile"));
  const auto& p = summary["profile"];
  EXPECT_EQ(p["captured_steps"], 3);
  EXPECT_EQ(p["traces"][0], "profile/trace-steps-000014-000016.json");
  const auto& rows = p["top_ops"];
  ASSERT_EQ(rows.size(), 8u);
  double pct = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_GT(rows[i]["calls"].get<int64_t>(), 0);
    EXPECT_LE(rows[i]["self_ms"].get<double>(), rows[i]["total_ms"].get<double>() + 1e-9);
    if (i > 0) {
      EXPECT_GE(rows[i - 1]["self_ms"].get<double>(), rows[i]["self_ms"].get<double>());
    }
    pct += rows[i]["self_pct"].get<double>();
  }
  EXPECT_LE(pct, 100.0 + 1e-6);
  const std::string html = test::read_text(dir.file("demo/report.html"));
  EXPECT_NE(html.find("id='top-ops'"), std::string::npos);
  // As the page writes it: an operator's name may hold characters HTML escapes (templates' <>, &).
  EXPECT_NE(html.find("<td>" + chart::escape(rows[0]["name"].get<std::string>()) + "</td>"), std::string::npos)
      << rows[0]["name"];
}

TEST(Profiler, RecordShapesPutsEachOperatorsInputDimsInTheTrace) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  for (const char* s : {"profile.capture_steps=1", "profile.start_step=2", "profile.record_shapes=true"})
    sets.push_back(s);
  const ResolvedConfig cfg = resolve_config("", sets, {});
  Trainer(cfg, test::quiet_run()).fit();
  nlohmann::json trace =
      nlohmann::json::parse(test::read_text(dir.file("demo/profile/trace-steps-000003-000003.json")));
  // The output head's forward: (tokens, embd) x (embd, vocab), as aten::mm's first two inputs.
  const int64_t tokens = cfg.config.data.micro_batch * cfg.config.model.block, embd = cfg.config.model.embd;
  const std::vector<int64_t> x{tokens, embd};
  bool saw_head = false;
  int64_t with_dims = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "op" || !e.contains("args")) continue;
    ASSERT_TRUE(e["args"]["Input Dims"].is_array()) << e.dump();
    ++with_dims;
    if (e["name"] != "aten::mm") continue;
    const auto dims = e["args"]["Input Dims"].get<std::vector<std::vector<int64_t>>>();
    saw_head |= dims.size() >= 2 && dims[0] == x && dims[1].size() == 2 && dims[1][0] == embd;
  }
  EXPECT_GT(with_dims, 50);
  EXPECT_TRUE(saw_head) << "no aten::mm with inputs (" << tokens << ", " << embd << ") x (" << embd << ", vocab)";
}

TEST(Profiler, PhaseSpansOnlyWhenTorchOpsAreOff) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  for (const char* s : {"profile.capture_steps=2", "profile.start_step=0", "profile.torch_ops=false"})
    sets.push_back(s);
  nlohmann::json summary = Trainer(resolve_config("", sets, {}), test::quiet_run()).fit();
  nlohmann::json trace =
      nlohmann::json::parse(test::read_text(dir.file("demo/profile/trace-steps-000001-000002.json")));
  int64_t phases = 0, ops = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") (e["cat"] == "phase" ? phases : ops) += 1;
  EXPECT_EQ(ops, 0);
  EXPECT_GE(phases, 2 * 5);  // step, data, forward, backward, optimizer per step
  EXPECT_EQ(summary["profile"]["torch_ops"], false);
  EXPECT_EQ(summary["profile"]["torch_ops_problem"], "profile.torch_ops = false");
}

}  // namespace
}  // namespace frugal::profiler_test
