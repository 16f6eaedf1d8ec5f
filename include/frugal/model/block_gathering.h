// Who keeps a model's blocks' parameters between uses (dist.zero = 3, docs/distributed.md). A
// model that shards by block calls need(i) before block i's forward and again before its
// backward, and done(i) after each (CausalLmImpl::set_block_gathering), and prefetches the block
// it needs next; dist/zero_adamw.h makes the parameters whole in need and frees them in done.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace frugal {

struct BlockGathering {
  // need(i) makes block i's parameters whole on this rank: a collective, which every rank calls in
  // the same order. done(i) lets them go again. prefetch(i) starts gathering block i, the one the
  // model needs next (the next block in the forward, the previous one in the backward), so its
  // communication overlaps the current block's compute; the need(i) that follows waits for it.
  std::function<void(size_t block)> need, done, prefetch;
  // false: a block whose forward records a backward stays whole until that backward has run (no
  // done(i) after the forward, so the backward's need(i) finds it whole): one gather a block and
  // micro-batch instead of two, every such block whole at the forward's end (dist.reshard_after_forward).
  bool reshard_after_forward = true;
};

// A model's blocks as ZeRO-3 shards them: each block's parameters, in block order, and the
// weights of the blocks' products, which the model reads through working_weight()
// (model/working_weights.h) under autocast, so that they may be gathered as a bf16 copy alone.
struct BlockParameters {
  std::vector<std::vector<at::Tensor>> blocks;
  std::vector<at::Tensor> product_weights;
};

// Installs `gathering` around a model's blocks and returns them (TaskHooks::gather_blocks).
using GatherBlocksFn = std::function<BlockParameters(std::shared_ptr<BlockGathering> gathering)>;

}  // namespace frugal
