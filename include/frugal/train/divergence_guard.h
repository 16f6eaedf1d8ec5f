// Divergence guard: notices a run that blew up and asks the loop to roll back to the last good
// checkpoint with a lower learning rate (guard.lr_factor), at most guard.max_rollbacks times;
// after that the run stops with exit code 3.
//
// It watches the logged training loss (the mean over each log window), so it adds no device
// sync beyond the log steps. next_guard_state() is the pure state machine:
//   nan/inf   a non-finite window loss diverges at once (skipped fp16 steps never reach it:
//             the scaler skips inf/NaN *gradients*; a NaN *loss* is beyond what it can fix)
//   first     the first window seeds the moving average
//   spike     loss > spike_factor x average: the streak grows (the average is not updated, so a
//             spike cannot drag it up); spike_windows in a row diverge
//   normal    otherwise the streak resets, the average moves, and this step becomes the newest
//             good step
// A rollback may use only checkpoints at or before `good_step`: later ones may hold the damage.
#pragma once

#include <cstdint>
#include <string>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"

namespace frugal {

struct GuardState {
  int64_t windows = 0;    // normal windows seen
  double ema = 0;         // moving average of the window loss
  int64_t above = 0;      // consecutive spiking windows
  int64_t good_step = 0;  // last step whose window was normal
};

struct GuardVerdict {
  GuardState state;
  bool diverged = false;
  std::string reason;
};

GuardVerdict next_guard_state(const GuardState& s, double window_loss, int64_t step, const GuardConfig& c);

class DivergenceGuard : public Callback {
 public:
  explicit DivergenceGuard(const GuardConfig& c) : config_(c) {}
  void on_step_end(const StepMetrics& m, Control& control) override;
  std::string state_key() const override { return "guard"; }
  void save_state(nlohmann::json& out) const override;
  void load_state(const nlohmann::json& in) override;

 private:
  GuardConfig config_;
  GuardState state_;
};

}  // namespace frugal
