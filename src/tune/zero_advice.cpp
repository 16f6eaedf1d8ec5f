// Which dist.zero fits a model on N GPUs; see zero_advice.h.
#include "frugal/tune/zero_advice.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "frugal/core/errors.h"

namespace frugal {
namespace {
constexpr double kUsable = 0.9;  // of a GPU's memory; the rest: CUDA context, fragmentation
constexpr double kGb = 1e9;
}  // namespace

ZeroAdvice zero_advice(const PlanFigures& f, int64_t gpus, double memory_gb) {
  FRUGAL_CHECK(gpus >= 1, ConfigError, fmt::format("--gpus must be at least 1, got {}", gpus));
  FRUGAL_CHECK(memory_gb > 0, ConfigError, fmt::format("--gpu-memory-gb must be positive, got {}", memory_gb));
  FRUGAL_CHECK(f.params >= 0, ConfigError,
               "the plan's figures do not say how many parameters the model has (summary.json has no \"params\"); "
               "probe the run instead of reading it with --from");
  ZeroAdvice a;
  a.gpus = gpus;
  a.memory_gb = memory_gb;
  a.usable_gb = kUsable * memory_gb;
  const double w = static_cast<double>(gpus);
  const double trainable = static_cast<double>(f.trainable_params >= 0 ? f.trainable_params : f.params);
  const double p = f.param_bytes >= 0 ? static_cast<double>(f.param_bytes) : 4.0 * static_cast<double>(f.params);
  const double g = 4.0 * trainable, o = 8.0 * trainable;
  if (f.peak_tensor_mb > 0) {
    // The probe's whole state: its parameters, its gradients and its optimizer's state as measured.
    const double measured_o = f.optimizer_state_mb > 0 ? f.optimizer_state_mb * 1e6 : o;
    a.activations_gb = std::max(0.0, f.peak_tensor_mb * 1e6 - (p + g + measured_o)) / kGb;
    a.activations_measured = true;
  }
  for (int k = 0; k <= 7; ++k) {  // stages 0-3, then 0-3 with the optimizer in host memory
    ZeroLevel l;
    l.stage = k <= 3 ? k : k - 4;
    l.offload = k > 3;
    // Stage 3 shards the trainable parameters (as fp32 masters); frozen ones stay whole.
    l.parameters_gb = (l.stage >= 3 ? p - 4.0 * trainable * (1.0 - 1.0 / w) : p) / kGb;
    l.gradients_gb = (l.stage >= 2 ? g / w : g) / kGb;
    l.optimizer_gb = (l.stage >= 1 ? o / w : o) / kGb;
    l.total_gb = l.parameters_gb + l.gradients_gb + (l.offload ? 0.0 : l.optimizer_gb) + a.activations_gb;
    // Stage 3 starts from host memory (each block copied to the GPU and sharded in turn); the
    // others move the whole model to the GPU.
    l.startup_gb = l.stage >= 3 ? l.parameters_gb : p / kGb;
    l.startup_host_gb = l.stage >= 3 ? p / kGb : 0.0;
    l.fits = l.total_gb <= a.usable_gb && l.startup_gb <= a.usable_gb;
    int& pick = l.offload ? a.recommended_with_offload : a.recommended;
    if (l.fits && pick < 0) pick = l.stage;
    a.levels.push_back(l);
  }
  if (a.recommended >= 0) a.recommended_with_offload = -1;  // advised only where nothing else fits
  return a;
}

std::string ZeroAdvice::table() const {
  std::ostringstream out;
  out << fmt::format(
      "memory per GPU, {} GPU(s) of {:.4g} GB ({:.4g} GB usable: 90%, the rest for the CUDA "
      "context and fragmentation):\n",
      gpus, memory_gb, usable_gb);
  out << fmt::format("  {:<14} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "dist.zero", "parameters", "gradients",
                     "optimizer", "activations", "total");
  for (const ZeroLevel& l : levels) {
    if (l.offload && recommended >= 0) continue;  // the offloaded rows matter where nothing else fits
    const std::string label = std::to_string(l.stage) + (l.offload ? " + offload" : "");
    const std::string verdict =
        std::string(l.fits ? "fits" : "does not fit") + (l.offload ? " (optimizer in host memory)" : "");
    out << fmt::format("  {:<14} {:>9.3g} GB {:>9.3g} GB {:>9.3g} GB {:>9.3g} GB {:>9.3g} GB  {}\n", label,
                       l.parameters_gb, l.gradients_gb, l.optimizer_gb, activations_gb, l.total_gb, verdict);
  }
  out << (activations_measured ? "  activations: the probe's peak tensor memory less its state (its device, "
                                 "precision and data.micro_batch)\n"
                               : "  activations: not measured (no peak tensor memory in the figures): not included\n");
  if (recommended >= 0) {
    out << fmt::format(
        "  use dist.zero = {}: the least communication that fits{}", recommended,
        recommended == 0 ? ""
                         : fmt::format(" (frugal launch -n {} -- train CONFIG --set dist.zero={})", gpus, recommended));
  } else if (recommended_with_offload >= 0) {
    out << fmt::format(
        "  use dist.zero = {} with dist.offload = \"optimizer\": AdamW's moments ({:.3g} GB a rank) in host memory, "
        "each update on the CPU, a slower step (docs/distributed.md); or ",
        recommended_with_offload, levels[static_cast<size_t>(4 + recommended_with_offload)].optimizer_gb);
    out << "a smaller data.micro_batch, memory.activation_checkpointing, LoRA, more GPUs or larger ones";
  } else {
    out << "  no stage fits: try a smaller data.micro_batch (fewer activations), memory.activation_checkpointing, "
           "LoRA (lora.rank: fewer trainable parameters), more GPUs or larger ones";
  }
  if (levels.size() >= 4 && (recommended == 3 || recommended_with_offload == 3)) {
    out << "\n  dist.zero = 3 keeps the embeddings and the output head whole on every rank: its parameters "
           "column counts them sharded, so leave room for (1 - 1/GPUs) of their bytes (docs/distributed.md)";
    out << fmt::format(
        "\n  dist.zero = 3 starts from host memory: each rank holds the whole model ({:.3g} GB) there until "
        "its blocks are sharded onto the GPU, so a node needs that much host memory for each of its ranks",
        levels[3].startup_host_gb);
  }
  return out.str();
}

nlohmann::json ZeroAdvice::to_json() const {
  nlohmann::json j = {
      {"gpus", gpus},
      {"memory_gb", memory_gb},
      {"usable_gb", usable_gb},
      {"activations_gb", activations_gb},
      {"activations_measured", activations_measured},
      {"recommended", recommended >= 0 ? nlohmann::json(recommended) : nlohmann::json(nullptr)},
      {"recommended_with_offload",
       recommended_with_offload >= 0 ? nlohmann::json(recommended_with_offload) : nlohmann::json(nullptr)}};
  for (const ZeroLevel& l : levels)
    j["levels"].push_back({{"stage", l.stage},
                           {"offload", l.offload},
                           {"parameters_gb", l.parameters_gb},
                           {"gradients_gb", l.gradients_gb},
                           {"optimizer_gb", l.optimizer_gb},
                           {"total_gb", l.total_gb},
                           {"startup_gb", l.startup_gb},
                           {"startup_host_gb", l.startup_host_gb},
                           {"fits", l.fits}});
  return j;
}

}  // namespace frugal
