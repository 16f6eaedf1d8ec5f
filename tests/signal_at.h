// Test helper: a callback that raises a signal at the end of one step, as a spot reclaim notice
// (SIGTERM, SIGUSR1) would arrive during training.
#pragma once

#include <csignal>
#include <cstdint>

#include "frugal/core/callback.h"

namespace frugal::test {

class SignalAt : public Callback {
 public:
  explicit SignalAt(int64_t step, int sig = SIGUSR1) : step_(step), sig_(sig) {}
  void on_step_end(const StepMetrics& m, Control&) override {
    if (m.step == step_) std::raise(sig_);
  }

 private:
  int64_t step_;
  int sig_;
};

}  // namespace frugal::test
