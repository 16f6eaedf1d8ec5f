// The profiler ([profile], docs/observability.md). It captures windows of `capture_steps` steps
// (once after step start_step, or every every_steps steps from there) and writes each as a
// Chrome-trace JSON file runs/<name>/profile/trace-steps-A-B.json that Perfetto
// (ui.perfetto.dev) and chrome://tracing open. A trace holds frugal's own phase spans (step,
// data, forward, backward, optimizer, eval, checkpoint; always) and, where the LibTorch build
// can record them, its operator events (aten ops and autograd nodes). The operators are summed
// into a table of the top operators by self time, which lands in summary.json and report.html.
//
// LibTorch 1.13 from Debian has no Kineto, so its profiler cannot save traces itself
// (ProfilerResult::save throws); frugal writes the JSON from the recorded events instead, which
// works the same on 2.x builds. Event time fields differ between versions: compat.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"

namespace frugal {

// One complete ("X") event of a trace, in microseconds on the Unix-epoch clock.
struct TraceEvent {
  std::string name;
  std::string cat;  // "phase" (frugal) or "op" (LibTorch)
  int64_t tid = 0;  // the track: events on one track nest or are disjoint
  int64_t ts_us = 0;
  int64_t dur_us = 0;
  int64_t step = 0;  // phases: the step they belong to
  // ops, with profile.record_shapes: each input's dimensions (empty for a non-tensor input),
  // written as the event's "Input Dims" argument, the key PyTorch's own traces use.
  std::vector<std::vector<int64_t>> input_dims = {};
};

struct OpStat {
  std::string name;
  int64_t calls = 0;
  double self_us = 0;   // time in the op itself, without the ops it called
  double total_us = 0;  // time including the ops it called
};

// Sums events by name. Self time = duration minus the durations of the events directly nested in
// it on the same track. Sorted by self time, largest first; at most `n` rows (0 = all).
std::vector<OpStat> top_ops_by_self_time(const std::vector<TraceEvent>& events, size_t n);

// True when a capture window opens after step `step` (0 = before the first step).
bool profile_window_opens_after(const ProfileConfig& c, int64_t step);

// The Chrome-trace JSON object {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
// with a named track per tid (tid 0 = "frugal phases").
nlohmann::json chrome_trace(const std::vector<TraceEvent>& events, const nlohmann::json& other_data);

class Profiler : public Callback {
 public:
  Profiler(const ProfileConfig& config, std::string run_dir, c10::Device device);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  // Closes a window still open (the run ended inside it) and adds summary["profile"]: the trace
  // files, the steps captured and the top-operators table.
  void add_to_summary(nlohmann::ordered_json& summary) override;

  const std::vector<std::string>& traces() const { return traces_; }

 private:
  void open(int64_t after_step);
  void close(int64_t last_step);

  ProfileConfig config_;
  std::string dir_;
  c10::Device device_;
  bool open_ = false;
  bool torch_open_ = false;    // LibTorch's profiler is recording this window
  std::string torch_problem_;  // why operator events are missing ("" = none)
  int64_t opened_after_ = 0;
  int64_t sys_us0_ = 0;  // clocks at open(): phase spans (steady) -> Unix microseconds
  int64_t steady_ns0_ = 0;
  int64_t captured_steps_ = 0;
  std::vector<std::string> traces_;
  std::vector<OpStat> op_totals_;  // every window's operators, summed by name
};

}  // namespace frugal
