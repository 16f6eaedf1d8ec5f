// The training step's phase laps (TrainStep::Lap), shared by the eager step (train_step.cpp) and
// the replayed CUDA graph (train_step_graph.cpp).
#pragma once

#include <chrono>
#include <cstring>

#include "frugal/core/phase_trace.h"
#include "frugal/train/train_step.h"

namespace frugal {

// Phase laps of one step: host time since the previous lap, recorded as the phase span `phase`
// when the profiler is capturing. On a GPU each lap also records a CUDA event: there the host
// returns from forward and backward long before the device has done them, so host laps measure
// kernel launches; settle() later reads those phases' device times.
class TrainStep::Lap {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Lap(TrainStep& step) : step_(step), t_(Clock::now()), mark_(step.events_.mark()) {}
  void operator()(const char* phase, double& slot) {
    auto now = Clock::now();
    if (PhaseTrace::active()) PhaseTrace::record(phase, t_, now);
    slot += std::chrono::duration<double>(now - t_).count();
    t_ = now;
    if (!step_.events_.active()) return;
    const int m = step_.events_.mark();
    // The data phase stays host time: it is the wait for the loader, not device work.
    if (std::strcmp(phase, "data") != 0) step_.spans_.push_back({device_phase(phase), mark_, m});
    mark_ = m;
  }
  // Starts the next lap now (time since the last one belongs to no phase).
  void restart() {
    t_ = Clock::now();
    if (step_.events_.active()) mark_ = step_.events_.mark();
  }

 private:
  static double PhaseTimes::*device_phase(const char* phase) {
    return std::strcmp(phase, "forward") == 0    ? &PhaseTimes::forward_s
           : std::strcmp(phase, "backward") == 0 ? &PhaseTimes::backward_s
                                                 : &PhaseTimes::optimizer_s;
  }
  TrainStep& step_;
  Clock::time_point t_;
  int mark_;
};

}  // namespace frugal
