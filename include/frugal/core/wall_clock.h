// The wall clock as Unix seconds and its one printed form. Shared by the deadline guard
// (train/deadline.h), the piped progress lines (monitor/progress.h) and whatever else stamps a
// time a person reads. And durations, on the steady clock.
#pragma once

#include <chrono>
#include <string>

namespace frugal {

// Seconds since the Unix epoch, by the wall clock; and such a time as "2026-11-24T18:00:00Z".
double unix_now();
std::string format_utc(double unix_s);

// Seconds elapsed on the steady clock since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace frugal
