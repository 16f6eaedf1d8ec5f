// Early stopping: stop when a metric has not improved for `patience` evaluations.
//
// next_early_stop() is the pure state machine (tests cover each transition):
//   warm-up   the first early_stop.warmup values are ignored entirely
//   first     the first counted value becomes the best
//   improve   min: value < best - min_delta (max: value > best + min_delta) -> best = value, bad = 0
//   stall     otherwise (NaN included) bad += 1; bad >= patience -> stop
// EarlyStopping is the callback around it; its state (best, counter) is saved in checkpoints so
// a resumed run stops exactly where the uninterrupted one would.
#pragma once

#include <cstdint>
#include <string>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"

namespace frugal {

struct EarlyStopState {
  int64_t seen = 0;  // values received (warm-up included)
  bool has_best = false;
  double best = 0;
  int64_t best_step = 0;
  int64_t bad = 0;  // consecutive counted values without improvement
};

struct EarlyStopDecision {
  EarlyStopState state;
  bool stop = false;
  std::string reason;  // set when stop
};

EarlyStopDecision next_early_stop(const EarlyStopState& s, double value, int64_t step, const EarlyStopConfig& c);

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(const EarlyStopConfig& c) : config_(c) {}
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  std::string state_key() const override { return "early_stop"; }
  void save_state(nlohmann::json& out) const override;
  void load_state(const nlohmann::json& in) override;
  const EarlyStopState& state() const { return state_; }

 private:
  void observe(double value, int64_t step, Control& control);
  EarlyStopConfig config_;
  EarlyStopState state_;
};

}  // namespace frugal
