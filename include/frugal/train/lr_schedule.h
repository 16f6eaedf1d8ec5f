// The learning-rate schedules: a linear warm-up, then cosine decay to a floor (GPT-2/3 style) or
// warmup-stable-decay (the peak held, then a short linear decay at the end).
#pragma once

#include <cmath>
#include <cstdint>

#include "frugal/core/config.h"

namespace frugal {

// The warm-up both schedules share: peak * (step + 1) / warmup for step < warmup.
inline double warmup_lr(int64_t step, int64_t warmup, double peak) {
  return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
}

// Learning rate for optimizer step `step` (0-based: the step about to be taken), cosine:
//   step < warmup:  peak * (step + 1) / warmup
//   after:          floor + (peak - floor) * (1 + cos(pi * progress)) / 2, progress in [0, 1]
inline double lr_at(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio) {
  if (warmup > 0 && step < warmup) return warmup_lr(step, warmup, peak);
  const double floor = peak * min_ratio;
  const int64_t decay = total - warmup;
  if (decay <= 1) return peak;
  double progress = static_cast<double>(step - warmup) / static_cast<double>(decay - 1);
  if (progress > 1) progress = 1;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

// The first step of warmup-stable-decay's decay: the last round(decay_fraction * total) steps
// decay, never before the warm-up ends. Lengthening `total` while step < this moves the decay
// later and changes no rate already used.
inline int64_t wsd_decay_start(int64_t total, int64_t warmup, double decay_fraction) {
  const int64_t decay = static_cast<int64_t>(std::llround(decay_fraction * static_cast<double>(total)));
  const int64_t start = total - decay;
  return start > warmup ? start : warmup;
}

// Warmup-stable-decay: the warm-up as above, `peak` until wsd_decay_start, then linear from peak
// down to peak * min_ratio, reached at the last step (total - 1). `decay_from` > 0: the decay
// begins no earlier than that step (an end moved so late that its decay should have begun
// already: the rate goes down from the peak over the steps left, not from where it would be).
inline double wsd_lr_at(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio,
                        double decay_fraction, int64_t decay_from = 0) {
  if (warmup > 0 && step < warmup) return warmup_lr(step, warmup, peak);
  int64_t start = wsd_decay_start(total, warmup, decay_fraction);
  if (decay_from > start) start = decay_from;
  if (step < start) return peak;
  const int64_t span = total - 1 - start;
  if (span <= 0) return peak * min_ratio;
  double progress = static_cast<double>(step - start + 1) / static_cast<double>(span + 1);
  if (progress > 1) progress = 1;
  return peak + (peak * min_ratio - peak) * progress;
}

// The rate train.schedule gives step `step` of `t`'s run of `total` steps (train.steps, or the
// earlier end a deadline moved it to; `decay_from`: see wsd_lr_at).
inline double schedule_lr(int64_t step, const TrainConfig& t, int64_t total, int64_t decay_from = 0) {
  if (t.schedule == LrSchedule::kWsd)
    return wsd_lr_at(step, total, t.warmup_steps, t.lr, t.min_lr_ratio, t.decay_fraction, decay_from);
  return lr_at(step, total, t.warmup_steps, t.lr, t.min_lr_ratio);
}
inline double schedule_lr(int64_t step, const TrainConfig& t) { return schedule_lr(step, t, t.steps); }

}  // namespace frugal
