// Deterministic, seeded, epoch-aware sample order with a tiny serialisable cursor.
//
// Epoch e visits every sample exactly once in the order perm_e(0), perm_e(1), ...; perm_e is a
// bijection on [0, n) computed in O(1) per position (a keyed Feistel network with cycle
// walking), so no permutation table is stored and any position can be jumped to directly.
// Rank r of world_size w takes the global positions p = r, r + w, r + 2w, ... of each epoch:
// ranks are disjoint and together cover the epoch (rank r gets ceil((n - r) / w) samples).
//
// A rank's stream is the concatenation of its epochs, so its k-th sample is a pure function of
// (seed, rank, world_size, k): a resumed run that restores the cursor continues exactly.
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace frugal {

// Where a rank stands in its sample stream: `position` samples into `epoch`.
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
  int64_t per_epoch() const { return per_epoch_; }  // samples this rank sees per epoch
  // The global sample index at `cursor` (REQUIRES position < per_epoch()).
  int64_t sample(const SampleCursor& cursor) const;
  // The cursor `k` samples after `c` (crossing epochs as needed).
  SampleCursor advance(const SampleCursor& c, int64_t k) const;
  // The cursor of the rank's k-th sample from the very start.
  SampleCursor at(int64_t k) const { return advance({}, k); }
  // perm_epoch(p): the global permutation of [0, n) for one epoch.
  int64_t permute(int64_t epoch, int64_t p) const;

 private:
  int64_t n_, rank_, world_, per_epoch_;
  uint64_t seed_;
  bool shuffle_;
  int half_bits_;  // the Feistel domain is 2^(2 * half_bits_) >= n
};

}  // namespace frugal
