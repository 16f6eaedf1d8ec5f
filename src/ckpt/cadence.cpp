// Checkpoint cadence; see cadence.h.
#include "frugal/ckpt/cadence.h"

#include <cmath>

#include "frugal/core/wall_clock.h"

namespace frugal {

double young_daly_interval_s(double save_s, double mtbf_s) { return std::sqrt(2.0 * save_s * mtbf_s); }

bool checkpoint_due(const CheckpointConfig& c, const CadenceInput& in) {
  if (!c.enabled || in.step <= in.last_save_step) return false;
  if (c.every_steps > 0 && in.step % c.every_steps == 0) return true;
  if (c.auto_interval) {
    if (in.last_stall_s < 0) return true;  // measure the save cost once, early
    return in.since_save_s >= young_daly_interval_s(std::max(in.last_stall_s, 1e-3), c.mtbf_minutes * 60);
  }
  return c.every_minutes > 0 && in.since_save_s >= c.every_minutes * 60;
}

void CheckpointCadence::on_step_end(const StepMetrics& m, Control& control) {
  CadenceInput in;
  in.step = m.step;
  in.last_save_step = last_save_step_;
  in.since_save_s = seconds_since(last_save_);
  in.last_stall_s = last_stall_s_;
  if (checkpoint_due(config_, in)) control.request_checkpoint();
}

void CheckpointCadence::on_checkpoint(const CheckpointEvent& e) {
  last_save_step_ = e.step;
  last_stall_s_ = e.stall_s;
  last_save_ = std::chrono::steady_clock::now();
}

}  // namespace frugal
