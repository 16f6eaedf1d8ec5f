// `frugal train --json`: machine-readable progress, one JSON object per line on stdout.
//   {"event":"start","run_name":"demo","total_steps":600,"run_dir":"runs/demo","dashboard":""}
//   {"event":"step",...}     at every log step: the metrics.jsonl object (metrics_writer.h)
//   {"event":"eval",...}     after each evaluation
//   {"event":"summary",...}  at the end: summary.json's object
// Human lines (banner, alerts, the final table) go to stderr in this mode (Console::json_mode).
#pragma once

#include "frugal/core/callback.h"

namespace frugal {

class JsonProgress : public Callback {
 public:
  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  void on_train_end(const nlohmann::json& summary) override;
};

}  // namespace frugal
