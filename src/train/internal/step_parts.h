// A step's parts: chunk j of `chunks` equal row blocks of a fetched micro-batch (the out-of-memory
// back-off's split), shared by the eager step (train_step.cpp) and the CUDA graph's (train_step_graph.cpp).
#pragma once

#include <cstdint>

#include "frugal/data/batch_source.h"

namespace frugal {

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
