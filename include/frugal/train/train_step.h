// One training step, every maths lever in one short, linear function (STYLE.md: "maths toggles
// live in the step"):
//
//   zero grads
//   for each of `accum` micro-batches:            gradient accumulation
//     autocast forward, loss / accum             mixed precision; normalised so the sum of
//     backward of loss * scale                   micro-batch gradients is the large-batch gradient
//   unscale gradients                             loss scaler (fp16)
//   global norm; inf/NaN -> skip, back off        loss scaler
//   clip to train.grad_clip                       after unscaling, on the global norm
//   optimizer step (FusedAdamW)
//
// The model is any torch::nn::Module with a LossFn (train/task.h). Activation checkpointing acts
// inside the model's forward (a task hook; for frugal's decoders, CausalLmImpl::set_recompute).
//
// Data parallel (src/dist) joins through GradSync at fixed points (grad_sync.h): gradients are
// all-reduced during the last micro-batch's backward, and all ranks agree on an fp16 skip.
//
// Out-of-memory back-off: when a forward or backward pass throws the out-of-memory error (CUDA,
// or CPU past [memory] limit_mb), the step starts again from zeroed gradients with each fetched
// micro-batch run in twice as many equal chunks (micro-batch halved, accumulation doubled), and
// later steps keep the smaller chunks. The batches already fetched are reused, so no data is
// lost or repeated, and each chunk's mean loss is divided by accum x chunks, so the step is the
// same mean over the same samples: the weights equal those of a run configured with the halved
// micro-batch from the start (for sources whose micro-batch i of size m holds the samples of
// micro-batches 2i and 2i+1 of size m/2, such as shards). A micro-batch that cannot be halved
// into equal chunks rethrows the error.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"
#include "frugal/core/device.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/causal_lm.h"
#include "frugal/train/grad_sync.h"
#include "frugal/train/loss_scaler.h"
#include "frugal/train/optimizer.h"
#include "frugal/train/precision.h"
#include "frugal/train/run_setup.h"
#include "frugal/train/task.h"

namespace frugal {

struct StepResult {
  at::Tensor loss;       // mean loss over the step's micro-batches (0-dim, on the device)
  at::Tensor grad_norm;  // global norm before clipping, after unscaling
  bool skipped = false;  // inf/NaN gradients: no optimizer step was taken
  int64_t tokens = 0;    // samples x tokens_per_sample
  // Time of each phase: host wall time on a CPU. On a GPU, data is host time (the wait for the
  // loader) and forward, backward and optimizer are device time from CUDA events where this step
  // settled them (phases_on_device), else host time (kernel launches: the device was not waited
  // for; set_settle_each_step).
  PhaseTimes phases;
  // On a GPU (device_timed): the device time of forward, backward and optimizer summed over the
  // steps this run settled: this one and the unsettled ones before it (data_s stays 0). Summed
  // over a run's steps, with settle_pending() at its end, it is each phase's device time exactly
  // once.
  bool device_timed = false;
  bool phases_on_device = false;
  PhaseTimes settled;
  // Sum over micro-batches of |g_k|^2 (unscaled micro-batch gradients; monitor/grad_noise.h).
  // Defined only on a step run with set_grad_noise_probe(true) and accum > 1.
  at::Tensor micro_grad_sq_sum;
  int64_t oom_backoffs = 0;  // out-of-memory back-offs during this step
  // A step of the CUDA graph (train.cuda_graphs; its capture or a replay): its device time is all
  // in phases.forward_s.
  bool graphed = false;
};

class TrainStep {
 public:
  // Trains `model` (already on `device`) with `loss` as `setup` resolved it (micro-batch,
  // accumulation, precision, loss scaling, items per sample); the step reads only its own sections
  // of the config: `train` (optimizer, weight decay, clipping) and `precision` (the loss scaler's
  // settings, the fp16 fallback). `sync` (optional, not owned, outlives the step): data-parallel
  // hooks (grad_sync.h). `groups`: the optimizer's parameter groups (checked with
  // check_param_groups); empty = default_param_groups (decay on tensors of rank >= 2).
  TrainStep(const RunSetup& setup, const TrainConfig& train, const PrecisionConfig& precision,
            std::shared_ptr<torch::nn::Module> model, LossFn loss, BatchSource& data, c10::Device device,
            GradSync* sync = nullptr, std::vector<ParamGroup> groups = {});
  // A single-process step planned from `config` alone (precision.mode = auto is measured here);
  // each sample counts as tokens_per_sample.
  TrainStep(const Config& config, std::shared_ptr<torch::nn::Module> model, LossFn loss, BatchSource& data,
            c10::Device device, int64_t tokens_per_sample = 1, GradSync* sync = nullptr);
  // frugal's own decoder (either family): its next-token loss, model.block tokens per sample,
  // and memory.activation_checkpointing installed on its blocks.
  TrainStep(const Config& config, CausalLm model, BatchSource& data, c10::Device device, GradSync* sync = nullptr);
  ~TrainStep();

  // Runs iteration `iteration` (0-based) at learning rate `lr`. Reads the device only when the
  // loss scaler needs the inf/NaN verdict and, on a GPU, on a settling step: once at its end, for
  // the device times of the phases (CUDA events) of this step and the unsettled ones before it.
  StepResult run(int64_t iteration, double lr);
  // Whether every step settles its device times (the default), or only those run while this is
  // on: the trainer turns it on for log steps, so that the host queues the next steps while the
  // device still works on earlier ones. Steps also settle when kMaxPendingEvents events wait.
  void set_settle_each_step(bool on) { settle_each_step_ = on; }
  // Settles the steps not settled yet (waits for the device) and returns their device times.
  PhaseTimes settle_pending();
  // Host waits for the device's events so far (one per settling step on a GPU; none on a CPU).
  int64_t device_waits() const { return events_.waits(); }
  static constexpr int kMaxPendingEvents = 1024;

  // Micro-batches fetched per step (the data cursor counts these).
  int64_t accum() const { return accum_; }
  // Measure each micro-batch's gradient norm on the following run() calls (the trainer turns it
  // on for log steps only: it costs a gradient copy and a norm per micro-batch).
  void set_grad_noise_probe(bool on) { probe_grad_noise_ = on; }
  // Chunks each fetched micro-batch runs in (1, doubled by each out-of-memory back-off).
  int64_t chunks() const { return chunks_; }
  int64_t micro_batch_effective() const { return micro_batch_ / chunks_; }
  int64_t accum_effective() const { return accum_ * chunks_; }
  int64_t oom_backoffs() const { return oom_backoffs_; }
  // Bytes of the bf16 working weights the optimizer keeps (RunSetup::working_weights; 0: none).
  int64_t working_weight_bytes() const { return working_bytes_; }
  // What this process holds of the training state, in bytes (summary.json's state_bytes_per_rank):
  // on the run's device the parameters, their working copies, the gradients (the flat buffers or a
  // ZeRO-2 shard) and the optimizer's state (ZeRO shards), and the optimizer's state in host memory
  // (dist.offload), which the total leaves out.
  struct StateBytes {
    int64_t parameters = 0, working_weights = 0, gradients = 0, optimizer = 0, optimizer_host = 0;
    int64_t total() const { return parameters + working_weights + gradients + optimizer; }
  };
  StateBytes state_bytes() const;
  // Steps run as a replay of the step's CUDA graph (train.cuda_graphs), and whether one is captured.
  int64_t graphed_steps() const { return graphed_steps_; }
  bool graph_captured() const { return graph_ != nullptr; }
  static constexpr int64_t kEagerStepsBeforeCapture = 2;
  PrecisionPolicy& precision() { return precision_; }
  LossScaler& scaler() { return scaler_; }
  Optimizer& optimizer() { return *optimizer_; }

 private:
  TrainConfig train_;
  PrecisionConfig precision_config_;
  int64_t micro_batch_;  // setup.micro_batch: sequences per fetched micro-batch
  std::shared_ptr<torch::nn::Module> model_;
  LossFn loss_;
  int64_t tokens_per_sample_;
  BatchSource& data_;
  c10::Device device_;
  at::Tensor accumulate(int64_t iteration, std::vector<Batch>& fetched, StepResult& r);
  // Ragged targets (BatchSource::ragged_targets): each part's (micro-batch k, chunk j: index
  // k * chunks + j) weight on its mean loss, its targets over the step's mean targets per rank,
  // so the step's loss is the sum over all its targets, on every rank, over their count; empty
  // where every part weighs 1 / parts.
  std::vector<double> target_weights(const std::vector<Batch>& fetched) const;
  bool back_off(const std::exception& e, int64_t iteration);

  int64_t accum_;
  int64_t chunks_ = 1;
  int64_t oom_backoffs_ = 0;
  PrecisionPolicy precision_;
  LossScaler scaler_;
  GradSync* sync_;
  std::unique_ptr<Optimizer> optimizer_;
  bool probe_grad_noise_ = false;

  class Lap;
  struct Span {
    double PhaseTimes::*phase;  // forward_s, backward_s or optimizer_s
    int from, to;               // event indices
  };
  StepResult run_step(int64_t iteration, double lr);
  // The fp16 loss scaler's verdict on a step whose gradients held inf/NaN (`found_inf`) or not:
  // the scale's next state, and the fall-back to bf16 after precision.fallback_after skips at the
  // floor (the scaler is off after it). Returns whether the step is skipped.
  bool settle_loss_scale(bool found_inf);
  void settle(StepResult& r);
  void finish_step(StepResult& r);
  device::EventTimer events_;
  std::vector<Span> spans_;  // recorded since the last settle, over one or more steps
  size_t step_spans_ = 0;    // spans_[step_spans_..] belong to the step running now
  bool settle_each_step_ = true;

  // train.cuda_graphs (train_step_graph.cpp): the third step runs once on the capture stream and
  // is captured; from then on each step's parts are copied into static buffers and the graph of
  // the whole step is replayed. A partial batch, a log step's gradient-noise probe and the steps
  // before the capture run eagerly. An out-of-memory back-off, or a failure of that first run,
  // turns graphs off for the rest of the run (said on the console); a failure of the capture
  // itself stops the run (ConfigError: set train.cuda_graphs = false). Under fp16 loss scaling
  // the graph reads the scale from device memory and skips an overflowing step there; the host
  // reads the flag after the replay (settle_loss_scale), and a fall-back to bf16 turns graphs off.
  struct Graph;
  std::unique_ptr<Graph> graph_;
  bool graphs_on_ = false;
  int64_t working_bytes_ = 0;
  int64_t eager_steps_ = 0, graphed_steps_ = 0;
  bool graphed_step(int64_t iteration, double lr, std::vector<Batch>& fetched, StepResult& r);
  void graph_body(Graph& g);
  void drop_graph(const std::string& why);
};

// Refuses (ConfigError, exit 2) train.cuda_graphs = true where the step cannot be one CUDA graph:
// off a GPU, with several processes, activation checkpointing or an optimizer other than
// FusedAdamW, or LibTorch before 2.4. `world`: processes.
void check_cuda_graphs(const Config& c, const c10::Device& device, int64_t world);

// Installs activation checkpointing on the model per memory.activation_checkpointing.
void install_activation_checkpointing(CausalLm& model, const ActivationCheckpointing& spec);

}  // namespace frugal
