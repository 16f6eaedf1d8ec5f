// Which dist.zero fits a model on N GPUs; see zero_advice.h.
#include "frugal/tune/zero_advice.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "frugal/core/errors.h"
#include "frugal/monitor/report.h"  // format_figure

namespace frugal {
namespace {
constexpr double kUsable = 0.9;  // of a GPU's memory; the rest: CUDA context, fragmentation
constexpr double kGb = 1e9;

// `gb` in the unit that fits, 3 significant digits: 834 KB, 3.34 MB, 46 GB.
std::string describe_memory(double gb) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  double x = gb * kGb;
  if (x <= 0) return "0";
  int unit = 0;
  for (; unit < 4 && x >= 999.5; ++unit) x /= 1e3;  // 999.7 MB reads 1 GB, not "1e+03 MB"
  return fmt::format("{:.3g} {}", x, kUnits[unit]);
}

// "" where train.optimizer `optimizer` takes dist.zero = `stage` (offloaded or not) on `gpus`
// processes; else the table's verdict. Muon: DataParallel refuses ZeRO-2 and 3 (its Newton-Schulz
// iteration needs whole gradients), build_optimizer the offload; torch_adamw: one process only,
// no offload (docs/distributed.md).
std::string refusal(const std::string& optimizer, int stage, bool offload, int64_t gpus) {
  if (optimizer == "muon" && (offload || (gpus > 1 && stage >= 2))) return "refused with muon";
  if (optimizer == "torch_adamw" && (offload || gpus > 1)) return "refused with torch_adamw";
  return "";
}

struct OptimizerState {
  double bytes = 0;     // the whole state: every rank's share together
  std::string counted;  // how, for the table
};

// The optimizer's whole state: AdamW's two fp32 moments (8 bytes a trainable parameter); Muon's as
// the figures measured it (one fp32 momentum for each parameter of the hidden matrices, AdamW's
// moments for the rest), else AdamW's, an upper bound.
OptimizerState optimizer_state(const PlanFigures& f, double trainable, int64_t gpus) {
  const double adamw = 8.0 * trainable;
  if (f.optimizer != "muon") return {adamw, "optimizer: AdamW's two fp32 moments, 8 bytes a trainable parameter"};
  if (f.optimizer_state_mb <= 0)
    return {adamw,
            "optimizer: Muon's state was not measured, so it is counted as AdamW's 8 bytes a trainable "
            "parameter, an upper bound (Muon keeps one fp32 momentum, 4 bytes, for each parameter of its "
            "hidden matrices)"};
  const int64_t ranks = std::max<int64_t>(1, f.optimizer_state_ranks);
  const double bytes = f.optimizer_state_mb * 1e6 * static_cast<double>(ranks);
  // 4 bytes for each of H hidden-matrix parameters, 8 for the other T - H: the state is 8 T - 4 H.
  const double hidden = std::clamp((adamw - bytes) / 4.0, 0.0, trainable);
  std::string counted = fmt::format(
      "optimizer: Muon's state as the {} measured it ({}{}): one fp32 momentum, 4 bytes a parameter, for "
      "about {} parameters of the hidden matrices, AdamW's 8 bytes for the other {}",
      f.source == "run" ? "run" : "probe", describe_memory(bytes / kGb),
      ranks > 1 ? fmt::format(", its {} ranks' shares together", ranks) : "", format_figure(hidden),
      format_figure(trainable - hidden));
  if (gpus > 1) counted += "; ZeRO-1 gives each rank whole matrices, so about 1/N of it";
  return {bytes, counted};
}

// The table's rows: every stage, one where a single GPU makes them alike; the offloaded ones only
// where nothing else fits (those the optimizer refuses named in a line instead).
void put_rows(std::ostringstream& out, const ZeroAdvice& a) {
  out << fmt::format("  {:<14} {:>10} {:>10} {:>17} {:>11} {:>10}\n", "dist.zero", "parameters", "gradients",
                     "optimizer", "activations", "total");
  std::string offload_refused;
  for (const ZeroLevel& l : a.levels) {
    if (l.offload && a.recommended >= 0) continue;  // the offloaded rows matter where nothing else fits
    if (a.gpus == 1 && l.stage > 0) continue;       // one GPU: every stage holds the same
    if (l.offload && !l.refused.empty()) {
      offload_refused = l.refused;
      continue;
    }
    const std::string label = std::to_string(l.stage) + (l.offload ? " + offload" : "");
    const std::string optimizer =
        l.offload ? fmt::format("0 (host {})", describe_memory(l.optimizer_host_gb)) : describe_memory(l.optimizer_gb);
    const std::string verdict = !l.refused.empty() ? l.refused : l.fits ? "fits" : "does not fit";
    out << fmt::format("  {:<14} {:>10} {:>10} {:>17} {:>11} {:>10}  {}\n", label, describe_memory(l.parameters_gb),
                       describe_memory(l.gradients_gb), optimizer, describe_memory(a.activations_gb),
                       describe_memory(l.total_gb), verdict);
  }
  if (a.gpus == 1) out << "  one GPU: every dist.zero holds the same (sharding divides only over several GPUs)\n";
  if (!offload_refused.empty())
    out << fmt::format("  dist.offload = \"optimizer\" (the state in host memory): {} (fused_adamw only)\n",
                       offload_refused);
}

// The lines after the rows: how the optimizer and the activations are counted, and why a stage is refused.
void put_notes(std::ostringstream& out, const ZeroAdvice& a) {
  out << "  " << a.optimizer_counted << "\n";
  out << (a.activations_measured
              ? "  activations: the probe's peak tensor memory less its state (its device, "
                "precision and data.micro_batch)\n"
              : "  activations: not measured (no peak tensor memory in the figures): not included\n");
  if (a.gpus > 1 && a.optimizer == "muon")
    out << "  muon: dist.zero = 2 and 3 shard the gradients, and its Newton-Schulz iteration needs each matrix's "
           "whole gradient (docs/distributed.md)\n";
  if (a.gpus > 1 && a.optimizer == "torch_adamw")
    out << "  torch_adamw: one process only; train.optimizer = \"fused_adamw\" or \"muon\" trains on several GPUs\n";
}

// The advice: the stage to use, or what else to try.
void put_advice(std::ostringstream& out, const ZeroAdvice& a) {
  const std::string others =
      "a smaller data.micro_batch, memory.activation_checkpointing, LoRA, more GPUs or larger ones";
  if (a.recommended >= 0 && a.gpus == 1) {
    out << "  use dist.zero = 0: it fits on the one GPU, with nothing to shard";
  } else if (a.recommended >= 0) {
    out << fmt::format("  use dist.zero = {}: the least communication that fits{}", a.recommended,
                       a.recommended == 0 ? ""
                                          : fmt::format(" (frugal launch -n {} -- train CONFIG --set dist.zero={})",
                                                        a.gpus, a.recommended));
  } else if (a.recommended_with_offload >= 0) {
    out << fmt::format(
        "  use dist.zero = {} with dist.offload = \"optimizer\": AdamW's moments{} ({} a rank) in host memory, "
        "each update on the CPU, a slower step (docs/distributed.md); or {}",
        a.recommended_with_offload, a.recommended_with_offload == 3 ? " and the fp32 master weights" : "",
        describe_memory(a.levels[static_cast<size_t>(4 + a.recommended_with_offload)].optimizer_host_gb), others);
  } else if (a.refused_but_fits >= 0) {
    out << fmt::format(
        "  no stage that {} takes fits: dist.zero = {} would, with its state, but is {}; plan again with --set "
        "train.optimizer=fused_adamw to weigh AdamW's (8 bytes a trainable parameter), or try {}",
        a.optimizer, a.refused_but_fits, a.levels[static_cast<size_t>(a.refused_but_fits)].refused, others);
  } else {
    out << "  no stage fits: try a smaller data.micro_batch (fewer activations), memory.activation_checkpointing, "
           "LoRA (lora.rank: fewer trainable parameters), more GPUs or larger ones";
  }
  if (a.levels.size() >= 4 && (a.recommended == 3 || a.recommended_with_offload == 3)) {
    out << "\n  dist.zero = 3 keeps the embeddings and the output head whole on every rank: its parameters "
           "column counts them sharded, so leave room for (1 - 1/GPUs) of their bytes (docs/distributed.md)";
    out << fmt::format(
        "\n  dist.zero = 3 starts from host memory: each rank holds the whole model ({}) there until "
        "its blocks are sharded onto the GPU, so a node needs that much host memory for each of its ranks",
        describe_memory(a.levels[3].startup_host_gb));
  }
}
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
  a.optimizer = f.optimizer;
  const double w = static_cast<double>(gpus);
  const double trainable = static_cast<double>(f.trainable_params >= 0 ? f.trainable_params : f.params);
  const double p = f.param_bytes >= 0 ? static_cast<double>(f.param_bytes) : 4.0 * static_cast<double>(f.params);
  const OptimizerState state = optimizer_state(f, trainable, gpus);
  a.optimizer_counted = state.counted;
  const double g = 4.0 * trainable, o = state.bytes;
  if (f.peak_tensor_mb > 0) {
    // The state the measured process held beside its activations (its share under ZeRO), else its
    // parameters, its gradients and its optimizer's state as measured.
    const double measured_o = f.optimizer_state_mb > 0 ? f.optimizer_state_mb * 1e6 : o;
    const double held = f.state_bytes >= 0 ? static_cast<double>(f.state_bytes) : p + g + measured_o;
    a.activations_gb = std::max(0.0, f.peak_tensor_mb * 1e6 - held) / kGb;
    a.activations_measured = true;
  }
  for (int k = 0; k <= 7; ++k) {  // stages 0-3, then 0-3 with the optimizer in host memory
    ZeroLevel l;
    l.stage = k <= 3 ? k : k - 4;
    l.offload = k > 3;
    // Stage 3 shards the trainable parameters (as fp32 masters); frozen ones stay whole. Offloaded,
    // the masters go to host memory with the moments, and the GPU keeps the shard as its gathers
    // send it: bf16 under bf16 autocast (the matrices; the few vectors stay fp32, not counted).
    const bool host_master = l.offload && l.stage >= 3;
    const double shard = (host_master && f.bf16 ? 2.0 : 4.0) * trainable / w;
    l.parameters_gb = (l.stage >= 3 ? p - 4.0 * trainable + shard : p) / kGb;
    l.gradients_gb = (l.stage >= 2 ? g / w : g) / kGb;
    (l.offload ? l.optimizer_host_gb : l.optimizer_gb) =
        ((l.stage >= 1 ? o / w : o) + (host_master ? 4.0 * trainable / w : 0.0)) / kGb;
    l.total_gb = l.parameters_gb + l.gradients_gb + l.optimizer_gb + a.activations_gb;
    // Stage 3 starts from host memory (each block copied to the GPU and sharded in turn); the
    // others move the whole model to the GPU.
    l.startup_gb = l.stage >= 3 ? l.parameters_gb : p / kGb;
    l.startup_host_gb = l.stage >= 3 ? p / kGb : 0.0;
    l.fits = l.total_gb <= a.usable_gb && l.startup_gb <= a.usable_gb;
    l.refused = refusal(f.optimizer, l.stage, l.offload, gpus);
    int& pick = l.offload ? a.recommended_with_offload : a.recommended;
    if (l.fits && l.refused.empty() && pick < 0) pick = l.stage;
    if (l.fits && !l.refused.empty() && !l.offload && a.refused_but_fits < 0) a.refused_but_fits = l.stage;
    a.levels.push_back(l);
  }
  if (a.recommended >= 0) a.recommended_with_offload = -1;  // advised only where nothing else fits
  if (a.recommended >= 0 || a.recommended_with_offload >= 0) a.refused_but_fits = -1;
  return a;
}

std::string ZeroAdvice::table() const {
  std::ostringstream out;
  out << fmt::format(
      "memory per GPU, {} GPU(s) of {} ({} usable: 90%, the rest for the CUDA context and fragmentation):\n", gpus,
      describe_memory(memory_gb), describe_memory(usable_gb));
  put_rows(out, *this);
  put_notes(out, *this);
  put_advice(out, *this);
  return out.str();
}

nlohmann::json ZeroAdvice::to_json() const {
  auto stage_or_null = [](int s) { return s >= 0 ? nlohmann::json(s) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"gpus", gpus},
                      {"memory_gb", memory_gb},
                      {"usable_gb", usable_gb},
                      {"activations_gb", activations_gb},
                      {"activations_measured", activations_measured},
                      {"optimizer", optimizer},
                      {"optimizer_counted", optimizer_counted},
                      {"recommended", stage_or_null(recommended)},
                      {"recommended_with_offload", stage_or_null(recommended_with_offload)},
                      {"refused_but_fits", stage_or_null(refused_but_fits)}};
  for (const ZeroLevel& l : levels)
    j["levels"].push_back({{"stage", l.stage},
                           {"offload", l.offload},
                           {"parameters_gb", l.parameters_gb},
                           {"gradients_gb", l.gradients_gb},
                           {"optimizer_gb", l.optimizer_gb},
                           {"optimizer_host_gb", l.optimizer_host_gb},
                           {"total_gb", l.total_gb},
                           {"startup_gb", l.startup_gb},
                           {"startup_host_gb", l.startup_host_gb},
                           {"fits", l.fits},
                           {"refused", l.refused.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.refused)}});
  return j;
}

}  // namespace frugal
