// Linear warm-up followed by cosine decay to a floor: the schedule of GPT-2/3 style training.
#pragma once

#include <cmath>
#include <cstdint>

namespace frugal {

// Learning rate for optimizer step `step` (0-based: the step about to be taken).
//   step < warmup:  peak * (step + 1) / warmup
//   after:          floor + (peak - floor) * (1 + cos(pi * progress)) / 2, progress in [0, 1]
inline double lr_at(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio) {
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double floor = peak * min_ratio;
  const int64_t decay = total - warmup;
  if (decay <= 1) return peak;
  double progress = static_cast<double>(step - warmup) / static_cast<double>(decay - 1);
  if (progress > 1) progress = 1;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace frugal
