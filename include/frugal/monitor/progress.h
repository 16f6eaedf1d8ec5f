// The live progress display: on a TTY one line redrawn in place
//   step 420/1000 [########--------]  loss 1.083  val 1.102  41.2k tok/s  ETA 0:17
// and, when stdout is not a TTY (a pipe, a Slurm log), a plain line with a UTC timestamp
//   2026-11-24T18:02:11Z step 420/1000  loss 1.0830  val 1.1020  41.2k tok/s  elapsed 0:42  ETA 0:17
// at the first log step, then at the first log step (train.log_every) after every `interval_s`
// seconds, and at the last step; evaluations print their own line. Before the first log step
// there is no loss or rate to show, and none is shown.
#pragma once

#include <functional>
#include <string>

#include "frugal/core/callback.h"

namespace frugal {

class ProgressDisplay : public Callback {
 public:
  // `clock` gives Unix seconds for the timestamps (a test fakes it).
  explicit ProgressDisplay(double interval_s = 30, std::function<double()> clock = nullptr);

  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  void on_train_end(const nlohmann::json& summary) override;

 private:
  double interval_s_;
  std::function<double()> clock_;
  double last_loss_ = -1;
  double last_val_ = -1;
  double last_draw_s_ = -1;
  double last_line_s_ = -1;  // elapsed_s of the last plain line; -1 before the first
  int64_t log_every_ = 10;
  std::string rate_unit_ = "tok/s";  // "samples/s" for tasks that count samples
};

// "1:02:03" / "2:03"
std::string format_duration(double seconds);
// "41.2k"
std::string format_rate(double per_s);
// Money, for every printed dollar figure: "$12.34" from $1, "$0.0312" from a cent, below that 3
// significant digits ("$0.0000312", not "$0.0000"), "$0.00" for nothing.
std::string format_usd(double usd);

}  // namespace frugal
