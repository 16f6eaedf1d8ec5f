// Writes runs/<name>/metrics.jsonl: one JSON object per logged step and per evaluation.
//   {"event":"step","step":10,"loss":2.31,"lr":0.0006,"grad_norm":0.9,"tokens_per_s":5123,
//    "step_s":0.38,"elapsed_s":4.1,"tokens":20480, ...}
// (docs/observability.md lists every field with its unit and formula)
//   {"event":"eval","step":250,"val_loss":1.02,"best_val_loss":1.02,"eval_s":0.3}
// Lines are flushed as written, so a crash loses at most the line being written. A resumed run
// first cuts the file back to its checkpoint (truncate_metrics_after) and then appends, so the
// file never holds a step twice.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/core/callback.h"

namespace frugal {

class MetricsWriter : public Callback {
 public:
  // append = false truncates the file; true appends (a resumed run). The file is opened when the
  // run begins (on_train_begin) or at the first line, not here: constructing the writer touches
  // nothing on disk.
  explicit MetricsWriter(std::string path, bool append = false);
  ~MetricsWriter() override;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void on_train_begin(const RunInfo& info) override { open(); }
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;

 private:
  void open();
  void write(const std::string& line);
  std::string path_;
  bool append_;
  std::FILE* f_ = nullptr;
};

// The JSON object of a logged step, as metrics.jsonl, `frugal train --json` and the dashboard
// show it. Non-finite values are written as null.
nlohmann::ordered_json step_json(const StepMetrics& m);
nlohmann::ordered_json eval_json(const EvalMetrics& m);
// A name for a user scalar (StepMetrics::user) or a task figure (EvalMetrics::task): 1 to 64
// letters, digits, '_', '.', '-' or '/'.
bool valid_metric_name(const std::string& name);

// Rewrites `path` (atomically) keeping only complete JSON lines whose "step" is <= `step`; a
// torn last line (a crash mid-write) is dropped. A missing file stays missing.
void truncate_metrics_after(const std::string& path, int64_t step);

}  // namespace frugal
