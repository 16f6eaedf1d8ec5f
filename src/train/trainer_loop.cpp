// The training loop; see trainer.h. A step produces, then is observed: the TrainStep runs the
// maths, read_step() turns its result and the loop's counters into plain readings (the only host
// reads of device values, on log steps), make_step_metrics() makes the step's figures, the
// producers among the callbacks fill theirs, and then every callback observes.
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frugal/core/console.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/core/memory.h"
#include "frugal/core/phase_trace.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/train/lr_schedule.h"
#include "train/internal/trainer_state.h"

namespace frugal {

nlohmann::json Trainer::fit() {
  State& s = *s_;
  Control control;
  {
    CrashPhase phase("session start");
    s.begin_session(control);
  }
  while (s.loop.step < s.total_steps() && !control.should_stop()) {
    s.writer->poll();  // an async write's error surfaces here, on the trainer thread
    s.train_one_step(control);
    if (control.rollback_requested()) {
      s.rollback(control);
      continue;
    }
    s.check_signal(control);
    s.maybe_eval(control);
    s.check_signal(control);
    if (s.dp) s.dp->agree(control);  // stops and checkpoints are decided by all ranks together
    s.apply_end_request(control);
    if (control.checkpoint_requested() && !control.should_stop()) s.save_checkpoint();
    control.clear_checkpoint_request();
  }
  CrashPhase phase("finish");
  return s.finish(control);
}

// The banner, on_train_begin, this session's clocks; then what must happen before step 1: a
// signal during start-up stops at once, and an evaluation a stop signal interrupted runs first.
void Trainer::State::begin_session(Control& control) {
  print_banner();
  for (auto& cb : callbacks) cb->on_train_begin(info);
  last_metrics.total_steps = total_steps();
  last_metrics.tokens = loop.tokens;
  session_start = detail::Clock::now();
  startup_s = std::chrono::duration<double>(session_start - constructed).count();
  model->train();
  reset_tensor_bytes_peak();
  device::reset_cuda_peak(device);
  check_signal(control);
  if (loop.step > 0 && !control.should_stop()) {
    // A resumed run that already meets a stop rule (its budget spent, its time limit reached)
    // stops here, as the uninterrupted run did, instead of training and billing one more step.
    StepMetrics now;
    now.step = loop.step;
    now.total_steps = total_steps();
    now.tokens = loop.tokens;
    now.elapsed_s = billed_s();
    for (auto& cb : callbacks) cb->on_resume(now, control);
  }
  if (dp) dp->agree(control);
  if (loop.eval_pending && !control.should_stop()) run_eval(control);
}

// One optimizer step: run it, make its figures, let the producers fill theirs, then observe.
void Trainer::State::train_one_step(Control& control) {
  const Config& c = rc.config;
  // The schedule follows optimizer steps actually taken: a skipped (inf/NaN) step does not
  // advance it. The divergence guard scales it down after each rollback. A task's own schedule
  // (TaskHooks::lr_schedule) replaces warm-up and cosine.
  const int64_t taken = step->optimizer().step_count();
  double base = 0;
  if (task.hooks.lr_schedule) {
    base = task.hooks.lr_schedule(taken, total_steps());
    FRUGAL_CHECK(std::isfinite(base) && base >= 0, ConfigError,
                 fmt::format("TaskHooks::lr_schedule({}, {}) returned {}; a learning rate must be finite and >= 0",
                             taken, total_steps(), base));
  } else {
    base = schedule_lr(taken, c.train, total_steps(), loop.decay_from);
  }
  const double lr = loop.lr_scale * base;
  PhaseTrace::set_step(loop.step + 1);
  step->set_grad_noise_probe(setup.grad_noise && next_step_logs());
  // On a GPU, the device is waited for (its phase times read) on log steps only.
  step->set_settle_each_step(next_step_logs());
  const auto t0 = detail::Clock::now();
  StepResult r;
  {
    PhaseSpan span("step");
    if (dp) dp->begin_step();
    r = step->run(loop.step, lr);
    if (dp) dp->end_step();
  }
  StepMetrics m = make_step_metrics(read_step(r, lr, seconds_since(t0)), last_metrics);
  for (auto& cb : callbacks) cb->on_step_metrics(m);
  for (const auto& [name, value] : m.user)
    FRUGAL_CHECK(valid_metric_name(name), ConfigError,
                 fmt::format("StepMetrics::user: scalar name '{}' must be 1-64 letters, digits or _ . - /", name));
  for (auto& cb : callbacks) cb->on_step_end(m, control);
  last_metrics = m;
}

// The loop's counters after a step, and its readings; on log steps the only host reads of the
// step's device values (besides the fp16 scaler's verdict, and the wait for the device's events
// in TrainStep::run on a GPU), and the log window closes.
StepReadings Trainer::State::read_step(const StepResult& r, double lr, double step_s) {
  const int64_t tokens = r.tokens * (dp ? dp->world_size() : 1);  // every rank consumed as many
  loss_sum += r.loss;                                             // r.loss is already the mean over ranks
  ++loop.step;
  loop.window_steps += 1;
  loop.window_tokens += tokens;
  loop.window_s += step_s;
  loop.tokens += tokens;
  session_step_s += step_s;
  if (r.device_timed) {  // device phases count once, when settled (possibly steps later)
    session_phases.data_s += r.phases.data_s;
    session_phases += r.settled;
  } else {
    session_phases += r.phases;
  }
  session_steps += 1;
  StepReadings in;
  in.step = loop.step;
  in.total_steps = total_steps();
  in.logged = loop.step % rc.config.train.log_every == 0 || loop.step == total_steps();
  in.lr = lr;
  in.step_s = step_s;
  in.phases = r.phases;
  in.tokens = loop.tokens;
  in.elapsed_s = billed_s();
  in.skipped_steps = step->scaler().state().skipped;
  in.loss_scale = step->scaler().scale();
  in.loss_scaling = step->scaler().enabled();
  in.micro_batch = step->micro_batch_effective();
  in.oom_backoffs = step->oom_backoffs();
  if (!in.logged) return in;
  in.window_steps = loop.window_steps;
  in.window_tokens = loop.window_tokens;
  in.window_s = loop.window_s;
  in.window_loss_sum = loss_sum.item<double>();
  in.grad_norm = r.grad_norm.item<double>();
  if (r.micro_grad_sq_sum.defined() && !r.skipped) in.micro_grad_sq_sum = r.micro_grad_sq_sum.item<double>();
  in.accum = step->accum();
  in.samples_per_step = setup.global_batch;
  in.rss_mb = static_cast<double>(rss_now_bytes()) / 1e6;
  in.eval_s = eval_s_window;
  in.checkpoint_s = checkpoint_s_window;
  eval_s_window = checkpoint_s_window = 0;
  loop.final_train = in.window_loss_sum / static_cast<double>(in.window_steps);
  logged_grad_norm = in.grad_norm;
  logged_grad_norm_step = loop.step;
  loss_sum.zero_();
  loop.window_steps = loop.window_tokens = 0;
  loop.window_s = 0;
  return in;
}

// On a GPU, the steps queued since the last log step: waits for their device work (their device
// time joins the session's phases) and counts the wait as training time of the open log window,
// so that an evaluation or a checkpoint save that follows is timed without it.
void Trainer::State::settle_queued_steps() {
  const auto t0 = detail::Clock::now();
  session_phases += step->settle_pending();
  const double waited = seconds_since(t0);
  loop.window_s += waited;
  session_step_s += waited;
}

bool Trainer::State::next_step_logs() const {
  const int64_t next = loop.step + 1;
  return next % rc.config.train.log_every == 0 || next == total_steps();
}

int64_t Trainer::State::total_steps() const {
  const int64_t steps = rc.config.train.steps;
  return loop.end_step > 0 && loop.end_step < steps ? loop.end_step : steps;
}

// An end moved before train.steps (the deadline guard's, agreed by every rank): the schedule and
// the loop end there from the next step on; a checkpoint keeps it for a resume.
void Trainer::State::apply_end_request(Control& control) {
  const int64_t end = control.end_at();
  std::string why = control.end_reason();
  control.clear_end_request();
  if (end <= 0 || end >= total_steps() || end <= loop.step) return;
  loop.end_step = end;
  loop.end_reason = std::move(why);
  // An end this close comes after the step its WSD decay should have begun at: the decay begins
  // now, from the peak, over the steps left (no cliff in the rate).
  const TrainConfig& t = rc.config.train;
  const int64_t taken = step->optimizer().step_count();
  const int64_t own_start = wsd_decay_start(end, t.warmup_steps, t.decay_fraction);
  if (t.schedule == LrSchedule::kWsd && !task.hooks.lr_schedule && own_start < taken) {
    loop.decay_from = taken;
    loop.end_reason +=
        fmt::format("; its decay would have begun at step {}, so it begins now and runs over the {} steps left",
                    own_start, end - loop.step);
  }
  if (is_writer()) Console::get().line(fmt::format("step {}: {}", loop.step, loop.end_reason));
}

void Trainer::State::check_signal(Control& control) const {
  if (preemption_requested())
    control.request_stop(fmt::format("stop signal {} ({})", preemption_signal(), strsignal(preemption_signal())),
                         StopKind::kPreempted);
}

// Every train.eval_every steps; a stop signal defers it to the resumed run (which evaluates this
// step first), any other stop makes it the final evaluation's job.
void Trainer::State::maybe_eval(Control& control) {
  const int64_t every = rc.config.train.eval_every;
  if (every <= 0 || loop.step % every != 0) return;
  if (control.stop_kind() == StopKind::kPreempted)
    loop.eval_pending = true;
  else if (!control.should_stop())
    run_eval(control);
}

namespace {
// Adds one validation batch's task figures to `sums`; every batch must name the same figures.
void add_eval_figures(const std::vector<std::pair<std::string, double>>& got, int64_t batch,
                      std::map<std::string, double>& sums) {
  std::map<std::string, double> now;
  for (const auto& [name, value] : got) {
    FRUGAL_CHECK(
        valid_metric_name(name), ConfigError,
        fmt::format("TaskHooks::eval_metrics: figure name '{}' must be 1-64 letters, digits or _ . - /", name));
    FRUGAL_CHECK(now.emplace(name, value).second, ConfigError,
                 fmt::format("TaskHooks::eval_metrics returned '{}' twice for validation batch {}", name, batch));
  }
  if (batch > 0) {
    std::vector<std::string> a, b;
    for (const auto& kv : sums) a.push_back(kv.first);
    for (const auto& kv : now) b.push_back(kv.first);
    FRUGAL_CHECK(a == b, ConfigError,
                 fmt::format("TaskHooks::eval_metrics returned {{{}}} for validation batch {} but {{{}}} for batch 0; "
                             "every batch must return the same figures",
                             fmt::join(b, ", "), batch, fmt::join(a, ", ")));
  }
  for (const auto& [name, value] : now) sums[name] += value;
}
}  // namespace

// A validation pass at the current step. Returns false (and marks the evaluation pending) when a
// stop signal interrupted it.
bool Trainer::State::run_eval(Control& control) {
  settle_queued_steps();
  torch::NoGradGuard no_grad;
  PhaseSpan span("eval");
  const auto t0 = detail::Clock::now();
  model->eval();
  at::Tensor sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  const int64_t n = rc.config.train.eval_batches;
  const LossFn& loss = task.eval_loss ? task.eval_loss : task.loss;
  std::map<std::string, double> figures;  // the task's own (TaskHooks::eval_metrics), summed over batches
  // Ragged targets (BatchSource::ragged_targets): the mean over every target of the pass, each
  // part's mean weighted by its targets; else the mean of the batches' means.
  const bool by_tokens = data->ragged_targets();
  double targets = 0;
  // ZeRO-3's blocks are gathered by every rank together: a stop signal waits for the pass's end,
  // or one rank would leave the others in a gather.
  const bool gathers = step->optimizer().gathers_parameters();
  const auto region = step->precision().enter();  // the training step's precision (autocast, fp8 linears)
  for (int64_t i = 0; i < n; ++i) {
    if (!gathers && preemption_requested()) {
      model->train();
      loop.eval_pending = true;
      return false;
    }
    Batch b = data->val_batch(i);
    // In the training step's chunks, so an out-of-memory back-off covers evaluation too.
    const int64_t k = step->chunks(), rows = b.x.size(0) / k;
    for (int64_t j = 0; j < k; ++j) {
      Batch part = b;
      if (k > 1) {
        part.x = b.x.narrow(0, j * rows, rows);
        if (b.y.defined()) part.y = b.y.narrow(0, j * rows, rows);
        if (b.pos.defined()) part.pos = b.pos.narrow(0, j * rows, rows);
      }
      const double w = by_tokens ? static_cast<double>(count_targets(part.y)) : 1.0 / static_cast<double>(k);
      if (w == 0) continue;  // no target: nothing to weigh (ATen's mean of nothing is NaN)
      sum += loss(*model, to_device(part, device)).detach().to(torch::kFloat) * w;
      targets += by_tokens ? w : 0.0;
    }
    if (task.hooks.eval_metrics) add_eval_figures(task.hooks.eval_metrics(*model, to_device(b, device)), i, figures);
  }
  model->train();
  loop.eval_pending = false;
  loop.final_val = by_tokens ? (targets > 0 ? sum.item<double>() / targets : std::nan(""))
                             : sum.item<double>() / static_cast<double>(n);
  loop.best_val = std::min(loop.best_val, loop.final_val);
  loop.last_eval_step = loop.step;
  EvalMetrics e{loop.step, total_steps(), loop.final_val, loop.best_val, seconds_since(t0), billed_s(), {}};
  for (const auto& [name, total] : figures) e.task[name] = total / static_cast<double>(n);
  final_metrics = e.task;
  eval_s_window += e.eval_s;
  eval_s_total += e.eval_s;
  for (auto& cb : callbacks) cb->on_eval_end(e, control);
  return true;
}

}  // namespace frugal
