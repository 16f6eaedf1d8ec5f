// A step's parts: chunk j of `chunks` equal row blocks of a fetched micro-batch (the out-of-memory
// back-off's split), shared by the eager step (train_step.cpp) and the CUDA graph's (train_step_graph.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/core/cuda_graph.h"
#include "frugal/data/batch_source.h"
#include "frugal/train/train_step.h"

namespace frugal {

// The graph and its static buffers: every part's batch (micro-batch k, chunk j) on the device,
// where each step's data is copied before the replay, and the step's outputs. Defined here, where
// train_step.cpp sees it: its constructor destroys `graph_` when it throws.
struct TrainStep::Graph {
  device::CudaGraph graph;
  std::vector<Batch> inputs;
  at::Tensor loss_sum, grad_norm;
  at::Tensor scale, inv_scale, found_inf;  // loss scaling: written before each replay; its verdict
};

inline Batch step_part(const Batch& b, int64_t j, int64_t chunks) {
  if (chunks == 1) return b;
  const int64_t rows = b.x.size(0) / chunks;
  Batch part = b;
  part.x = b.x.narrow(0, j * rows, rows);
  if (b.y.defined()) part.y = b.y.narrow(0, j * rows, rows);
  if (b.pos.defined()) part.pos = b.pos.narrow(0, j * rows, rows);
  return part;
}

}  // namespace frugal
