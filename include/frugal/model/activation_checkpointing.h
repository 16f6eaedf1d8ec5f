// Activation checkpointing: run a function without keeping its intermediate activations, and
// recompute them during backward. Implemented as a custom autograd function that saves only the
// input, the parameters, the RNG state (so dropout recomputes the same mask) and the autocast
// and fp8 state (model/fp8.h; so the recompute runs in the same precision as the forward did).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

using CheckpointedFn = std::function<at::Tensor(const at::Tensor&)>;

// y = fn(x), with fn's activations dropped and recomputed in backward. `params` are the
// parameters fn uses (they receive gradients). Outside grad mode this is just fn(x).
at::Tensor checkpointed(const CheckpointedFn& fn, const at::Tensor& x, const std::vector<at::Tensor>& params);

// Which of `layers` blocks to checkpoint for memory.activation_checkpointing (none, every block, or
// blocks 0, N, 2N, ...), the last block excepted: its activations are the first backward needs,
// so dropping them would only add a recompute without lowering the peak.
std::vector<bool> checkpoint_plan(const ActivationCheckpointing& spec, int64_t layers);

}  // namespace frugal
