// The configuration of a run: one plain struct per subsystem, every field documented with its
// default, unit and trade-off (the defaults here ARE the built-in defaults). config_keys.cpp
// lists every key once, with its range and help text; config_loader.h resolves a Config from
// built-in defaults < FRUGAL_<SECTION>_<KEY> environment variables < a TOML file < --set.
// These structs hold no torch types, so including this header is cheap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "frugal/core/lora_config.h"

namespace frugal {

// [run] — identity and placement of a run.
struct RunConfig {
  std::string name = "demo";     // runs/<name>/ holds everything the run writes
  std::string out_dir = "runs";  // parent folder of run directories
  int64_t seed = 1337;           // fixes initialisation, data order and dropout
  int64_t threads = 0;           // LibTorch and BLAS threads; 0 = the physical cores (docs/levers.md, "threads")
  std::string device = "cpu";    // "cpu" or "cuda" (or "cuda:N")
  // Deterministic GPU kernels (cuDNN and ATen deterministic algorithms, a fixed cuBLAS workspace):
  // a resumed GPU run reproduces the uninterrupted run bitwise, at some speed (CPU runs always do).
  bool deterministic = false;
};

// [model] — the reference GPT decoder (src/model/gpt.cpp).
struct ModelConfig {
  // The decoder family (model/model_family.h, docs/model.md): the GPT (learned positions,
  // LayerNorm, GELU MLP, head tied to the embedding) or the Llama family (rotary positions,
  // RMSNorm, SwiGLU MLP, grouped-query attention: Llama 2/3, Qwen2/2.5/3, Mistral). With
  // model.init_from, config.json's model_type sets it. The keys marked "llama" below apply to the
  // Llama family only.
  enum class Arch { kGpt, kLlama };
  Arch arch = Arch::kGpt;
  int64_t layers = 4;     // transformer blocks
  int64_t heads = 4;      // attention (query) heads; must divide embd unless head_dim is set
  int64_t kv_heads = 0;   // llama: key/value heads, each shared by heads / kv_heads query heads (GQA); 0 = heads
  int64_t embd = 128;     // residual width
  int64_t head_dim = 0;   // llama: channels of one head; 0 = embd / heads
  int64_t mlp_width = 0;  // llama: the SwiGLU MLP's hidden width; 0 = 8/3 embd rounded up to a multiple of 16
  int64_t block = 64;     // context length in tokens
  int64_t vocab = 256;    // vocabulary size; 256 for byte-level data
  double dropout = 0.0;   // dropout on attention, MLP and embeddings (0 = off; deterministic either way)
  // The MLP's nonlinearity: exact GELU (erf form, frugal's fused CPU kernel) or the tanh
  // approximation GPT-2 was trained with (Hugging Face's "gelu_new"; ATen's kernel).
  enum class Activation { kGelu, kGeluTanh };
  Activation activation = Activation::kGelu;
  double norm_eps = 1e-5;  // LayerNorm (gpt) or RMSNorm (llama) epsilon
  // llama: rotary position embeddings: the base wavelength (rope_theta) and the frequency scaling
  // of a model extended past its pretraining context (transformers' rope_type): none; linear
  // (positions / factor); llama3 (Llama 3.1+: low frequencies / factor, high kept, smoothed
  // between); yarn (YaRN with transformers' defaults beta_fast 32, beta_slow 1).
  double rope_theta = 10000.0;
  enum class RopeScaling { kNone, kLinear, kLlama3, kYarn };
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_factor = 1.0;            // linear, llama3, yarn: the scaling factor
  double rope_low_freq_factor = 1.0;   // llama3: low_freq_factor
  double rope_high_freq_factor = 4.0;  // llama3: high_freq_factor
  int64_t rope_original_block = 0;     // llama3, yarn: original_max_position_embeddings; 0 = block
  // llama: biases of the attention projections: none (Llama, Mistral), qkv (q, k and v: Qwen2),
  // all (q, k, v and the output: Llama's attention_bias = true).
  enum class AttentionBias { kNone, kQkv, kAll };
  AttentionBias attention_bias = AttentionBias::kNone;
  bool qk_norm = false;  // llama: RMSNorm over each head's queries and keys before the rotation (Qwen3)
  // The output head shares the token embedding's weight (tied: the GPT always; Llama 3.2 1B/3B,
  // small Qwens) or has its own (Llama 3 8B, Mistral).
  bool tie_embeddings = true;
  // llama: each token attends to the last `sliding_window` positions only (itself included:
  // Mistral's sliding_window); 0 = the whole context.
  int64_t sliding_window = 0;
  // llama: rows of the output head + cross-entropy computed at a time (model/linear_cross_entropy.h:
  // no tokens x vocab fp32 logits held); 0 = auto (a chunk's logits about its hidden states' size).
  int64_t loss_chunk = 0;
  // The output head's matmuls run at the vocabulary rounded up to a multiple of this: the tied
  // weight gets zero rows for the product only (parameters, checkpoints and logits keep `vocab`
  // columns). GPU matmul kernels need aligned widths: GPT-2's 50257 falls back to kernels several
  // times slower than 50304's. 0 = auto (64 on a GPU, off on the CPU); 1 = off.
  int64_t head_multiple = 0;
  // Which kernels run the GPT's LayerNorms and its loss on a GPU (docs/gpu.md):
  //   kAten:   ATen's operators, the reference (and what every CPU run uses);
  //   kFrugal: frugal's CUDA kernels (model/kernel_ops.h): the fused classifier over the padded
  //            bf16 logits and LayerNorm with the residual add folded in; refused where they cannot
  //            run (no CUDA device or compute capability below 8.0, fp16, a build without them);
  //   kAuto:   kFrugal where their GPU check ran them, else kAten (choose_kernels, train/run_setup.h).
  enum class Kernels { kAuto, kAten, kFrugal };
  Kernels kernels = Kernels::kAuto;
  // Where the initial weights come from: "" = random initialisation from run.seed; "hf:DIR" = a
  // Hugging Face checkpoint directory of a GPT-2 or a Llama-family model (config.json +
  // model.safetensors or its shards, the transformers layout; or a hub id the local cache holds):
  // its config.json sets model.arch and the keys above that the run leaves unset
  // (model/hf_checkpoint.h, docs/library.md "Hugging Face checkpoints").
  std::string init_from;
  // What is trained: "gpt" = frugal's own decoder, of the family model.arch names (the name is
  // older than the Llama family); "torchscript:FILE" = a module scripted in Python
  // (torch.jit.script(module).save(FILE)) whose forward(x, y) returns the mean loss of the batch
  // (model/scripted_module.h, docs/library.md "A model written in Python"); the shape keys above
  // then do not apply.
  std::string source = "gpt";
};

// [data] — where tokens come from and how they are batched.
// data.source: where the training data comes from. Spelled "builtin:arith" (seeded arithmetic
// lines, docs/data.md), "text:PATH" (any UTF-8 file, byte-level tokens), "shards:DIR" (a token
// dataset `frugal prepare` wrote, or llm.c .bin files) or "records:DIR" (an image or table
// dataset `frugal prepare` wrote).
struct DataSource {
  enum class Kind { kArith, kText, kShards, kRecords };
  Kind kind = Kind::kArith;
  std::string path;  // the file (text) or directory (shards, records); "" for builtin:arith
  bool operator==(const DataSource& o) const { return kind == o.kind && path == o.path; }
  bool operator!=(const DataSource& o) const { return !(*this == o); }
};
std::string to_string(const DataSource& s);
// The spelling parsed; nullopt when it is not one of the forms above.
std::optional<DataSource> parse_data_source(const std::string& text);

struct DataConfig {
  DataSource source;            // builtin:arith by default
  int64_t micro_batch = 32;     // sequences per forward/backward pass
  double val_fraction = 0.1;    // text: the last fraction of the file is held out for validation
  int64_t arith_digits = 2;     // arith: operands have 1..arith_digits digits
  int64_t arith_lines = 20000;  // arith: training problems generated (held-out ones never appear)
  // shards, records: loader threads collating batches ahead of the trainer (0 = inline, debugging).
  // Each takes a core from the model; 1 suffices unless metrics.jsonl's data_wait says otherwise.
  int64_t workers = 1;
  int64_t prefetch = 4;  // shards, records: batches built ahead at most (memory: prefetch x one batch)
  // Documents datasets (chat, prompt-completion): several documents a row, each attending to itself
  // with positions restarted (pack), or one a row, padded (pad). docs/data.md.
  enum class Packing { kPack, kPad } packing = Packing::kPack;
};

// [precision] — mixed precision (src/train/precision.cpp, loss_scaler.cpp).
enum class PrecisionMode {
  kFp32,  // everything in fp32
  kBf16,  // autocast matmuls to bf16; fp32 master weights and optimizer state
  kFp16,  // autocast to fp16 with a dynamic loss scaler (CUDA; LibTorch 1.13's CPU autocast has no fp16)
  kFp8,   // bf16 autocast with the blocks' linears in fp8 (model/fp8.h; GPUs of compute capability 8.9+)
  kAuto,  // bf16 where this machine measures it fast, else fp32; the choice is logged
};
enum class LossScaling {
  kAuto,     // dynamic for fp16, none otherwise
  kDynamic,  // always (e.g. to test the scaler on CPU, or for bf16 models with tiny gradients)
  kNone,     // never
};
struct PrecisionConfig {
  PrecisionMode mode = PrecisionMode::kAuto;  // the cheap setting where it is measured safe and fast
  LossScaling loss_scaling = LossScaling::kAuto;
  double init_scale = 65536.0;     // fp16: first loss scale
  double growth_factor = 2.0;      // fp16: scale *= this after growth_interval finite steps
  double backoff_factor = 0.5;     // fp16: scale *= this after a step with inf/NaN gradients
  int64_t growth_interval = 2000;  // fp16: finite steps between growths
  double min_scale = 1.0;          // fp16: the scale never falls below this floor
  // fp16: after this many consecutive skipped steps at the floor, switch to bf16 where it is
  // supported and say so (0 = never; keep skipping).
  int64_t fallback_after = 0;
  // TF32 tensor-core math for fp32 matmuls and convolutions on Ampere and newer GPUs (10-bit
  // mantissa products, fp32 accumulation). PyTorch leaves it off for matmuls; fp32 runs on a GPU
  // are several times faster with it. No effect on the CPU.
  bool tf32 = true;
};

// memory.activation_checkpointing: which transformer blocks drop their activations in forward
// and recompute them in backward. Spelled "none", "blocks" (every block) or "every:N" (blocks 0,
// N, 2N, ...).
struct ActivationCheckpointing {
  enum class Mode { kNone, kBlocks, kEvery };
  Mode mode = Mode::kNone;
  int64_t every = 0;  // kEvery: the N of "every:N" (>= 1)
  bool enabled() const { return mode != Mode::kNone; }
  bool operator==(const ActivationCheckpointing& o) const { return mode == o.mode && every == o.every; }
  bool operator!=(const ActivationCheckpointing& o) const { return !(*this == o); }
};
std::string to_string(const ActivationCheckpointing& a);
// The spelling parsed; nullopt when it is not one of the forms above.
std::optional<ActivationCheckpointing> parse_activation_checkpointing(const std::string& text);

// [memory] — trading compute for memory.
struct MemoryConfig {
  // Recompute block activations in backward instead of keeping them (see above).
  ActivationCheckpointing activation_checkpointing;
  // Live tensor memory allowed on CPU, in MiB: an allocation past it throws the same
  // out-of-memory error CUDA throws, so the batch-size finder and the trainer's micro-batch
  // back-off work on CPU too. 0 = the cgroup's memory limit if there is one, else no limit.
  int64_t limit_mb = 0;
  // Keep memory that freed tensors hand back to the C library in the process, for the next
  // tensors to reuse, instead of returning it to the OS after every op (glibc malloc: blocks up to
  // 32 MiB from the heap, no trimming). LibTorch's CPU allocator has no cache of its own, so
  // without this a step's large activations come back as fresh pages the kernel faults in and
  // zeroes, step after step. Costs: the process keeps its peak footprint until it exits.
  bool reuse_freed = true;
};

// [budget] — cost, energy and carbon accounting, and the hard spending limit.
struct BudgetConfig {
  double usd_per_hour = 0;                // price of the machine; 0 = from the price table (budget.instance)
  std::string instance;                   // a name from data/prices.toml (e.g. "gpu-1xh100"); "" = none
  bool spot = false;                      // take the table's spot price instead of on-demand
  double limit_usd = 0;                   // hard limit: checkpoint and stop with exit code 3; 0 = none
  std::string alert_at = "0.5,0.8,0.95";  // fractions of limit_usd that log an alert once
  std::string alert_command;              // run (sh -c) at each alert with FRUGAL_COST_* variables; "" = none
  double watts = 0;                       // power draw; 0 = from the price table, else unknown (no kWh)
  double grid_g_per_kwh = 475;            // grid carbon intensity, g CO2 per kWh (~world average); set yours
};

enum class OptimizerKind {
  kFusedAdamW,  // frugal's flat-buffer AdamW (one multi-tensor update)
  kTorchAdamW,  // torch::optim::AdamW, the per-parameter reference
  kMuon,        // Muon on the hidden matrices, FusedAdamW on the rest (train/muon.h)
};

// How Muon scales its orthogonalised update for a rows x cols matrix (train/muon.h).
enum class MuonLrAdjust {
  kMatchRmsAdamW,  // 0.2 sqrt(max(rows, cols)): the update's RMS matches AdamW's; train.lr carries over
  kOriginal,       // sqrt(max(1, rows / cols)): Keller Jordan's; wants a Muon-sized train.lr (~0.02)
};
// The dtype of Muon's Newton-Schulz iteration: auto = bf16 on a GPU, fp32 on the CPU.
enum class MuonPrecision { kAuto, kBf16, kFp32 };

// What checkpoint.deadline does when the run cannot finish before it (train/deadline.h).
enum class DeadlineAction {
  kRequeue,  // checkpoint and exit 75, for the scheduler to requeue the job
  kDecay,    // warmup-stable-decay only: end the schedule in time, finish decayed (exit 0)
};

// The learning-rate schedule after the warm-up (train/lr_schedule.h).
enum class LrSchedule {
  kCosine,  // cosine decay from train.lr to lr * min_lr_ratio over the rest of the run
  kWsd,     // warmup-stable-decay: train.lr until the last decay_fraction of the run, then linear to the floor
};

// [train] — the optimisation schedule.
struct TrainConfig {
  int64_t steps = 600;  // training iterations (each consumes global_batch sequences)
  // Sequences per optimizer step (0 = data.micro_batch); a multiple of data.micro_batch.
  int64_t global_batch = 0;
  int64_t accum = 0;  // explicit accumulation count; 0 = derived from global_batch
  // Parameters left as they are: comma-separated globs over the Hugging Face names (model/freeze.h).
  std::string freeze;
  OptimizerKind optimizer = OptimizerKind::kFusedAdamW;
  double lr = 3e-3;           // peak learning rate, reached after warmup_steps
  int64_t warmup_steps = 50;  // linear warm-up from 0, then cosine decay to lr * min_lr_ratio
  double min_lr_ratio = 0.1;  // floor of the cosine decay, as a fraction of lr
  double weight_decay = 0.1;  // AdamW decoupled weight decay on matrices (not on biases/norms)
  double beta1 = 0.9;         // AdamW first-moment decay
  double beta2 = 0.99;        // AdamW second-moment decay
  double grad_clip = 1.0;     // global gradient-norm clip; 0 = off
  bool cuda_graphs = false;   // the step as one CUDA graph, replayed (train/train_step.h)
  // After the warm-up: cosine decay over the whole rest of the run, or warmup-stable-decay (the
  // peak rate until the last decay_fraction of train.steps, then a linear decay to the floor), whose
  // stable phase lets a resumed run be lengthened (--set train.steps=N) without restarting a decay.
  LrSchedule schedule = LrSchedule::kCosine;
  double decay_fraction = 0.2;  // wsd: the share of train.steps the final decay takes
  // Muon (train.optimizer = "muon"): the momentum of its buffer, its learning-rate adjustment per
  // matrix shape, and the dtype of its Newton-Schulz iteration.
  double muon_momentum = 0.95;
  MuonLrAdjust muon_lr_adjust = MuonLrAdjust::kMatchRmsAdamW;
  MuonPrecision muon_precision = MuonPrecision::kAuto;
  // Stop once the validation loss reaches this value (at an evaluation), with stop reason "target
  // reached" and exit 0; summary.json records the tokens, wall time, $ and kWh it took. 0 = off.
  double target_loss = 0;
  int64_t eval_every = 150;      // evaluate validation loss every N steps (and at the end); 0 = only at the end
  int64_t eval_batches = 8;      // validation batches per evaluation
  int64_t log_every = 10;        // write a metrics.jsonl line every N steps
  int64_t answer_samples = 200;  // arith: held-out problems completed greedily for answer_accuracy
  // Stop (with a checkpoint) once the run's wall time, summed over resumes, passes this many
  // minutes; 0 = no limit. The stop reason "max_minutes" lands in summary.json.
  double max_minutes = 0;
  // Run `frugal smoke` (2 tiny steps through data, step, eval, checkpoint, kill, resume) before
  // the run, so a broken pipeline fails in seconds instead of hours in.
  bool smoke_first = false;
  // Run `frugal tune` ([tune]) before training and train with the setting it chose; the choice
  // and the table land in summary.json under "auto_tune".
  bool auto_tune = false;
};

// Whether a smaller or a larger metric value is better (checkpoint.best_mode, early_stop.mode).
enum class MetricMode { kMin, kMax };

// A figure the run measures that checkpoints are ranked by (checkpoint.best_metric) and early
// stopping watches (early_stop.metric): "val_loss" (per evaluation), "loss" (the training loss of
// a log window) or "grad_norm" (the gradient norm at a log step).
enum class Metric { kValLoss, kLoss, kGradNorm };
const char* metric_name(Metric m);

// Storage dtype of model.safetensors in a checkpoint.
enum class WeightsDtype { kFp32, kBf16, kFp16 };

// [checkpoint] — crash-safe checkpoints for resume (docs/formats/checkpoint.md).
struct CheckpointConfig {
  // Master switch. When on, a checkpoint is written on the cadence below, at the end of the run
  // and when a stop signal arrives; off = only on a stop signal (so the run stays resumable).
  bool enabled = true;
  int64_t every_steps = 0;    // save every N optimizer steps; 0 = no step cadence
  double every_minutes = 30;  // save when this many minutes passed since the last save; 0 = off
  // Young/Daly: save every sqrt(2 x save_stall_s x mtbf) seconds, from the measured stall of the
  // previous save (the first save happens after step 1 to measure it). Overrides every_minutes.
  bool auto_interval = false;
  double mtbf_minutes = 120;  // expected minutes between preemptions, for auto_interval
  int64_t keep_last = 3;      // newest complete checkpoints kept (>= 1)
  int64_t keep_best = 1;      // complete checkpoints kept by best_metric (0 = none)
  // Metric that ranks checkpoints for keep_best: val_loss (a checkpoint counts only if an
  // evaluation ran at its step; align every_steps with train.eval_every), loss or grad_norm.
  Metric best_metric = Metric::kValLoss;
  MetricMode best_mode = MetricMode::kMin;
  // model.safetensors dtype. bf16/fp16 halve the bytes other tools read; the exact fp32 master
  // weights are still stored beside them (master.safetensors) unless exact_resume = false, which
  // saves half the weight I/O but makes a resume continue from rounded weights (not bitwise).
  WeightsDtype weights_dtype = WeightsDtype::kFp32;
  bool exact_resume = true;
  // Snapshot tensors to host memory, then write on a background thread while training goes on:
  // the trainer waits only for the copy (and for a previous write still in flight).
  bool async = false;
  // Deadline-aware stops (train/deadline.h): when the job ends. "auto" = the Slurm job's end time
  // (SLURM_JOB_END_TIME) when there is one; "slurm" = the same, required; "" = none; or a UTC time
  // "2026-11-24T18:00:00Z" or Unix seconds. The run checkpoints and exits 75 while one more step,
  // the longest measured save and deadline_margin_s still fit.
  std::string deadline = "auto";
  double deadline_margin_s = 60;
  // What a deadline that comes before train.steps does: requeue (checkpoint, exit 75) or, with
  // train.schedule = "wsd", decay (move the decay to end in time and finish, exit 0).
  DeadlineAction deadline_action = DeadlineAction::kRequeue;
  // A preemption-notice URL polled every notice_poll_s (AWS:
  // http://169.254.169.254/latest/meta-data/spot/instance-action, GCP:
  // http://metadata.google.internal/computeMetadata/v1/instance/preempted); "" = none.
  std::string notice_url;
  double notice_poll_s = 5;
};

// [early_stop] — stop when a metric stops improving.
struct EarlyStopConfig {
  bool enabled = false;
  // val_loss (counted per evaluation) or a step metric (loss, grad_norm; counted per log step).
  Metric metric = Metric::kValLoss;
  MetricMode mode = MetricMode::kMin;
  int64_t patience = 5;  // evaluations without improvement before stopping
  double min_delta = 0;  // an improvement must beat the best by more than this (absolute)
  int64_t warmup = 0;    // first evaluations ignored entirely (curricula where loss rises first)
  // "" = watch `metric`; else a figure the task's eval_metrics hook returns (e.g. "accuracy", with
  // mode = "max"), counted per evaluation.
  std::string task_metric;
};

// [guard] — divergence guard: roll back to the last good checkpoint with a lower learning rate.
struct GuardConfig {
  bool enabled = true;
  // A logged training loss above spike_factor x its moving average for spike_windows consecutive
  // log windows counts as divergence (so does a NaN/inf loss at once); 0 = NaN/inf only.
  double spike_factor = 3.0;
  int64_t spike_windows = 3;
  double ema_decay = 0.9;     // moving average: ema = decay * ema + (1 - decay) * loss
  double lr_factor = 0.5;     // after a rollback the learning rate is multiplied by this
  int64_t max_rollbacks = 2;  // then the run stops with exit code 3
};

// [dist] — multi-process data parallel (src/dist, docs/distributed.md). Read only when a launcher
// started several processes (frugal launch, torchrun, Slurm, mpirun); a single process ignores it.
enum class DistBackend {
  kAuto,  // NCCL for CUDA devices (where LibTorch was built with it), Gloo otherwise
  kGloo,  // c10d Gloo: CPU tensors (and CUDA tensors, slower than NCCL)
  kNccl,  // c10d NCCL: CUDA only
};
// dist.zero: how much of the training state is sharded across ranks, spelled as the ZeRO stage.
enum class ZeroStage : int64_t { kNone = 0, kOptimizerState = 1, kGradients = 2, kParameters = 3 };
// dist.offload: "optimizer" keeps AdamW's moments in host memory and runs its update on the CPU.
enum class Offload { kNone, kOptimizer };
struct DistConfig {
  DistBackend backend = DistBackend::kAuto;
  // Seconds a rank waits for a peer (rendezvous, any collective) before it fails naming the step.
  double timeout_s = 300;
  // 0: every rank keeps the whole AdamW state. 1 (ZeRO-1): each rank keeps and updates 1/world of
  // it. 2 (ZeRO-2): and of the gradients, reduced to their owners in backward. 3 (ZeRO-3): and of
  // the blocks' parameters, each block gathered around its use (docs/distributed.md).
  ZeroStage zero = ZeroStage::kNone;
  // ZeRO-3: false keeps each block whole from its forward to its backward (half the gathers).
  bool reshard_after_forward = true;
  // kOptimizer (ZeRO-Offload): each step stages the parameters and gradients (this rank's chunk
  // under ZeRO) to host memory, updates them there, and copies the parameters back.
  Offload offload = Offload::kNone;
  // Gradients go in buckets of about this many MB, each reduced as soon as it is complete in backward.
  double bucket_mb = 4;
};

// [profile] — the profiler (src/monitor/profiler.cpp, docs/observability.md): capture windows of
// `capture_steps` steps as Chrome-trace JSON under runs/<name>/profile/ (open in Perfetto).
struct ProfileConfig {
  int64_t capture_steps = 0;  // steps per capture window; 0 = profiler off
  int64_t start_step = 5;     // the first window starts after this many steps (skip the warm-up)
  int64_t every_steps = 0;    // start another window every N steps after that; 0 = capture once
  // Record LibTorch's operator events (aten ops, autograd nodes) besides frugal's phase spans;
  // false = phase spans only (tiny traces, no profiler overhead).
  bool torch_ops = true;
  bool record_shapes = false;  // input shapes of each op in the trace (bigger files)
  int64_t top_ops = 15;        // rows of the top-operators table (summary.json, report.html)
};

// [monitor] — live figures: MFU's peak, the gradient-noise probe, the HTTP dashboard.
struct MonitorConfig {
  // Peak FLOP/s that MFU divides by, in TFLOP/s. 0 = measure at start-up with frugal doctor's
  // dense matmul probe in the run's precision (~0.2 s); the datasheet figure compares machines.
  double peak_tflops = 0;
  // Estimate the gradient noise scale (B_simple) at log steps when accumulating (accum > 1). Costs
  // one gradient-sized copy and one norm per micro-batch on log steps only.
  bool grad_noise = true;
  // "HOST:PORT" of the live dashboard (report page, /metrics for Prometheus, /api/metrics JSON);
  // "" = off. Port 0 picks a free port and prints it.
  std::string http;
  // Serve on a non-loopback address. Requires a token: whoever reaches the port sees the run.
  bool allow_remote = false;
  // Shared secret: requests must send "Authorization: Bearer TOKEN" or ?token=TOKEN, else 401.
  // Required with allow_remote; optional on loopback. Never written to config.toml or checkpoints.
  std::string token;
};

// [track] — the trackers a team already watches (docs/observability.md, "Trackers"): every figure
// of metrics.jsonl, the resolved config and the levers, written by rank 0 alone.
struct TrackConfig {
  // TensorBoard event files in runs/<name>/tb/ (`tensorboard --logdir runs`).
  bool tensorboard = false;
  // "http://HOST:PORT" of an MLflow tracking server; "" = off. Credentials come from the
  // environment (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD),
  // never from the config, so they are never written into the run directory.
  std::string mlflow_uri;
  std::string mlflow_experiment = "frugal";  // created when the server has none by that name
  // Also send final/model.safetensors as an artifact (summary.json, report.html, config.toml go anyway).
  bool mlflow_weights = false;
  // Seconds one request to the server may take; the end of the run waits at most this long for
  // what is still queued (a server that is down never holds the run longer).
  double mlflow_timeout_s = 10;
  // Metric points held while the server is slow or down; points past it are dropped (counted in
  // summary.json's trackers.mlflow.dropped).
  int64_t mlflow_queue = 100000;
};

// [tune] — `frugal tune` and the batch-size finder (docs/tuning.md).
struct TuneConfig {
  // Time `frugal tune` may spend, as a fraction of the configured run's projected time (from the
  // baseline candidate's measured step time x train.steps). Candidates past it are skipped.
  double max_fraction = 0.05;
  int64_t probe_steps = 4;  // measured optimizer steps per candidate (after one warm-up step)
  // Measurement rounds: every candidate runs once per round, in turn, so that a machine whose speed
  // drifts slows all of them alike; a candidate's tokens/s is the median of its rounds.
  int64_t rounds = 3;
  // A candidate replaces the configuration as given only when its median tokens/s beats the given
  // configuration's by this fraction (below it, the difference is within the machine's noise).
  double min_speedup = 0.05;
  // A candidate qualifies only if its loss is within this relative distance of the fp32
  // reference's (a precision or recompute setting must not change what is learned).
  double loss_tolerance = 0.05;
  // Before a candidate other than the fp32 reference is chosen, it and the reference train this
  // many steps from the same start, and their mean losses over the last quarter must agree within
  // loss_tolerance (the probe's few steps cannot tell); 0 = compare the probe losses only.
  int64_t loss_check_steps = 40;
  double memory_margin = 0.1;      // the finder keeps peak memory below (1 - margin) x the budget
  int64_t max_micro_batch = 1024;  // the finder never probes above this
  // Cache finder results per (model, device, precision, sequence length, recompute, budget) in
  // $FRUGAL_CACHE_DIR or $XDG_CACHE_HOME/frugal or ~/.cache/frugal (batch_finder.json).
  bool cache = true;
};

// [plan] — `frugal plan`: the projected time and cost of a run before it starts (docs/plan.md).
struct PlanConfig {
  // `frugal train` probes the run first (below), shows the projection in its banner and refuses to
  // start (exit 3) when budget.limit_usd is below the central projected cost. The probe costs its
  // own time: start-up, 1 + probe_steps steps, the final evaluation and save (the table says how
  // long it took; a few seconds for the demo).
  bool before_train = false;
  int64_t probe_steps = 20;  // measured steps (after one warm-up step); more narrow the range
  double max_probe_s = 60;   // the probe stops after this many seconds of steps (3 measured at least)
  // The smallest relative half-width of every term's range: the drift between the probe and the
  // run that the probe cannot see (docs/plan.md has the measured error on a 2-core machine).
  double margin = 0.15;
};

// Everything a run needs. Copyable plain data.
struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  LoraConfig lora;
  PrecisionConfig precision;
  MemoryConfig memory;
  BudgetConfig budget;
  CheckpointConfig checkpoint;
  EarlyStopConfig early_stop;
  GuardConfig guard;
  DistConfig dist;
  ProfileConfig profile;
  MonitorConfig monitor;
  TrackConfig track;
  TuneConfig tune;
  PlanConfig plan;
};

// Micro-batches per optimizer step, from train.accum / global_batch / data.micro_batch (validated).
int64_t accumulation_steps(const Config& c);

}  // namespace frugal
