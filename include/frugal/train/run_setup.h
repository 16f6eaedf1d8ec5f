// The resolved setup of a run: what the configuration, the task and the start-up measurements
// decided, computed once when the Trainer starts and read by every consumer (the step, the
// callbacks, the banner, the summary), never recomputed from the config (STYLE.md: "Resolve
// once"). The config itself stays as the user wrote it.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/core/config.h"
#include "frugal/model/block_gathering.h"
#include "frugal/monitor/mfu.h"
#include "frugal/train/precision.h"

namespace frugal {

struct TaskHooks;

struct RunSetup {
  // micro_batch sequences per forward pass, accum of them per optimizer step on each of
  // world_size processes: global_batch = micro_batch x accum x world_size sequences per step.
  int64_t micro_batch = 1, accum = 1, world_size = 1, global_batch = 1;
  int64_t tokens_per_sample = 1;  // items per sequence (TaskHooks::tokens_per_sample)
  int64_t items_per_step = 1;     // global_batch x tokens_per_sample: what tokens/s counts
  std::string item = "sample";    // what those items are called on the console
  double flops_per_token = 0;     // training FLOPs per item (0 = unknown)
  // The compute precision: `auto` measured, or the precision a resumed checkpoint trained in.
  PrecisionPolicy precision{PrecisionMode::kFp32, c10::Device(c10::kCPU)};
  bool loss_scaling = false;                         // the dynamic loss scaler runs (fp16, or precision.loss_scaling)
  ActivationCheckpointing activation_checkpointing;  // memory.activation_checkpointing
  // Muon's Newton-Schulz iterations in bf16 (train.muon_precision, auto decided here once, from
  // the run's device: bf16 on a GPU or a CPU with native bf16 products), for every sharding.
  bool muon_bf16 = false;
  bool task_schedule = false;      // the task supplies the learning rate (TaskHooks::lr_schedule)
  bool grad_noise_wanted = false;  // monitor.grad_noise
  bool grad_noise = false;         // monitor.grad_noise and accum > 1: the noise scale is measured
  // bf16 working weights (model/working_weights.h): model.kernels = "frugal", precision bf16, the
  // fused AdamW unsharded (dist.zero = 0).
  bool working_weights = false;
  // What runs the model's norms, activations and loss (model.kernels, "auto" resolved by
  // choose_kernels): "aten" or "frugal", and why.
  std::string kernels = "aten", kernels_reason;
  bool offload = false;  // dist.offload = "optimizer"
  // dist.zero = 3: the task's blocks (TaskHooks::gather_blocks; set_up_run refuses zero 3 without).
  GatherBlocksFn gather_blocks;
  bool reshard_after_forward = true;  // dist.reshard_after_forward (BlockGathering)
  PeakFlops peak;                     // MFU's denominator (configured, or measured once in the run's dtype)
};

// model.kernels for a training run, "auto" resolved: frugal's CUDA kernels where their GPU check
// ran them (docs/gpu.md: one process, frugal's own decoders, fp32, bf16 or fp8, no LoRA adapters,
// no activation checkpointing) and they run on the run's GPU (`unavailable`, from
// cuda_kernels_unavailable: "" where they do); ATen's operators elsewhere, and on a resume of a
// checkpoint that trained on them (`resumed`: its "kernels", "aten" for a checkpoint that names
// none; "" for a fresh run), so that the continuation computes what the uninterrupted run would.
// "aten" and "frugal" stay as set (check_model_kernels refuses "frugal" where it cannot run).
// `precision`: the configured mode, or the one a resumed checkpoint trained in.
struct KernelsChoice {
  ModelConfig::Kernels kernels = ModelConfig::Kernels::kAten;
  std::string reason;
};
KernelsChoice choose_kernels(const Config& config, bool on_gpu, const std::string& unavailable, PrecisionMode precision,
                             int64_t world_size, const std::string& resumed = "");
// The choice once the task is built from it: "auto" holds frugal's kernels only for a task whose
// model runs them (TaskHooks::frugal_kernels: frugal's own decoders); another task's model trains
// on its own operators, which the choice then says.
KernelsChoice confirm_kernels(const KernelsChoice& chosen, const Config& config, const TaskHooks& hooks);

// The setup for `config` on `world_size` processes with `precision` already resolved. `peak` is
// left empty (the Trainer measures it; a probe of a few steps does not need it).
RunSetup set_up_run(const Config& config, const TaskHooks& hooks, int64_t world_size, PrecisionPolicy precision);

// The levers the run trains with, decided once (the precision and its reason, the batch, activation
// checkpointing, the optimizer with Muon's Newton-Schulz precision, the schedule, ZeRO, kernels,
// checkpoints): summary.json's "levers" object, which monitor/levers.h renders for the banner,
// report.html, `frugal compare` and the trackers.
nlohmann::ordered_json levers_json(const RunSetup& setup, const Config& c);
// describe_levers(levers_json(...)): the banner's "levers:" line and the trackers' text.
std::string levers_line(const RunSetup& setup, const Config& c);

// Elastic resume: a run checkpointed with `from_world` processes and a global batch of
// `global_batch` sequences continues on setup.world_size processes with the same global batch and
// the same data order; the accumulation adjusts (accum = global_batch / (micro_batch x world)).
// ConfigError before any step when the new world size cannot split the global batch into whole
// micro-batches, naming the world sizes that can.
void continue_global_batch(RunSetup& setup, int64_t global_batch, int64_t from_world);

// The precision a run continues in: a resumed checkpoint's, when the config asks for `auto` (which
// could measure differently now) or for fp16 after the checkpoint fell back to bf16; else the
// config's. `checkpoint` is the checkpoint's precision name ("" for a fresh run). Sets *warning
// when the two differ and the config's wins (the continuation is then not the uninterrupted run).
PrecisionMode precision_to_continue(PrecisionMode configured, const std::string& checkpoint, std::string* warning);

}  // namespace frugal
