// The documented event list of a training run, and the interface its observers implement. It sits
// in core, the lowest layer, so that observers (monitor/), checkpoint cadence (ckpt/) and the
// training loop (train/) all depend on it and on nothing above them.
//
// Events, in order:
//   on_train_begin   after the model, data and run directory exist, before step 1
//   on_step_metrics  after every optimizer step: producers fill derived figures of the step (the
//                    cost meter its spend, the MFU meter its utilisation, the noise scale), in the
//                    order they were connected, before any observer sees the step
//   on_step_end      after every optimizer step (metrics.loss is valid when metrics.logged)
//   on_eval_end      after each validation pass (every train.eval_every steps and at the end)
//   on_checkpoint    after a checkpoint was written (sync) or handed to the writer (async)
//   on_train_end     once, with the final summary (also after a stop requested by a callback)
// and, for the banner and summary.json, add_to_banner / add_to_summary.
//
// Callbacks observe and request; the loop decides. To stop, call control.request_stop() with a
// reason; to ask for a checkpoint, control.request_checkpoint(); to report divergence,
// control.request_rollback(). Never throw to stop. Callbacks run on the trainer thread.
//
// Stateful callbacks (patience counters, moving averages, money spent) implement state_key(),
// save_state() and load_state(): the state lands in each checkpoint's state.json under
// "callbacks"/<state_key>, so a resumed run decides exactly as the uninterrupted one would have.
// Keys are unique within a run (the Trainer refuses two callbacks with the same key).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config.h"

namespace frugal {

struct RunInfo {
  const Config* config = nullptr;
  std::string run_dir;
  int64_t params = 0;
  int64_t trainable_params = 0;  // params less those train.freeze leaves as they are
  double flops_per_token = 0;
  int64_t tokens_per_step = 0;
  int64_t samples_per_step = 0;  // sequences per optimizer step (the global batch)
  std::string item = "token";    // what tokens_per_step counts (TaskHooks::item): "token", "sample"
  int threads = 0;
  double peak_flops = 0;      // MFU's denominator, FLOP/s ([monitor] peak_tflops or measured)
  std::string dashboard_url;  // the live dashboard ("" = off)
  int64_t start_step = 0;     // the step this session starts from (a resumed checkpoint's; 0 fresh)
  int64_t end_step = 0;       // where the run ends as this session starts: train.steps, or the earlier
                              // end a deadline moved it to (checkpoint.deadline_action = "decay")

  // end_step, or train.steps where it is not set (0).
  int64_t total_steps() const { return end_step > 0 ? end_step : (config ? config->train.steps : 0); }
};

// Where a step's wall time went (seconds). `data` is the wait for the batch source; on a CPU the
// other three are the compute itself. On a GPU they are device time (CUDA events) on the steps
// that read the device's events (log steps, and a step with 1,024 events pending); on the others
// they are the host's time to queue the work. The summary's per-step figures are device time over
// every step.
struct PhaseTimes {
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  PhaseTimes& operator+=(const PhaseTimes& o) {
    data_s += o.data_s;
    forward_s += o.forward_s;
    backward_s += o.backward_s;
    optimizer_s += o.optimizer_s;
    return *this;
  }
};

struct StepMetrics {
  int64_t step = 0;  // optimizer steps completed (1-based)
  // Where the run ends now: train.steps, or the earlier end a deadline moved it to. The loop holds
  // the end (LoopState::end_step) and fills it in every event; a callback reads it here (or in
  // EvalMetrics, RunInfo at the start) and never keeps a copy, which a moved end would leave stale.
  int64_t total_steps = 0;
  bool logged = false;   // true on log steps: loss and grad_norm are read from the device
  double loss = 0;       // mean training loss since the previous log step
  double grad_norm = 0;  // global gradient norm before clipping (this step)
  double lr = 0;
  double step_s = 0;        // wall time of this step
  PhaseTimes phases;        // this step's phases (phases.data_s: waiting for the batch; on a GPU
                            // see PhaseTimes)
  double tokens_per_s = 0;  // over the window since the previous log step
  double elapsed_s = 0;     // billed wall time so far, over every session (start-ups included)
  int64_t tokens = 0;       // tokens consumed so far
  double cost_usd = 0;      // spend so far ([budget]; filled by the cost meter, a producer)
  double energy_kwh = 0;    // energy so far, and its carbon: the cost meter's, as cost_usd
  double kg_co2 = 0;
  double rss_mb = 0;          // resident memory at this (logged) step
  double loss_scale = 1;      // the fp16 loss scale after this step (1 when not scaling)
  bool loss_scaling = false;  // the loss scaler ran this step (it skips inf/NaN steps itself);
                              // false again after an fp16 run fell back to bf16
  int64_t skipped_steps = 0;  // optimizer steps skipped for inf/NaN gradients so far
  // Logged steps only (docs/observability.md has the formulas):
  double samples_per_s = 0;  // sequences per second over the window since the previous log step
  double mfu = 0;            // model FLOP/s over the peak FLOP/s (filled by the MFU meter)
  // Seconds spent in evaluation and in checkpoint saves (the trainer's stall) since the previous
  // log step; they happen between steps, outside step_s.
  double eval_s = 0, checkpoint_s = 0;
  // Mean over this step's micro-batches of |g_k|^2 (unscaled micro-batch gradient norms squared);
  // NaN unless measured at this step (log steps with accum > 1 and monitor.grad_noise). The input
  // of the noise-scale producer.
  double micro_grad_sq = std::numeric_limits<double>::quiet_NaN();
  // Smoothed gradient noise scale B_simple in sequences (monitor/grad_noise.h, a producer); NaN
  // when not measured (accum = 1, monitor.grad_noise = false, or too few estimates).
  double grad_noise_scale = 0;
  int64_t micro_batch = 0;   // sequences per forward pass now (halved by out-of-memory back-offs)
  int64_t oom_backoffs = 0;  // out-of-memory back-offs so far (train_step.h)
  // Scalars of the user's own (name -> value), set by a callback in on_step_metrics on log steps:
  // metrics.jsonl's "user" object on that step's line, a chart each in the report. Names are
  // letters, digits and _ . - / (at most 64 characters); a non-finite value is written as null.
  std::map<std::string, double> user;
};

struct EvalMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;  // where the run ends now (as StepMetrics::total_steps)
  double val_loss = 0;
  double best_val_loss = 0;
  double eval_s = 0;
  double elapsed_s = 0;  // billed wall time so far, this evaluation included
  // The task's own figures of this evaluation (TaskHooks::eval_metrics: the mean of each over the
  // validation batches): metrics.jsonl's "metrics" object on the eval line, summary.json's
  // "final_metrics", a chart each in the report, and early_stop.task_metric's input.
  std::map<std::string, double> task;
};

// Why a run stopped; summary.json's "stop_kind" (core/exit_code.h maps it to the exit code).
// kGuard: divergence (weights not trusted); kBudget: the spending limit (weights fine, checkpointed);
// kTarget: train.target_loss reached (a success: exit 0).
enum class StopKind { kCompleted, kCallback, kEarlyStop, kMaxMinutes, kPreempted, kGuard, kBudget, kTarget };
const char* stop_kind_name(StopKind k);
// When several stops are requested at one step, the one that must decide what happens next wins:
// a divergence the guard gave up on (the weights are not to be saved as final), then the spending
// limit (no requeue may continue it), then a stop signal (checkpoint, exit 75), then the
// callbacks' and early stopping's stops, and last the time limit. Equal ranks: the first wins.
int stop_severity(StopKind k);

// What the callbacks asked of the loop during one step. Callbacks request; the loop reads the
// requests and clears the ones it acted on.
class Control {
 public:
  // A stop replaces an earlier one only when it ranks higher (stop_severity); else the first
  // request's reason and kind are kept.
  void request_stop(std::string why, StopKind k = StopKind::kCallback) {
    if (!should_stop_ || stop_severity(k) > stop_severity(kind_)) {
      reason_ = std::move(why);
      kind_ = k;
    }
    should_stop_ = true;
  }
  // The stop every rank of a data-parallel run agreed on (dist): it replaces a local one, so that
  // all ranks end with the same kind and reason.
  void agree_stop(std::string why, StopKind k) {
    should_stop_ = true;
    reason_ = std::move(why);
    kind_ = k;
  }
  void request_checkpoint() { checkpoint_requested_ = true; }
  // End the run after optimizer step `step`, before train.steps, the schedule ending there with it
  // (checkpoint.deadline_action = "decay"). The earliest requested end wins.
  void request_end_at(int64_t step, std::string why) {
    if (end_at_ == 0 || step < end_at_) {
      end_at_ = step;
      end_reason_ = std::move(why);
    }
  }
  // Divergence: roll back to the newest sound checkpoint at or before `good_step`.
  void request_rollback(std::string why, int64_t good_step) {
    rollback_requested_ = true;
    rollback_reason_ = std::move(why);
    rollback_max_step_ = good_step;
  }

  bool should_stop() const { return should_stop_; }
  const std::string& stop_reason() const { return reason_; }  // summary.json's stop_reason
  StopKind stop_kind() const { return should_stop_ ? kind_ : StopKind::kCompleted; }
  bool checkpoint_requested() const { return checkpoint_requested_; }
  bool rollback_requested() const { return rollback_requested_; }
  const std::string& rollback_reason() const { return rollback_reason_; }
  int64_t rollback_max_step() const { return rollback_max_step_; }
  int64_t end_at() const { return end_at_; }  // 0: no end requested
  const std::string& end_reason() const { return end_reason_; }

  // The loop's side: a request acted on is cleared.
  void clear_checkpoint_request() { checkpoint_requested_ = false; }
  void clear_rollback_request() { rollback_requested_ = false; }
  void clear_end_request() {
    end_at_ = 0;
    end_reason_.clear();
  }

 private:
  bool should_stop_ = false;
  std::string reason_;
  StopKind kind_ = StopKind::kCompleted;
  bool checkpoint_requested_ = false;
  bool rollback_requested_ = false;
  std::string rollback_reason_;
  int64_t rollback_max_step_ = 0;  // newest step known good
  int64_t end_at_ = 0;
  std::string end_reason_;
};

struct CheckpointEvent {
  int64_t step = 0;
  std::string path;    // checkpoints/step-NNNNNNNN (complete once the writer finished)
  double stall_s = 0;  // time the trainer was blocked by this save
  bool async = false;
  double last_write_s = 0;  // the whole write of the newest finished save (sync: this one)
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const RunInfo& info) {}
  // Before the first step of a resumed session, with the run's figures so far (step, total_steps,
  // tokens, elapsed_s billed over every session, this start-up included): a stop rule the run
  // already meets (a spent budget, a reached time limit) stops it here, before another step is
  // trained and billed.
  virtual void on_resume(const StepMetrics& m, Control& control) {}
  // Producers fill the derived figures they own (see the event list above).
  virtual void on_step_metrics(StepMetrics& m) {}
  virtual void on_step_end(const StepMetrics& m, Control& control) {}
  virtual void on_eval_end(const EvalMetrics& m, Control& control) {}
  virtual void on_checkpoint(const CheckpointEvent& e) {}
  virtual void on_train_end(const nlohmann::json& summary) {}

  // Lines for the start-up banner (e.g. the price and limit), and figures for summary.json (which
  // holds the loop's own figures when this is called; work that ends with the run, such as a
  // profiler window still open, is finished here).
  virtual void add_to_banner(std::vector<std::string>& lines) const {}
  virtual void add_to_summary(nlohmann::ordered_json& summary) {}

  // Checkpointed state (see the top of this file). An empty key means stateless.
  virtual std::string state_key() const { return ""; }
  virtual void save_state(nlohmann::json& out) const {}
  virtual void load_state(const nlohmann::json& in) {}
  // True for state that describes the world rather than the training trajectory (money and time
  // spent): a divergence rollback keeps it instead of taking the checkpoint's.
  virtual bool state_survives_rollback() const { return false; }
};

}  // namespace frugal
