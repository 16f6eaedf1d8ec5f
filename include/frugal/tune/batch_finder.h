// The batch-size finder: the largest micro-batch whose peak memory fits a budget, found by
// measuring, with the global batch kept by adjusting gradient accumulation.
//
// What a probe measures (probe_training_memory): one full training step of the configured model
// (forward, backward, optimizer, with the configured precision, activation checkpointing and
// optimizer), then an evaluation forward pass and a checkpoint snapshot while the gradients are
// still alive: the three peaks of a real run, not only the step's (finders that probe the step
// alone pick sizes that later run out of memory at the first evaluation or save).
//
//   CPU:  the budget is [memory] limit_mb (or the cgroup limit); the counting allocator
//         (core/memory.h) gives the exact peak of live tensor bytes, and a probe fits when
//         peak <= (1 - tune.memory_margin) x budget. The allocator also enforces the budget, so a
//         probe that overshoots throws the out-of-memory error instead of swapping.
//   CUDA: the budget is what the device has free; a probe fits when it raises no out-of-memory
//         error, and the margin is taken off the largest size that fitted.
//
// Search (search_largest_batch, pure): double from 1 until a probe fails or max is reached,
// then bisect between the last fit and the first failure. Needs fits(n) to imply fits(m < n).
//
// Cache: results are kept in batch_finder.json under $FRUGAL_CACHE_DIR, else
// $XDG_CACHE_HOME/frugal, else ~/.cache/frugal, keyed by model shape, device, precision, sequence
// length, recompute setting, optimizer, budget, margin and LibTorch version (docs/tuning.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

struct ProbeOutcome {
  bool fits = false;
  int64_t peak_bytes = 0;  // measured peak (0 when unknown, e.g. after an out-of-memory error)
  bool out_of_memory = false;
};
using BatchProbe = std::function<ProbeOutcome(int64_t micro_batch)>;

struct ProbeRecord {
  int64_t micro_batch = 0;
  ProbeOutcome outcome;
};

struct BatchSearch {
  int64_t largest = 0;              // 0 = not even one sequence fits
  std::vector<ProbeRecord> probes;  // in the order they ran
};

// REQUIRES: max >= 1.
BatchSearch search_largest_batch(const BatchProbe& probe, int64_t max);

// The largest divisor of global_batch that is <= max_micro (>= 1), and the accumulation that
// keeps global_batch: {micro_batch, accum}.
std::pair<int64_t, int64_t> split_global_batch(int64_t global_batch, int64_t max_micro);

// The memory budget the finder works against on config.run.device; bytes = 0 when there is none
// (CPU without memory.limit_mb or a cgroup limit). `source` says where it came from.
struct MemoryBudget {
  int64_t bytes = 0;
  std::string source;
};
MemoryBudget memory_budget(const Config& config);

// One probe of `config` at `micro_batch` (see the file comment). budget_bytes = 0 on CUDA means
// "whatever is free". Restores the global RNG afterwards.
ProbeOutcome probe_training_memory(const Config& config, int64_t micro_batch, int64_t budget_bytes);

struct FinderResult {
  int64_t largest = 0;       // largest micro-batch that fits with the margin
  int64_t micro_batch = 0;   // chosen: the largest divisor of global_batch <= largest
  int64_t accum = 0;         // global_batch / micro_batch
  int64_t global_batch = 0;  // the configured global batch (kept)
  int64_t peak_bytes = 0;    // measured at `largest` (CPU)
  MemoryBudget budget;
  bool from_cache = false;
  std::string cache_key;
  std::vector<ProbeRecord> probes;
  double seconds = 0;
  std::string describe() const;  // one line for the console and the tune table
};

// Runs the finder for `config` (REQUIRES a budget: memory_budget(config).bytes > 0 or CUDA;
// throws ConfigError otherwise). `progress` receives a line per probe.
FinderResult find_batch_size(const Config& config, const std::function<void(const std::string&)>& progress = nullptr);

// The cache file used (see the file comment).
std::string batch_finder_cache_path();

}  // namespace frugal
