// Deterministic, seeded, epoch-aware sample order with a tiny serialisable cursor.
//
// Epoch e visits every sample exactly once in the order perm_e(0), perm_e(1), ...; perm_e is a
// bijection on [0, n) computed in O(1) per position (a keyed Feistel network with cycle
// walking), so no permutation table is stored and any position can be jumped to directly.
//
// The global stream is the epochs one after the other: place q is perm_{q / n}(q % n). Rank r of
// world_size w takes the places r, r + w, r + 2w, ... of the global stream, across epoch
// boundaries: its k-th sample is place k * w + r. So ranks are disjoint and together cover every
// epoch, and the places k * w + r of ranks r < w for k in [a, b) are exactly the places
// [a * w, b * w): the samples of a data-parallel step are the single process's samples of that
// step for any world size, which is what lets a run resume on another number of processes
// (docs/distributed.md, "Elastic resume"). A rank sees floor or ceil of n / w samples of an epoch.
//
// A rank's k-th sample is a pure function of (seed, rank, world_size, k): a resumed run continues
// exactly.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace frugal {

// Where a rank stands in its sample stream: `position` of its samples into `epoch`.
struct SampleCursor {
  int64_t epoch = 0;
  int64_t position = 0;
  bool operator==(const SampleCursor& o) const { return epoch == o.epoch && position == o.position; }
};
nlohmann::json cursor_to_json(const SampleCursor& c);
SampleCursor cursor_from_json(const nlohmann::json& j);  // throws DataError on a malformed cursor

class EpochSampler {
 public:
  // REQUIRES: n > 0, 0 <= rank < world_size, n >= world_size (ConfigError otherwise).
  EpochSampler(int64_t n, uint64_t seed, int64_t rank = 0, int64_t world_size = 1, bool shuffle = true);
  int64_t dataset_size() const { return n_; }
  // Samples this rank sees in `epoch` (the same for every epoch when n is a multiple of w).
  int64_t per_epoch(int64_t epoch = 0) const { return before(epoch + 1) - before(epoch); }
  // The global sample index at `cursor` (REQUIRES position < per_epoch(epoch)).
  int64_t sample(const SampleCursor& cursor) const;
  // The cursor `k` samples after `c` (crossing epochs as needed).
  SampleCursor advance(const SampleCursor& c, int64_t k) const { return at(index_of(c) + k); }
  // The cursor of the rank's k-th sample from the very start, and back.
  SampleCursor at(int64_t k) const;
  int64_t index_of(const SampleCursor& c) const { return before(c.epoch) + c.position; }
  // perm_epoch(p): the global permutation of [0, n) for one epoch.
  int64_t permute(int64_t epoch, int64_t p) const;

 private:
  // This rank's samples in the epochs before `epoch`: its places below epoch * n.
  int64_t before(int64_t epoch) const;

  int64_t n_, rank_, world_;
  uint64_t seed_;
  bool shuffle_;
  int half_bits_;  // the Feistel domain is 2^(2 * half_bits_) >= n
};

// A rank's sample stream cut into micro-batches of `micro_batch` consecutive samples: micro-batch
// k holds the rank's samples [k * micro_batch, (k + 1) * micro_batch). The record and shard
// sources both read their training batches and their checkpointed data state through it.
class MicroBatchCursor {
 public:
  MicroBatchCursor(const EpochSampler& sampler, int64_t micro_batch);
  const EpochSampler& sampler() const { return sampler_; }
  // The cursor of micro-batch k's first sample.
  SampleCursor first(int64_t k) const { return sampler_.at(k * micro_batch_); }
  // The global sample indices of micro-batch k, in stream order.
  std::vector<int64_t> samples(int64_t k) const;
  // {"epoch": E, "position": P}: the cursor of micro-batch k (a source's state()).
  nlohmann::json state(int64_t k) const;
  // The micro-batch a state() names. DataError when it is malformed or does not fall on a
  // micro-batch boundary of this stream (saved with other data settings); `unit` names the
  // samples in that message ("samples", "records").
  int64_t batch_of(const nlohmann::json& state, const char* unit) const;

 private:
  EpochSampler sampler_;
  int64_t micro_batch_;
};

}  // namespace frugal
