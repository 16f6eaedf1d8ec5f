// The run setup; see run_setup.h.
#include "frugal/train/run_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/levers.h"
#include "frugal/train/muon.h"

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
  p.muon_bf16 =
      c.train.optimizer == OptimizerKind::kMuon && muon_uses_bf16(c.train.muon_precision, p.precision.device());
  p.task_schedule = static_cast<bool>(hooks.lr_schedule);
  // Each micro-batch's whole gradient: under ZeRO-2 a rank holds only a shard of it.
  p.grad_noise_wanted = c.monitor.grad_noise && c.dist.zero < ZeroStage::kGradients;
  p.grad_noise = p.grad_noise_wanted && p.accum > 1;
  p.offload = c.dist.offload == Offload::kOptimizer;
  FRUGAL_CHECK(c.dist.zero != ZeroStage::kParameters || hooks.gather_blocks || world_size == 1, ConfigError,
               "dist.zero = 3 gathers each block's parameters around the block's forward and backward, and this "
               "task's model names no blocks (TaskHooks::gather_blocks; frugal's own decoders do). Set dist.zero = 2");
  p.gather_blocks = hooks.gather_blocks;
  FRUGAL_CHECK(c.dist.reshard_after_forward || c.dist.zero == ZeroStage::kParameters, ConfigError,
               "dist.reshard_after_forward = false keeps ZeRO-3's gathered blocks whole from forward to backward, and "
               "this run has dist.zero = " +
                   std::to_string(static_cast<int>(c.dist.zero)) +
                   ", which gathers no blocks. Set dist.zero = 3, or leave dist.reshard_after_forward = true");
  p.reshard_after_forward = c.dist.reshard_after_forward;
  p.working_weights = c.model.kernels == ModelConfig::Kernels::kFrugal && p.precision.mode() == PrecisionMode::kBf16 &&
                      c.train.optimizer == OptimizerKind::kFusedAdamW && c.dist.zero == ZeroStage::kNone;
  p.kernels = c.model.kernels == ModelConfig::Kernels::kFrugal ? "frugal" : "aten";
  return p;
}

KernelsChoice choose_kernels(const Config& c, bool on_gpu, const std::string& unavailable, PrecisionMode precision,
                             int64_t world_size, const std::string& resumed) {
  using K = ModelConfig::Kernels;
  if (c.model.kernels == K::kFrugal) return {K::kFrugal, "model.kernels = \"frugal\""};
  if (c.model.kernels == K::kAten) return {K::kAten, "model.kernels = \"aten\""};
  std::string why;
  if (!on_gpu)
    why = "the run is not on a GPU";
  else if (resumed == "aten")
    why = "the checkpoint this run resumes trained on them (another choice would not continue it exactly)";
  else if (!unavailable.empty())
    why = unavailable;
  else if (precision == PrecisionMode::kFp16)
    why = "the run is in fp16 (they run in fp32 and bf16)";
  else if (c.model.source != "gpt")
    why = "model.source is \"" + c.model.source + "\", not one of frugal's own decoders";
  else if (lora_enabled(c.lora))
    why = "LoRA adapters, which their GPU check has not run yet";
  else if (c.memory.activation_checkpointing.enabled())
    why = "activation checkpointing, which their GPU check has not run yet";
  else if (world_size > 1)
    why = fmt::format("{} processes, which their GPU check has not run yet", world_size);
  if (!why.empty()) return {K::kAten, "auto: ATen's operators: " + why};
  return {K::kFrugal, "auto: frugal's CUDA kernels, which run on this GPU (docs/gpu.md)"};
}

KernelsChoice confirm_kernels(const KernelsChoice& chosen, const Config& c, const TaskHooks& hooks) {
  if (c.model.kernels != ModelConfig::Kernels::kAuto || chosen.kernels != ModelConfig::Kernels::kFrugal ||
      hooks.frugal_kernels)
    return chosen;
  return {ModelConfig::Kernels::kAten, "auto: ATen's operators: the task's model is not one of frugal's own decoders"};
}

nlohmann::ordered_json levers_json(const RunSetup& setup, const Config& c) {
  auto spelled = [&](const char* key) { return std::get<std::string>(find_key(key)->get(c)); };
  nlohmann::ordered_json j;
  j["precision"] = {
      {"mode", setup.precision.name()}, {"reason", setup.precision.reason()}, {"loss_scaling", setup.loss_scaling}};
  j["batch"] = {{"micro_batch", setup.micro_batch},
                {"accum", setup.accum},
                {"world_size", setup.world_size},
                {"global_batch", setup.global_batch}};
  j["activation_checkpointing"] = to_string(setup.activation_checkpointing);
  nlohmann::ordered_json opt = {{"kind", spelled("train.optimizer")},
                                {"lr", c.train.lr},
                                {"weight_decay", c.train.weight_decay},
                                {"betas", {c.train.beta1, c.train.beta2}},
                                {"grad_clip", c.train.grad_clip}};
  if (c.train.optimizer == OptimizerKind::kMuon)
    opt["muon"] = {{"momentum", c.train.muon_momentum},
                   {"lr_adjust", spelled("train.muon_lr_adjust")},
                   {"newton_schulz", setup.muon_bf16 ? "bf16" : "fp32"}};
  j["optimizer"] = opt;
  if (setup.task_schedule) {
    j["schedule"] = {{"kind", "the task's (TaskHooks::lr_schedule)"}};
  } else {
    nlohmann::ordered_json sched = {{"kind", spelled("train.schedule")},
                                    {"warmup_steps", c.train.warmup_steps},
                                    {"min_lr_ratio", c.train.min_lr_ratio}};
    if (c.train.schedule == LrSchedule::kWsd) sched["decay_fraction"] = c.train.decay_fraction;
    j["schedule"] = sched;
  }
  j["zero"] = static_cast<int>(c.dist.zero);
  if (c.dist.zero == ZeroStage::kParameters) j["reshard_after_forward"] = setup.reshard_after_forward;
  j["kernels"] = setup.kernels;
  if (!setup.kernels_reason.empty()) j["kernels_reason"] = setup.kernels_reason;
  j["working_weights"] = setup.working_weights;
  j["offload"] = setup.offload ? "optimizer" : "none";
  j["checkpoints"] = c.checkpoint.enabled ? (c.checkpoint.async ? "async" : "sync") : "on signal only";
  return j;
}

std::string levers_line(const RunSetup& setup, const Config& c) { return describe_levers(levers_json(setup, c)); }

void continue_global_batch(RunSetup& p, int64_t global_batch, int64_t from_world) {
  const int64_t per_step = p.micro_batch * p.world_size;  // sequences per micro-batch round
  if (global_batch % per_step != 0) {
    std::vector<int64_t> fit;
    for (int64_t w = 1; w <= global_batch / p.micro_batch; ++w)
      if (global_batch % (p.micro_batch * w) == 0) fit.push_back(w);
    throw ConfigError(fmt::format(
        "resume: the checkpoint was written by {} process(es) with a global batch of {} sequences per step, which {} "
        "process(es) of data.micro_batch = {} cannot split into whole micro-batches; resume with {} process(es) "
        "(a resume keeps data.micro_batch and the global batch)",
        from_world, global_batch, p.world_size, p.micro_batch, fmt::join(fit, ", ")));
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
           : checkpoint == "fp8"  ? PrecisionMode::kFp8
                                  : PrecisionMode::kFp32;
  if (warning)
    *warning = fmt::format(
        "the checkpoint trained in {}, this run asks for {}; the continuation will not match "
        "an uninterrupted run",
        checkpoint, now);
  return configured;
}

}  // namespace frugal
