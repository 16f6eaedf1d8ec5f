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
  // "builtin:arith" (seeded arithmetic lines, docs/data.md), "text:PATH" (any UTF-8 file,
  // byte-level tokens) or "shards:DIR" (a dataset `frugal prepare` wrote, or llm.c .bin files).
  std::string source = "builtin:arith";
  int64_t micro_batch = 32;     // sequences per forward/backward pass
  double val_fraction = 0.1;    // text: the last fraction of the file is held out for validation
  int64_t arith_digits = 2;     // arith: operands have 1..arith_digits digits
  int64_t arith_lines = 20000;  // arith: training problems generated (held-out ones never appear)
  // shards: loader threads that read and collate batches ahead of the trainer. 0 = inline on
  // the trainer thread (debugging). Each worker takes a core from the model; 1 suffices unless
  // data_wait in metrics.jsonl says otherwise.
  int64_t workers = 1;
  int64_t prefetch = 4;  // shards: batches built ahead at most (memory: prefetch x one batch)
};

// [train] — the optimisation schedule.
struct TrainConfig {
  int64_t steps = 400;           // optimizer steps
  double lr = 3e-3;              // peak learning rate, reached after warmup_steps
  int64_t warmup_steps = 50;     // linear warm-up from 0, then cosine decay to lr * min_lr_ratio
  double min_lr_ratio = 0.1;     // floor of the cosine decay, as a fraction of lr
  double weight_decay = 0.1;     // AdamW decoupled weight decay on matrices (not on biases/norms)
  double beta1 = 0.9;            // AdamW first-moment decay
  double beta2 = 0.99;           // AdamW second-moment decay
  double grad_clip = 1.0;        // global gradient-norm clip; 0 = off
  int64_t eval_every = 100;      // evaluate validation loss every N steps (and at the end); 0 = only at the end
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
};

}  // namespace frugal
