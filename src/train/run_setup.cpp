// The run setup; see run_setup.h.
#include "frugal/train/run_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"

#include "frugal/train/task.h"

namespace frugal {

RunSetup set_up_run(const Config& c, const TaskHooks& hooks, int64_t world_size, PrecisionPolicy precision) {
  RunSetup p;
  p.micro_batch = c.data.micro_batch;
  p.accum = accumulation_steps(c);
  p.world_size = world_size;
  p.global_batch = p.micro_batch * p.accum * world_size;
  p.tokens_per_sample = hooks.tokens_per_sample;
  p.items_per_step = p.global_batch * p.tokens_per_sample;
  p.item = hooks.item;
  p.flops_per_token = hooks.flops_per_token;
  p.loss_scaling = precision.loss_scaling(c.precision.loss_scaling);
  p.precision = std::move(precision);
  p.activation_checkpointing = c.memory.activation_checkpointing;
  p.grad_noise_wanted = c.monitor.grad_noise;
  p.grad_noise = p.grad_noise_wanted && p.accum > 1;
  return p;
}

std::string levers_line(const RunSetup& setup, const Config& c) {
  return fmt::format(
      "precision {} ({}) | micro_batch {} x accum {} | activation checkpointing {} | optimizer {} | "
      "checkpoints {}",
      setup.precision.name(), setup.precision.reason(), setup.micro_batch, setup.accum,
      to_string(setup.activation_checkpointing), std::get<std::string>(find_key("train.optimizer")->get(c)),
      c.checkpoint.enabled ? (c.checkpoint.async ? "async" : "sync") : "on signal only");
}

void continue_global_batch(RunSetup& p, int64_t global_batch, int64_t from_world) {
  const int64_t per_step = p.micro_batch * p.world_size;  // sequences per micro-batch round
  if (global_batch % per_step != 0) {
    std::vector<int64_t> fit;
    for (int64_t w = 1; w <= global_batch / p.micro_batch; ++w)
      if (global_batch % (p.micro_batch * w) == 0) fit.push_back(w);
    throw ConfigError(fmt::format(
        "resume: the checkpoint was written by {} process(es) with a global batch of {} sequences per step, which {} "
        "process(es) of data.micro_batch = {} cannot split into whole micro-batches; resume with {} process(es) "
        "(or a data.micro_batch that divides {} / {})",
        from_world, global_batch, p.world_size, p.micro_batch, fmt::join(fit, ", "), global_batch, p.world_size));
  }
  p.accum = global_batch / per_step;
  p.global_batch = global_batch;
  p.items_per_step = global_batch * p.tokens_per_sample;
  p.grad_noise = p.grad_noise_wanted && p.accum > 1;
}

PrecisionMode precision_to_continue(PrecisionMode configured, const std::string& checkpoint, std::string* warning) {
  const std::string now = precision_name(configured);
  if (checkpoint.empty() || checkpoint == now) return configured;
  if (configured == PrecisionMode::kAuto || (configured == PrecisionMode::kFp16 && checkpoint == "bf16"))
    return checkpoint == "bf16"   ? PrecisionMode::kBf16
           : checkpoint == "fp16" ? PrecisionMode::kFp16
                                  : PrecisionMode::kFp32;
  if (warning)
    *warning = fmt::format(
        "the checkpoint trained in {}, this run asks for {}; the continuation will not match "
        "an uninterrupted run",
        checkpoint, now);
  return configured;
}

}  // namespace frugal
