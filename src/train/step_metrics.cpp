// A step's figures; see step_metrics.h.
#include "frugal/train/step_metrics.h"

#include <cmath>

namespace frugal {

StepMetrics make_step_metrics(const StepReadings& r, const StepMetrics& previous) {
  StepMetrics m = previous;  // the figures of the newest log step carry over
  m.step = r.step;
  m.total_steps = r.total_steps;
  m.logged = r.logged;
  m.lr = r.lr;
  m.step_s = r.step_s;
  m.phases = r.phases;
  m.tokens = r.tokens;
  m.elapsed_s = r.elapsed_s;
  m.skipped_steps = r.skipped_steps;
  m.loss_scale = r.loss_scale;
  m.loss_scaling = r.loss_scaling;
  m.micro_batch = r.micro_batch;
  m.oom_backoffs = r.oom_backoffs;
  m.micro_grad_sq = std::nan("");  // measured at log steps only (below)
  if (!r.logged) return m;
  const double steps = static_cast<double>(r.window_steps);
  m.loss = r.window_loss_sum / steps;
  m.grad_norm = r.grad_norm;
  m.tokens_per_s = static_cast<double>(r.window_tokens) / r.window_s;
  m.samples_per_s = steps * static_cast<double>(r.samples_per_step) / r.window_s;
  m.rss_mb = r.rss_mb;
  m.eval_s = r.eval_s;
  m.checkpoint_s = r.checkpoint_s;
  m.micro_grad_sq = std::isfinite(r.micro_grad_sq_sum) && std::isfinite(r.grad_norm)
                        ? r.micro_grad_sq_sum / static_cast<double>(r.accum)
                        : std::nan("");
  m.mfu = 0;                          // the MFU meter fills it
  m.grad_noise_scale = std::nan("");  // the noise-scale meter fills it
  return m;
}

}  // namespace frugal
