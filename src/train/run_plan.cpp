// The run plan; see run_plan.h.
#include "frugal/train/run_plan.h"

#include <fmt/format.h>

#include "frugal/train/task.h"

namespace frugal {

RunPlan plan_run(const Config& c, const TaskHooks& hooks, int64_t world_size, PrecisionPolicy precision) {
  RunPlan p;
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
  p.grad_noise = c.monitor.grad_noise && p.accum > 1;
  return p;
}

PrecisionMode precision_to_continue(PrecisionMode configured, const std::string& checkpoint, std::string* warning) {
  const std::string now = precision_name(configured);
  if (checkpoint.empty() || checkpoint == now) return configured;
  if (configured == PrecisionMode::kAuto || (configured == PrecisionMode::kFp16 && checkpoint == "bf16"))
    return checkpoint == "bf16" ? PrecisionMode::kBf16 : checkpoint == "fp16" ? PrecisionMode::kFp16 : PrecisionMode::kFp32;
  if (warning)
    *warning = fmt::format("the checkpoint trained in {}, this run asks for {}; the continuation will not match "
                           "an uninterrupted run",
                           checkpoint, now);
  return configured;
}

}  // namespace frugal
