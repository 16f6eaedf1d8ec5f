// `frugal smoke CONFIG`: the real pipeline for 2 steps at a tiny batch on the CPU, to fail in
// seconds what would otherwise fail hours into a run. Stages, in order:
//   config      the configuration resolves and validates, and the model builds from it as the run
//               builds it (model.init_from's weights, train.freeze, [lora]'s adapters over a
//               frozen base held in lora.base_dtype)
//   data        the data source opens and yields a training and a validation batch
//   forward     the model maps the batch to logits of the expected shape
//   memory      forward + backward at batch 1 and 2 (counting allocator) -> bytes per sample
//   train       2 optimizer steps with an evaluation and a checkpoint after each step
//   checkpoint  the step-1 checkpoint verifies (checksums) and loads
//   resume      a simulated kill after step 1: a new trainer resumes from the step-1 checkpoint
//   compare     the resumed step 2 has bitwise the loss of the uninterrupted step 2
// On failure the report names the stage and the cause (e.g. both shapes of a mismatch), and keeps
// the cause's kind: bad input (a config key, the data) is exit 2, as for `frugal train`.
// Used by `[train] smoke_first = true` before a long run.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/exit_code.h"

namespace frugal {

struct SmokeReport {
  bool ok = false;
  std::string stage;                // the failing stage ("" when ok)
  std::string error;                // its cause
  std::exception_ptr failure;       // the cause as thrown (its kind: ConfigError, DataError, ...)
  std::vector<std::string> passed;  // stages that passed, in order
  std::string batch_shape;          // "[2, 64]"
  std::string logits_shape;         // "[2, 64, 256]"
  int64_t params = 0;               // every parameter, as summary.json's params counts them
  int64_t trainable_params = 0;     // those that train (LoRA: the adapters), summary.json's trainable_params
  double weight_bytes = 0;          // the parameters' values as held (a LoRA base in bf16 or NF4)
  double step_s = 0;                // mean wall time of the 2 smoke steps (tiny batch)
  double bytes_per_sample = 0;      // activation + transient bytes per sequence (forward+backward)
  double static_bytes = 0;          // weights + gradients and AdamW moments of trainable_params (12 bytes each)
  int64_t micro_batch = 0;          // the configured data.micro_batch
  double estimated_bytes = 0;       // static + bytes_per_sample x micro_batch (an estimate)
  double loss_uninterrupted = 0;    // step 2
  double loss_resumed = 0;          // step 2 after the simulated kill

  // A human report: one line per stage, then the figures (or the failure).
  std::string describe() const;
  // What `frugal smoke` exits with: 0 when every stage passed, else the cause's code
  // (core/exit_code.h: 2 for bad input, 1 for a failure).
  ExitCode exit_code() const;
};

// Runs the smoke test in a temporary directory (removed afterwards). Never throws for a failing
// stage: the report says which one failed. `inject_failure` names a stage to fail on purpose
// (tests of the failure messages); "" in normal use.
SmokeReport run_smoke(const ResolvedConfig& rc, const std::string& inject_failure = "");

}  // namespace frugal
