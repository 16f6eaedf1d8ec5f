// Which dist.zero a model needs on a number of GPUs of a given memory (`frugal plan --gpus N
// --gpu-memory-gb G`; docs/plan.md, "Memory per GPU"). From the figures a plan measured (the
// model's parameter bytes and trainable parameters, the optimizer's state, the probe's peak tensor
// memory), what one rank holds at each ZeRO stage:
//
//   stage   parameters   gradients (fp32)   optimizer state (AdamW: 2 x fp32 moments, O = 8 T)
//   0       P            4 T                O
//   1       P            4 T                O / W
//   2       P            4 T / W            O / W
//   3       P - 4 T (1 - 1/W)   4 T / W     O / W      (the trainable fp32 masters sharded)
//
// With train.optimizer = "muon", O is the state the figures measured (one fp32 momentum buffer, 4
// bytes a parameter, for the hidden matrices; AdamW's moments for the rest), or AdamW's 8 T, an
// upper bound, where none was measured; ZeRO-1 gives each rank whole matrices, about O / W.
//
// plus the activations the probe measured (its peak tensor memory less its whole state, at its
// own device, precision and data.micro_batch). A stage fits when that total stays within 90% of
// the GPU's memory (the rest for the CUDA context and the caching allocator's fragmentation); the
// advice is the lowest stage that fits (the least communication) among those the optimizer takes:
// Muon refuses ZeRO-2 and 3 and the offload, torch_adamw takes one process only and no offload
// (docs/distributed.md). When none does, the stages with dist.offload = "optimizer" (the state in
// host memory: a slower step) are weighed the same way, and the lowest that fits is advised with
// it; offloaded stage 3 moves its masters (4 T / W) to host memory as well, the GPU keeping their
// shard in bf16 (2 T / W) where the figures trained in bf16 (PlanFigures::bf16). With one GPU every stage holds the
// same. Stage 3 keeps the parameters outside the blocks (embeddings, head) whole on every rank, which the table counts
// as sharded; its text says so. Stage 3 also starts from host memory: every rank holds the whole model (P) there once
// at start-up, while its GPU holds only its shards (docs/distributed.md); the text names that too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/tune/plan.h"

namespace frugal {

struct ZeroLevel {
  int stage = 0;
  bool offload = false;  // dist.offload = "optimizer": the state in host memory (optimizer_host_gb)
  // On the GPU, as summary.json's state_bytes_per_rank counts them (optimizer_gb is 0 with the
  // offload); optimizer_host_gb is its optimizer_in_host_memory.
  double parameters_gb = 0, gradients_gb = 0, optimizer_gb = 0, optimizer_host_gb = 0;
  double total_gb = 0;  // the three on the GPU and the activations
  // What a rank holds on its GPU at start-up: the whole model (P) at stages 0-2; at stage 3 its
  // shards as parameters_gb counts them (the model waits in host memory until each block is copied
  // and sharded; as in training, the parts kept whole and one block come on top), while
  // startup_host_gb (P) is in each rank's host memory.
  double startup_gb = 0, startup_host_gb = 0;
  bool fits = false;    // total_gb and startup_gb within the usable memory
  std::string refused;  // "" where the optimizer takes this stage; else "refused with muon" (or torch_adamw)
};

struct ZeroAdvice {
  int64_t gpus = 1;
  double memory_gb = 0;
  double usable_gb = 0;       // 90% of memory_gb
  double activations_gb = 0;  // as the probe measured them; 0 where unknown
  bool activations_measured = false;
  std::string optimizer;          // train.optimizer as the figures name it ("" = unknown: as fused_adamw)
  std::string optimizer_counted;  // how the optimizer column is counted (measured or estimated)
  std::vector<ZeroLevel> levels;  // stages 0..3, then 0..3 with the optimizer offloaded
  int recommended = -1;           // the lowest stage that fits and is not refused; -1 = none
  // Where none does: the lowest stage that fits with dist.offload = "optimizer"; else -1.
  int recommended_with_offload = -1;
  // Where neither: the lowest stage that would fit but the optimizer refuses; else -1.
  int refused_but_fits = -1;
  std::string table() const;
  nlohmann::json to_json() const;
};

// REQUIRES: gpus >= 1, memory_gb > 0; figures.params >= 0 (ConfigError otherwise).
ZeroAdvice zero_advice(const PlanFigures& figures, int64_t gpus, double memory_gb);

}  // namespace frugal
