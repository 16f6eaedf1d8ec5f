// The Trainer's private state (pimpl) and its helpers: checkpoint capture and restore, rollback,
// the banner and the final summary. Split from trainer.cpp so that the loop stays short.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/cadence.h"
#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/checkpoint_writer.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/threads.h"
#include "frugal/data/batch_source.h"
#include "frugal/dist/data_parallel.h"
#include "frugal/monitor/cost_meter.h"
#include "frugal/monitor/dashboard.h"
#include "frugal/monitor/grad_noise.h"
#include "frugal/monitor/mfu.h"
#include "frugal/monitor/profiler.h"
#include "frugal/monitor/memory.h"
#include "frugal/train/preemption.h"
#include "frugal/train/train_step.h"
#include "frugal/train/trainer.h"
#include "train/internal/run_state.h"

namespace frugal {
namespace detail {
using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace detail

struct Trainer::State {
  // First, so that it is released last: after the checkpoint writer has finished.
  std::unique_ptr<DirLock> run_lock;  // held while this process owns the run directory
  ResolvedConfig rc;
  TrainerOptions opts;
  std::string run_dir;
  std::string resumed_from;
  torch::Device device{torch::kCPU};
  ThreadPlan threads;
  Task task;
  std::shared_ptr<torch::nn::Module> model;  // task.module
  std::unique_ptr<dist::DataParallel> dp;  // multi-process only; outlives `step` (declared first)
  std::shared_ptr<BatchSource> data;         // task.data
  std::unique_ptr<TrainStep> step;
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::shared_ptr<CostMeter> cost;  // runs first each step, so every callback sees the spend
  std::shared_ptr<CheckpointCadence> cadence;
  std::unique_ptr<CheckpointWriter> writer;
  RunInfo info;
  std::unique_ptr<TensorBytesLimitGuard> memory_limit;  // memory.limit_mb, for the trainer's lifetime (CPU)
  std::unique_ptr<SignalHandlers> signals;  // while the trainer lives (TrainerOptions::handle_signals)

  // Observability (trainer_metrics.cpp): profiler, live dashboard, MFU's peak, noise scale, and
  // the eval/checkpoint time that falls between steps.
  std::shared_ptr<Profiler> profiler;
  std::shared_ptr<Dashboard> dashboard;
  PeakFlops peak;
  GradNoiseScale grad_noise;
  double eval_s_window = 0, checkpoint_s_window = 0;  // since the previous log step
  double eval_s_total = 0, checkpoint_s_total = 0;    // this session

  detail::LoopState loop;
  at::Tensor loss_sum;  // fp32 sum of step losses in the open log window, on the device
  int64_t last_saved_step = -1;
  std::string last_checkpoint;
  nlohmann::json rollback_log = nlohmann::json::array();
  detail::Clock::time_point constructed = detail::Clock::now();  // this process's start-up began
  detail::Clock::time_point session_start = detail::Clock::now();  // reset when fit() begins
  double startup_s = 0;  // this session's start-up (construction to fit()): data, model, probes
  // Wall time billed so far, over every session: start-ups included (the cost meter, max_minutes).
  // The callbacks whose state a checkpoint carries: the list, and the cost meter beside it.
  std::vector<std::shared_ptr<Callback>> stateful_callbacks() const {
    auto all = callbacks;
    all.push_back(cost);
    return all;
  }
  double billed_s() const { return loop.elapsed_s + loop.startup_s + startup_s + detail::seconds_since(session_start); }
  double phase_s[4] = {0, 0, 0, 0};  // this session's data, forward, backward, optimizer time
  int64_t session_steps = 0;
  double session_step_s = 0;  // wall time of this session's steps
  double logged_grad_norm = 0;  // the gradient norm of the newest log step (checkpoint.best_metric)
  int64_t logged_grad_norm_step = -1;

  bool is_writer() const { return !dp || dp->is_writer(); }  // this process writes the run's files

  // The loop (trainer.cpp).
  void train_one_step(StepMetrics& m, Control& control);
  bool run_eval(Control& control);

  // Observability (trainer_metrics.cpp).
  void install_monitors();  // profiler, dashboard, JSON/TTY progress; sets info's peak and URL
  bool next_step_logs() const;
  void observe_logged_step(StepMetrics& m, const StepResult& r);
  void add_observability(nlohmann::ordered_json& summary);

  // Checkpoints and summary (trainer_state.cpp).
  void adopt_checkpoint_config(const LoadedCheckpoint& ck);
  CheckpointData capture(bool snapshot);
  void restore(const LoadedCheckpoint& ck);
  void save_checkpoint();
  void rollback(Control& control);
  void print_banner();
  nlohmann::json finish(const Control& control);
};

}  // namespace frugal
