// The documented event list of a training run, and the interface observers implement.
//
// Events, in order:
//   on_train_begin   after the model, data and run directory exist, before step 1
//   on_step_end      after every optimizer step (metrics.loss is valid when metrics.logged)
//   on_eval_end      after each validation pass (every train.eval_every steps and at the end)
//   on_checkpoint    after a checkpoint was written (sync) or handed to the writer (async)
//   on_train_end     once, with the final summary (also after a stop requested by a callback)
//
// Callbacks observe and request; the loop decides. To stop, call control.request_stop() with a
// reason; to ask for a checkpoint, control.request_checkpoint(); to report divergence,
// control.request_rollback(). Never throw to stop. Callbacks run on the trainer thread.
//
// Stateful callbacks (patience counters, moving averages) implement state_key(), save_state() and
// load_state(): the state lands in each checkpoint's state.json under "callbacks"/<state_key>, so
// a resumed run decides exactly as the uninterrupted one would have.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config.h"

namespace frugal {

struct RunInfo {
  const Config* config = nullptr;
  std::string run_dir;
  int64_t params = 0;
  double flops_per_token = 0;
  int64_t tokens_per_step = 0;
  int64_t samples_per_step = 0;  // sequences per optimizer step (the global batch)
  std::string item = "token";    // what tokens_per_step counts (TaskHooks::item): "token", "sample"
  int threads = 0;
  double peak_flops = 0;         // MFU's denominator, FLOP/s ([monitor] peak_tflops or measured)
  std::string dashboard_url;     // the live dashboard ("" = off)
};

struct StepMetrics {
  int64_t step = 0;          // optimizer steps completed (1-based)
  int64_t total_steps = 0;
  bool logged = false;       // true on log steps: loss and grad_norm are read from the device
  double loss = 0;           // mean training loss since the previous log step
  double grad_norm = 0;      // global gradient norm before clipping (this step)
  double lr = 0;
  double step_s = 0;         // wall time of this step
  double data_wait_s = 0;    // part of step_s spent waiting for the batch (the data loader)
  double tokens_per_s = 0;   // over the window since the previous log step
  double elapsed_s = 0;      // since the first step began
  int64_t tokens = 0;        // tokens consumed so far
  // Phase split of this step (seconds, besides data_wait_s): forward, backward, optimizer (incl.
  // zero_grad, unscale, clip).
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  double cost_usd = 0;       // spend so far ([budget])
  double rss_mb = 0;         // resident memory at this (logged) step
  double loss_scale = 1;     // the fp16 loss scale after this step (1 when not scaling)
  int64_t skipped_steps = 0; // optimizer steps skipped for inf/NaN gradients so far
  // Logged steps only (docs/observability.md has the formulas):
  double samples_per_s = 0;  // sequences per second over the window since the previous log step
  double mfu = 0;            // model FLOP/s (flops_per_token x tokens/s) over the peak FLOP/s
  // Seconds spent in evaluation and in checkpoint saves (the trainer's stall) since the previous
  // log step; they happen between steps, outside step_s.
  double eval_s = 0, checkpoint_s = 0;
  // Smoothed gradient noise scale B_simple in sequences (monitor/grad_noise.h); NaN when not
  // measured (accum = 1, monitor.grad_noise = false, or too few estimates).
  double grad_noise_scale = 0;
  int64_t micro_batch = 0;   // sequences per forward pass now (halved by out-of-memory back-offs)
  int64_t oom_backoffs = 0;  // out-of-memory back-offs so far (train_step.h)
};

struct EvalMetrics {
  int64_t step = 0;
  double val_loss = 0;
  double best_val_loss = 0;
  double eval_s = 0;
};

// Why a run stopped; summary.json's "stop_kind" (the CLI maps kPreempted to exit code 75 and
// kGuard to 3).
// kGuard: divergence (weights not trusted); kBudget: the spending limit (weights fine, checkpointed).
enum class StopKind { kCompleted, kCallback, kEarlyStop, kMaxMinutes, kPreempted, kGuard, kBudget };
const char* stop_kind_name(StopKind k);

struct Control {
  bool should_stop = false;
  std::string reason;  // lands in summary.json's stop_reason
  StopKind kind = StopKind::kCompleted;
  bool checkpoint_requested = false;  // the loop saves after this step and clears the flag
  bool rollback_requested = false;    // divergence: the loop rolls back to rollback_max_step
  std::string rollback_reason;
  int64_t rollback_max_step = 0;      // newest step known good
  void request_stop(std::string why, StopKind k = StopKind::kCallback) {
    if (!should_stop) {
      reason = std::move(why);
      kind = k;
    }
    should_stop = true;
  }
  void request_checkpoint() { checkpoint_requested = true; }
  void request_rollback(std::string why, int64_t good_step) {
    rollback_requested = true;
    rollback_reason = std::move(why);
    rollback_max_step = good_step;
  }
};

struct CheckpointEvent {
  int64_t step = 0;
  std::string path;     // checkpoints/step-NNNNNNNN (complete once the writer finished)
  double stall_s = 0;   // time the trainer was blocked by this save
  bool async = false;
  double last_write_s = 0;  // the whole write of the newest finished save (sync: this one)
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const RunInfo& info) {}
  virtual void on_step_end(const StepMetrics& m, Control& control) {}
  virtual void on_eval_end(const EvalMetrics& m, Control& control) {}
  virtual void on_checkpoint(const CheckpointEvent& e) {}
  virtual void on_train_end(const nlohmann::json& summary) {}

  // Checkpointed state (see the top of this file). An empty key means stateless.
  virtual std::string state_key() const { return ""; }
  virtual void save_state(nlohmann::json& out) const {}
  virtual void load_state(const nlohmann::json& in) {}
};

}  // namespace frugal
