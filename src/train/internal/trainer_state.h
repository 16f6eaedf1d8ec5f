// The Trainer's private state (pimpl) and its parts: start-up (trainer.cpp), the loop
// (trainer_loop.cpp), checkpoint capture and restore, the banner and the summary
// (trainer_state.cpp), saving and the rollback (trainer_checkpoint.cpp). The concrete callbacks
// are named only by the connector (callback_connector.h); here they are a list of Callback.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/checkpoint_writer.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/memory.h"
#include "frugal/core/threads.h"
#include "frugal/core/wall_clock.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/freeze.h"
#include "frugal/train/data_parallelism.h"
#include "frugal/train/preemption.h"
#include "frugal/train/run_config.h"
#include "frugal/train/run_setup.h"
#include "frugal/train/step_metrics.h"
#include "frugal/train/task.h"
#include "frugal/train/train_step.h"
#include "frugal/train/trainer.h"
#include "train/internal/run_state.h"

namespace frugal {
namespace detail {
using Clock = std::chrono::steady_clock;
}  // namespace detail

struct Trainer::State {
  // First, so that it is released last: after the checkpoint writer has finished.
  std::unique_ptr<DirLock> run_lock;  // held while this process owns the run directory
  ResolvedConfig rc;
  TrainerOptions opts;
  std::string run_dir;
  std::string resumed_from;
  torch::Device device{torch::kCPU};
  ThreadSettings threads;
  Task task;
  std::shared_ptr<torch::nn::Module> model;  // task.module
  std::unique_ptr<DataParallelism> dp;       // multi-process only; outlives `step` (declared first)
  std::shared_ptr<BatchSource> data;         // task.data
  RunSetup setup;                            // resolved once at start-up
  // The precision the run continues in (precision_to_continue, once: set_up_device) and, where the
  // config's wins over a resumed checkpoint's, the warning make_setup prints.
  PrecisionMode continued_precision = PrecisionMode::kAuto;
  std::string precision_warning;
  std::string kernels_resumed;  // the resumed checkpoint's kernels ("" fresh)
  KernelsChoice kernels;        // model.kernels resolved (build_task)
  nlohmann::json frozen;        // frozen tensors a checkpoint names instead of storing (model/freeze.h)
  std::unique_ptr<TrainStep> step;
  std::vector<std::shared_ptr<Callback>> callbacks;  // from the connector, in calling order
  std::string dashboard_url;
  std::unique_ptr<CheckpointWriter> writer;
  RunInfo info;
  std::unique_ptr<TensorBytesLimitGuard> memory_limit;  // memory.limit_mb, for the trainer's lifetime (CPU)
  std::unique_ptr<SignalHandlers> signals;              // while the trainer lives (TrainerOptions::handle_signals)

  detail::LoopState loop;
  at::Tensor loss_sum;       // fp32 sum of step losses in the open log window, on the device
  StepMetrics last_metrics;  // the previous step's figures (log-step figures carry over)
  int64_t last_saved_step = -1;
  // Checkpoint exchanges through the rendezvous store so far: each takes a tag of its own (a step
  // saved again after a rollback must not read the first save's values).
  int64_t checkpoint_exchanges = 0;
  std::string last_checkpoint;
  nlohmann::json rollback_log = nlohmann::json::array();
  // Every deliberate config change of a resume over the run's life (run_config.h), oldest first;
  // carried in each checkpoint and shown in summary.json.
  nlohmann::json config_changes = nlohmann::json::array();
  detail::Clock::time_point constructed = detail::Clock::now();    // this process's start-up began
  detail::Clock::time_point session_start = detail::Clock::now();  // reset when fit() begins
  double startup_s = 0;  // this session's start-up (construction to fit()): data, model, probes
  // This session's totals (summary.json's per-step figures).
  PhaseTimes session_phases;
  int64_t session_steps = 0;
  double session_step_s = 0;                          // wall time of this session's steps
  double eval_s_window = 0, checkpoint_s_window = 0;  // since the previous log step
  double eval_s_total = 0, checkpoint_s_total = 0;    // this session
  std::map<std::string, double> final_metrics;        // the newest evaluation's task figures
  double logged_grad_norm = 0;  // the gradient norm of the newest log step (checkpoint.best_metric)
  int64_t logged_grad_norm_step = -1;
  StopKind stopped = StopKind::kCompleted;  // why fit() returned

  // Wall time billed so far, over every session: start-ups included (the cost meter, max_minutes).
  double billed_s() const { return loop.elapsed_s + loop.startup_s + startup_s + seconds_since(session_start); }
  bool is_writer() const { return !dp || dp->is_writer(); }  // this process writes the run's files
  // ZeRO-3 on several processes: the model stays in host memory until the optimizer has copied its
  // trainable parameters into their (sharded) flat buffers on the device.
  bool staged_in_host_memory() const { return dp && rc.config.dist.zero == ZeroStage::kParameters; }

  // Start-up (trainer.cpp), in order.
  std::optional<LoadedCheckpoint> open_checkpoint();
  void set_up_device(const std::optional<LoadedCheckpoint>& ck);
  void build_task(const TaskFactory& make_task);
  void make_setup(const std::optional<LoadedCheckpoint>& ck);
  void continue_on_this_world(const LoadedCheckpoint& ck);
  void open_run_dir(const std::optional<LoadedCheckpoint>& ck);
  void connect();
  void open_checkpoint_writer();
  void continue_from(const LoadedCheckpoint& ck);
  void describe_run();

  // The loop (trainer_loop.cpp).
  void begin_session(Control& control);
  void train_one_step(Control& control);
  StepReadings read_step(const StepResult& r, double lr, double step_s);
  bool next_step_logs() const;
  // The step the run ends at: train.steps, or earlier where the end was moved (LoopState::end_step).
  int64_t total_steps() const;
  void apply_end_request(Control& control);
  void settle_queued_steps();
  void maybe_eval(Control& control);
  bool run_eval(Control& control);
  void check_signal(Control& control) const;

  // Checkpoints, banner and summary (trainer_state.cpp).
  static int64_t checkpoint_world_size(const LoadedCheckpoint& ck);
  void adopt_run_config(const LoadedCheckpoint& ck);
  void check_same_dataset(const LoadedCheckpoint& ck);
  std::string dataset_fingerprint_at_start;  // a prepared dataset's (dataset_fingerprint), else empty
  void warn_if_rewarmed(const ConfigChange& change, int64_t at_step) const;
  // --resume auto without a sound checkpoint: the run's own config.toml, from step 0.
  void start_over_with_run_config();
  bool started_over = false;
  CheckpointData capture(bool snapshot);
  // What a checkpoint holds of the model: its tensors less the frozen ones (the base holds them).
  NamedTensors saved_tensors() const { return without_frozen(module_tensors(*model), frozen); }
  void restore(const LoadedCheckpoint& ck);
  void restore_data_position(const LoadedCheckpoint& ck);
  // Saving, a resume's retention, the rollback and the checkpoint summary (trainer_checkpoint.cpp).
  void apply_retention_on_resume();
  void save_checkpoint();
  void stage_shards(CheckpointData& d);
  void rollback(Control& control);
  void print_banner() const;
  nlohmann::json finish(const Control& control);
  nlohmann::ordered_json loop_summary(const Control& control, bool evaluated);
  void add_memory_summary(nlohmann::ordered_json& summary) const;
  void add_checkpoint_summary(nlohmann::ordered_json& summary) const;
};

}  // namespace frugal
