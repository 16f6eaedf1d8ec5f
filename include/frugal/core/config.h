// The configuration of a run: one plain struct per subsystem, every field documented with its
// default, unit and trade-off (the defaults here ARE the built-in defaults). config_schema.cpp
// lists every key once, with its range and help text; config_loader.h resolves a Config from
// built-in defaults < FRUGAL_<SECTION>_<KEY> environment variables < a TOML file < --set.
//
// These structs hold no torch types, so including this header is cheap.
#pragma once

#include <cstdint>
#include <string>

namespace frugal {

// [run] — identity and placement of a run.
struct RunConfig {
  std::string name = "demo";    // runs/<name>/ holds everything the run writes
  std::string out_dir = "runs";  // parent folder of run directories
  int64_t seed = 1337;           // fixes initialisation, data order and dropout
  // Intra-op threads for LibTorch and the BLAS. 0 = auto: the physical core count, which on a
  // 2-vCPU VM is what measures fastest (see docs/levers.md, "threads").
  int64_t threads = 0;
  std::string device = "cpu";  // "cpu" or "cuda" (or "cuda:N")
};

// [model] — the reference GPT decoder (src/model/gpt.cpp).
struct ModelConfig {
  int64_t layers = 4;     // transformer blocks
  int64_t heads = 4;      // attention heads; must divide embd
  int64_t embd = 128;     // residual width
  int64_t block = 64;     // context length in tokens
  int64_t vocab = 256;    // vocabulary size; 256 for byte-level data
  double dropout = 0.0;   // dropout on attention, MLP and embeddings (0 = off; deterministic either way)
};

// [data] — where tokens come from and how they are batched.
struct DataConfig {
  // "builtin:arith" (seeded arithmetic lines, docs/data.md) or "text:PATH" (any UTF-8 file,
  // byte-level tokens).
  std::string source = "builtin:arith";
  int64_t micro_batch = 32;     // sequences per forward/backward pass
  double val_fraction = 0.1;    // text: the last fraction of the file is held out for validation
  int64_t arith_digits = 2;     // arith: operands have 1..arith_digits digits
  int64_t arith_lines = 20000;  // arith: training problems generated (held-out ones never appear)
};

// [precision] — mixed precision (src/train/precision.cpp, loss_scaler.cpp).
enum class PrecisionMode {
  kFp32,  // everything in fp32
  kBf16,  // autocast matmuls to bf16; fp32 master weights and optimizer state
  kFp16,  // autocast to fp16 with a dynamic loss scaler (CUDA; LibTorch 1.13's CPU autocast has no fp16)
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
  double init_scale = 65536.0;    // fp16: first loss scale
  double growth_factor = 2.0;     // fp16: scale *= this after growth_interval finite steps
  double backoff_factor = 0.5;    // fp16: scale *= this after a step with inf/NaN gradients
  int64_t growth_interval = 2000; // fp16: finite steps between growths
  double min_scale = 1.0;         // fp16: the scale never falls below this floor
  // fp16: after this many consecutive skipped steps at the floor, switch to bf16 where it is
  // supported and say so (0 = never; keep skipping).
  int64_t fallback_after = 0;
};

// [memory] — trading compute for memory.
struct MemoryConfig {
  // "none", "blocks" (recompute every transformer block in backward) or "every:N" (every N-th
  // block): activations of a checkpointed block are dropped in forward and recomputed in backward.
  std::string activation_checkpointing = "none";
};

// [budget] — cost, energy and carbon accounting, and the hard spending limit.
struct BudgetConfig {
  double usd_per_hour = 0;      // price of the machine; 0 = from the price table (budget.instance)
  std::string instance;         // a name from data/prices.toml (e.g. "gpu-1xh100"); "" = none
  bool spot = false;            // take the table's spot price instead of on-demand
  double limit_usd = 0;         // hard limit: checkpoint and stop with exit code 3; 0 = none
  std::string alert_at = "0.5,0.8,0.95";  // fractions of limit_usd that log an alert once
  std::string alert_command;    // run (sh -c) at each alert with FRUGAL_COST_* variables; "" = none
  double watts = 0;             // power draw; 0 = from the price table, else unknown (no kWh)
  double grid_g_per_kwh = 475;  // grid carbon intensity, g CO2 per kWh (~world average); set yours
};

enum class OptimizerKind {
  kFusedAdamW,  // frugal's flat-buffer AdamW (one multi-tensor update)
  kTorchAdamW,  // torch::optim::AdamW, the per-parameter reference
};

// [train] — the optimisation schedule.
struct TrainConfig {
  int64_t steps = 600;           // training iterations (each consumes global_batch sequences)
  // Sequences per optimizer step; 0 = data.micro_batch. Must be a multiple of data.micro_batch:
  // accumulation = global_batch / micro_batch micro-batches per step.
  int64_t global_batch = 0;
  int64_t accum = 0;             // explicit accumulation count; 0 = derived from global_batch
  OptimizerKind optimizer = OptimizerKind::kFusedAdamW;
  double lr = 3e-3;              // peak learning rate, reached after warmup_steps
  int64_t warmup_steps = 50;     // linear warm-up from 0, then cosine decay to lr * min_lr_ratio
  double min_lr_ratio = 0.1;     // floor of the cosine decay, as a fraction of lr
  double weight_decay = 0.1;     // AdamW decoupled weight decay on matrices (not on biases/norms)
  double beta1 = 0.9;            // AdamW first-moment decay
  double beta2 = 0.99;           // AdamW second-moment decay
  double grad_clip = 1.0;        // global gradient-norm clip; 0 = off
  int64_t eval_every = 150;      // evaluate validation loss every N steps (and at the end); 0 = only at the end
  int64_t eval_batches = 8;      // validation batches per evaluation
  int64_t log_every = 10;        // write a metrics.jsonl line every N steps
  int64_t answer_samples = 200;  // arith: held-out problems completed greedily for answer_accuracy
};

// Everything a run needs. Copyable plain data.
struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  PrecisionConfig precision;
  MemoryConfig memory;
  BudgetConfig budget;
};

// Micro-batches per optimizer step, from train.accum / train.global_batch / data.micro_batch.
// Validated by validate_config().
int64_t accumulation_steps(const Config& c);

}  // namespace frugal
