// When to write a checkpoint: every N steps, every M minutes, or at the Young/Daly interval
// sqrt(2 x C x MTBF), where C is the measured cost of one checkpoint (the time the trainer was
// blocked by the last save) and MTBF the expected time between preemptions
// (checkpoint.mtbf_minutes). That interval minimises the expected lost work plus checkpoint
// overhead to first order (Young 1974; Daly 2006). Example: C = 2 s, MTBF = 2 h gives
// sqrt(2 x 2 x 7200) = 170 s.
//
// checkpoint_due() is the pure decision; CheckpointCadence is the callback that asks the loop for a
// checkpoint (Control::request_checkpoint) and learns the save cost from on_checkpoint.
#pragma once

#include <chrono>
#include <cstdint>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"

namespace frugal {

// Seconds between checkpoints by Young/Daly. save_s and mtbf_s in seconds; > 0.
double young_daly_interval_s(double save_s, double mtbf_s);

struct CadenceInput {
  int64_t step = 0;            // steps completed
  int64_t last_save_step = 0;  // step of the last save (0 = none in this run)
  double since_save_s = 0;     // seconds since the last save (or since the run began)
  double last_stall_s = -1;    // measured cost of the last save; < 0 = not measured yet
};

// Whether the loop should save after this step. every_steps and the time rule combine with "or";
// auto_interval replaces every_minutes. Disabled (enabled = false) means never.
bool checkpoint_due(const CheckpointConfig& c, const CadenceInput& in);

class CheckpointCadence : public Callback {
 public:
  explicit CheckpointCadence(const CheckpointConfig& c) : config_(c) {}
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_checkpoint(const CheckpointEvent& e) override;
  // The step a resumed run starts from counts as a save (RunInfo::start_step).
  void on_train_begin(const RunInfo& info) override { last_save_step_ = info.start_step; }

 private:
  CheckpointConfig config_;
  int64_t last_save_step_ = 0;
  double last_stall_s_ = -1;
  std::chrono::steady_clock::time_point last_save_ = std::chrono::steady_clock::now();
};

}  // namespace frugal
