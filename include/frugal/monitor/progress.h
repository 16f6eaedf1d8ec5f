// The live progress display: on a TTY one line redrawn in place
//   step 420/1000 [########--------]  loss 1.083  val 1.102  41.2k tok/s  ETA 0:17
// and, when stdout is not a TTY, a plain line at every ~5% of the run and at each evaluation.
#pragma once

#include <string>

#include "frugal/train/callback.h"

namespace frugal {

class ProgressDisplay : public Callback {
 public:
  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  void on_train_end(const nlohmann::json& summary) override;

 private:
  double last_loss_ = -1;
  double last_val_ = -1;
  double last_draw_s_ = -1;
  int64_t plain_every_ = 1;
  std::string rate_unit_ = "tok/s";  // "samples/s" for tasks that count samples
};

// "1:02:03" / "2:03"
std::string format_duration(double seconds);
// "41.2k"
std::string format_rate(double per_s);

}  // namespace frugal
