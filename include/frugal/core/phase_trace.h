// frugal's own phase spans (data, forward, backward, optimizer, eval, checkpoint) for the
// profiler's Chrome traces. Recording is off until the profiler opens a capture window; while off,
// a span costs one relaxed atomic load, so the training step can always call it.
//
// Thread safety: record() may be called from any thread (the checkpoint writer records too).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "frugal/core/crash_report.h"

namespace frugal {

struct PhaseSpanRecord {
  const char* name;  // a string literal: "data", "forward", ...
  int64_t begin_ns;  // steady_clock nanoseconds
  int64_t end_ns;
  int64_t step;  // the 1-based step being run (0 = outside a step)
};

class PhaseTrace {
 public:
  using Clock = std::chrono::steady_clock;
  static bool active() { return active_.load(std::memory_order_relaxed); }
  // Clears earlier spans and starts recording.
  static void start();
  // Stops recording and returns the spans recorded since start().
  static std::vector<PhaseSpanRecord> stop();
  static void record(const char* name, Clock::time_point begin, Clock::time_point end);
  // The step whose phases are being recorded (the trainer sets it before each step).
  static void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }

 private:
  static std::atomic<bool> active_;
  static std::atomic<int64_t> step_;
};

// Records [construction, destruction) as a span named `name` (a string literal) when active, and
// names the same phase for a crash report (CrashPhase) all the while.
class PhaseSpan {
 public:
  explicit PhaseSpan(const char* name) : name_(name), begin_(PhaseTrace::Clock::now()), crash_phase_(name) {}
  ~PhaseSpan() {
    if (PhaseTrace::active()) PhaseTrace::record(name_, begin_, PhaseTrace::Clock::now());
  }
  PhaseSpan(const PhaseSpan&) = delete;
  PhaseSpan& operator=(const PhaseSpan&) = delete;

 private:
  const char* name_;
  PhaseTrace::Clock::time_point begin_;
  CrashPhase crash_phase_;
};

}  // namespace frugal
