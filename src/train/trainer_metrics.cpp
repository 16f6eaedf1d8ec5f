// The trainer's observability: progress display, profiler, live dashboard, MFU, gradient noise
// scale and the eval/checkpoint share of the step time. Kept apart from the loop (trainer.cpp) so
// that the loop only calls named hooks.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "frugal/monitor/console.h"
#include "frugal/monitor/json_progress.h"
#include "frugal/monitor/progress.h"
#include "train/internal/trainer_state.h"

namespace frugal {

void Trainer::State::install_monitors() {
  const Config& c = rc.config;
  auto& con = Console::get();
  if (!is_writer()) {
    // Data-parallel ranks other than 0 train silently: rank 0 shows and serves the run.
  } else if (opts.json) {
    callbacks.insert(callbacks.begin(), std::make_shared<JsonProgress>());
  } else if (!opts.quiet) {
    callbacks.insert(callbacks.begin(), std::make_shared<ProgressDisplay>());
  }
  const c10::ScalarType dtype = step->precision().autocast() ? step->precision().dtype() : torch::kFloat;
  {
    // The peak probe is frugal's own start-up measurement (a 1024^3 matmul), not training work:
    // memory.limit_mb does not apply to it, or a tight limit would fail before the first step.
    TensorBytesLimitGuard unlimited(0);
    peak = resolve_peak_flops(c.monitor, dtype, device);
  }
  info.peak_flops = peak.flops;
  info.samples_per_step = c.data.micro_batch * step->accum() * (dp ? dp->world_size() : 1);
  if (c.profile.capture_steps > 0 && is_writer()) {
    profiler = std::make_shared<Profiler>(c.profile, run_dir, device);
    callbacks.push_back(profiler);
  }
  if (!c.monitor.http.empty() && is_writer()) {
    dashboard = std::make_shared<Dashboard>(c.monitor, c.run.name);
    callbacks.push_back(dashboard);
    info.dashboard_url = dashboard->url();
    // Printed even with --quiet: with port 0 this is the only place the port is told.
    const bool quiet = con.quiet();
    con.set_quiet(false);
    con.line(fmt::format("dashboard: {} (/metrics for Prometheus, /api/metrics as JSON)", dashboard->url()));
    con.set_quiet(quiet);
  }
}

bool Trainer::State::next_step_logs() const {
  const int64_t next = loop.step + 1;
  return next % rc.config.train.log_every == 0 || next == rc.config.train.steps;
}

void Trainer::State::observe_logged_step(StepMetrics& m, const StepResult& r) {
  const detail::LoopState& L = loop;
  m.samples_per_s = static_cast<double>(L.window_steps * info.samples_per_step) / L.window_s;
  m.mfu = model_flops_utilization(m.tokens_per_s, info.flops_per_token, info.peak_flops);
  m.eval_s = eval_s_window;
  m.checkpoint_s = checkpoint_s_window;
  eval_s_window = checkpoint_s_window = 0;
  if (r.micro_grad_sq_sum.defined() && !r.skipped && std::isfinite(m.grad_norm)) {
    const double b_small = static_cast<double>(rc.config.data.micro_batch);
    const double k = static_cast<double>(step->accum());
    const double small_sq = r.micro_grad_sq_sum.item<double>() / k;
    grad_noise.add(estimate_grad_noise(small_sq, m.grad_norm * m.grad_norm, b_small, b_small * k));
  }
  m.grad_noise_scale = grad_noise.b_simple();
}

void Trainer::State::add_observability(nlohmann::ordered_json& summary) {
  const double wall = summary.value("wall_s", 0.0);
  const double tps = summary.value("tokens_per_s", 0.0);
  summary["samples_per_s"] = wall > 0 ? static_cast<double>(loop.step * info.samples_per_step) / wall : 0.0;
  const double mfu = model_flops_utilization(tps, info.flops_per_token, info.peak_flops);
  summary["mfu"] = mfu;
  if (!mfu_note(mfu, peak.source).empty()) summary["mfu_note"] = mfu_note(mfu, peak.source);
  summary["peak_tflops"] = info.peak_flops / 1e12;
  summary["peak_source"] = peak.source;
  const double n_steps = static_cast<double>(std::max<int64_t>(1, session_steps));
  summary["eval_ms_per_step"] = 1e3 * eval_s_total / n_steps;
  summary["checkpoint_ms_per_step"] = 1e3 * checkpoint_s_total / n_steps;
  summary["eval_s_total"] = eval_s_total;
  summary["checkpoint_s_total"] = checkpoint_s_total;
  const double gns = grad_noise.b_simple();
  summary["global_batch"] = info.samples_per_step;
  if (grad_noise.count() > 0) {
    summary["grad_noise_scale"] = std::isfinite(gns) ? nlohmann::ordered_json(gns) : nlohmann::ordered_json(nullptr);
    summary["grad_noise_estimates"] = grad_noise.count();
    const double batch = static_cast<double>(info.samples_per_step);
    summary["grad_noise_hint"] =
        !std::isfinite(gns) ? "too noisy to estimate yet (the mean-gradient estimate is not positive)"
        : gns > 2 * batch   ? fmt::format("a larger global batch (up to ~{:.0f} sequences) would likely cut the "
                                          "steps needed nearly in proportion", gns)
        : gns < 0.5 * batch ? "the global batch is above the noise scale: a smaller batch would waste fewer tokens"
                            : "the global batch is near the noise scale (a good trade-off)";
  }
  if (profiler) profiler->add_to_summary(summary);
}

}  // namespace frugal
