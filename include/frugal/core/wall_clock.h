// The wall clock as Unix seconds and its one printed form. Shared by the deadline guard
// (train/deadline.h), the piped progress lines (monitor/progress.h) and whatever else stamps a
// time a person reads.
#pragma once

#include <string>

namespace frugal {

// Seconds since the Unix epoch, by the wall clock; and such a time as "2026-11-24T18:00:00Z".
double unix_now();
std::string format_utc(double unix_s);

}  // namespace frugal
