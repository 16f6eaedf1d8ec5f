// Muon for the hidden weight matrices, AdamW for the rest: train.optimizer = "muon".
//
// Muon (Jordan et al., "Muon: an optimizer for hidden layers in neural networks") keeps a momentum
// buffer per matrix and replaces the update by its nearest semi-orthogonal matrix, computed by a
// quintic Newton-Schulz iteration. The maths are torch.optim.Muon's (PyTorch 2.9+), step for step:
//   B <- B + (1 - momentum) (G - B)                      (the buffer as an average of gradients)
//   U <- G + momentum (B - G)  (nesterov) or U <- B
//   O <- NS5(U / max(|U|_F, eps)), in bf16 or fp32, on the wide side of U
//   W <- W (1 - lr x weight_decay) - lr x adjust(rows, cols) x O
// where adjust is sqrt(max(1, rows / cols)) ("original", Keller Jordan's) or 0.2 sqrt(max(rows,
// cols)) ("match_rms_adamw", Moonshot's: the update's RMS matches AdamW's, so train.lr and
// train.weight_decay carry over from an AdamW run). A test checks the update against the venv's
// torch.optim.Muon on the same gradients.
//
// Which tensors Muon takes (muon_param_groups): every 2-D parameter except an embedding's (a
// torch::nn::Embedding module's weight, or a parameter named like one: wte, wpe, embed, lm_head,
// head). The embeddings, gains and biases go to frugal's FusedAdamW with train.lr, beta1, beta2.
// Both use the schedule's learning rate of the step.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/config.h"
#include "frugal/train/optimizer.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace frugal {

// The zeroth power of a 2-D `update` (or of each matrix of a stack [k, rows, cols]) by `steps`
// quintic Newton-Schulz iterations with torch.optim.Muon's coefficients (3.4445, -4.7750,
// 2.0315), computed in bf16 (`bf16`) or fp32, returned in that dtype. A matrix whose long side is
// over 1.5 times its short side takes the iteration's Gram form (the same result in exact
// arithmetic, fewer multiply-adds; see muon.cpp).
at::Tensor newton_schulz(const at::Tensor& update, int steps, double eps, bool bf16);

// The learning rate Muon applies to a rows x cols matrix at schedule rate `lr`.
double muon_lr(double lr, MuonLrAdjust adjust, int64_t rows, int64_t cols);

// Whether a parameter named `name` (as named_parameters spells it) of shape rank `dim` is a hidden
// matrix Muon takes, by name alone (a TorchScript module, whose module types are not known here).
bool muon_takes(const std::string& name, int64_t dim);

// The groups train.optimizer = "muon" trains `model` with: the hidden matrices (ParamGroup::muon,
// `weight_decay`), then the other tensors of rank >= 2 (AdamW, `weight_decay`), then the rest
// (AdamW, no decay). ConfigError when the model has no hidden matrix at all.
std::vector<ParamGroup> muon_param_groups(torch::nn::Module& model, double weight_decay);

// Muon on the groups marked `muon`, FusedAdamW on the others, the Newton-Schulz iterations in
// bf16 where `bf16` (muon_uses_bf16; the run decides it once, RunSetup::muon_bf16). Matrices of
// one shape share one momentum buffer and one batched Newton-Schulz iteration. Built through
// build_optimizer (train/optimizer.h), which also hands it the sharding below.
//
// Sharded (dist.zero = 1, with data parallel's OptimizerSharding): each rank owns whole matrices (the
// largest first, to the least-loaded rank), keeps their momentum only and runs their
// Newton-Schulz iteration only, then every matrix is broadcast from its owner, so the iteration's
// work is split across the ranks too. `adamw` steps the other groups (ZeRO-1's sharded AdamW).
// state_tensors() gathers every buffer (a collective) so a checkpoint holds the whole state and
// resumes sharded or not; load_state() takes this rank's matrices.
struct MuonShards {
  int64_t rank = 0, world = 1;
  std::function<void(at::Tensor& t, int64_t root)> broadcast;  // in place, called on every rank
  std::unique_ptr<Optimizer> adamw;
};
std::unique_ptr<Optimizer> make_muon(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool bf16,
                                     MuonShards shards = {});

// Whether train.muon_precision runs the iterations in bf16 on `device`: "bf16" always, "fp32"
// never, "auto" on a GPU and on a CPU that multiplies bf16 natively (AVX-512 BF16, AMX), where
// bf16 products are faster than fp32's; emulated elsewhere, they are slower.
bool muon_uses_bf16(MuonPrecision precision, c10::Device device);

}  // namespace frugal
