// EpochSampler; see sampler.h. The Feistel network: split x into halves (L, R) of half_bits_
// bits; each of 4 rounds maps (L, R) -> (R, L ^ F(R)) with F a SplitMix64 hash keyed by
// (seed, epoch, round). Each round is a bijection, so the network permutes [0, 4^half_bits);
// "cycle walking" re-applies it until the value falls in [0, n), which permutes [0, n). The
// domain is at most 4n, so the expected number of walks is below 4.
#include "frugal/data/sampler.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/data/rng.h"

namespace frugal {

nlohmann::json cursor_to_json(const SampleCursor& c) {
  return nlohmann::json{{"epoch", c.epoch}, {"position", c.position}};
}

SampleCursor cursor_from_json(const nlohmann::json& j) {
  try {
    SampleCursor c{j.at("epoch").get<int64_t>(), j.at("position").get<int64_t>()};
    if (c.epoch < 0 || c.position < 0) throw DataError("negative field");
    return c;
  } catch (const std::exception& e) {
    throw DataError(
        fmt::format("malformed data cursor {}: {} (expected {{\"epoch\": E, \"position\": P}})", j.dump(), e.what()));
  }
}

EpochSampler::EpochSampler(int64_t n, uint64_t seed, int64_t rank, int64_t world_size, bool shuffle)
    : n_(n), rank_(rank), world_(world_size), seed_(seed), shuffle_(shuffle) {
  if (n <= 0) throw DataError("the dataset holds no samples");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw ConfigError(fmt::format("rank {} is outside [0, world_size = {})", rank, world_size));
  if (n < world_size) throw DataError(fmt::format("{} samples cannot be shared by {} ranks", n, world_size));
  half_bits_ = 1;
  while ((int64_t{1} << (2 * half_bits_)) < n_) ++half_bits_;
}

int64_t EpochSampler::permute(int64_t epoch, int64_t p) const {
  if (!shuffle_) return p;
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t x = static_cast<uint64_t>(p);
  do {
    uint64_t l = x >> half_bits_, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = derive_seed(seed_, static_cast<uint64_t>(epoch) * 8 + round, r) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half_bits_) | r;
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

int64_t EpochSampler::before(int64_t epoch) const {
  const int64_t places = epoch * n_;  // places of the global stream before the epoch
  return places > rank_ ? (places - rank_ + world_ - 1) / world_ : 0;
}

SampleCursor EpochSampler::at(int64_t k) const {
  const int64_t epoch = (k * world_ + rank_) / n_;
  return {epoch, k - before(epoch)};
}

int64_t EpochSampler::sample(const SampleCursor& c) const {
  const int64_t place = index_of(c) * world_ + rank_;
  return permute(c.epoch, place - c.epoch * n_);
}

MicroBatchCursor::MicroBatchCursor(const EpochSampler& sampler, int64_t micro_batch)
    : sampler_(sampler), micro_batch_(micro_batch) {
  if (micro_batch < 1) throw ConfigError(fmt::format("micro-batch of {} samples; it must be at least 1", micro_batch));
}

std::vector<int64_t> MicroBatchCursor::samples(int64_t k) const {
  const SampleCursor start = first(k);
  std::vector<int64_t> out(static_cast<size_t>(micro_batch_));
  for (int64_t i = 0; i < micro_batch_; ++i) out[static_cast<size_t>(i)] = sampler_.sample(sampler_.advance(start, i));
  return out;
}

nlohmann::json MicroBatchCursor::state(int64_t k) const { return cursor_to_json(first(k)); }

int64_t MicroBatchCursor::batch_of(const nlohmann::json& state, const char* unit) const {
  const SampleCursor c = cursor_from_json(state);
  const int64_t k = sampler_.index_of(c);
  if (c.position >= sampler_.per_epoch(c.epoch) || k % micro_batch_ != 0)
    throw DataError(
        fmt::format("data cursor {} does not fall on a batch boundary of this dataset "
                    "(micro_batch {}, {} {} per epoch); was it saved with other "
                    "data settings?",
                    state.dump(), micro_batch_, sampler_.per_epoch(c.epoch), unit));
  return k / micro_batch_;
}

}  // namespace frugal
