// Where training and validation batches come from. A BatchSource hands out micro-batches by
// index; for the in-memory sources the batch of index i is a pure function of (seed, i), so a
// resumed run draws exactly the batches the uninterrupted run would have.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config.h"

namespace frugal {

struct Batch {
  at::Tensor x;  // (B, T) int64 inputs
  at::Tensor y;  // (B, T) int64 next-token targets
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Training micro-batch number `index` (counts every micro-batch drawn in the run).
  virtual Batch train_batch(int64_t index) = 0;
  // Validation batch number `index`; the same batches at every evaluation.
  virtual Batch val_batch(int64_t index) = 0;
  virtual std::string describe() const = 0;
  virtual int64_t train_tokens() const = 0;
  virtual int64_t val_tokens() const = 0;
  // Cross-entropy (nats/token) of predicting validation tokens from training unigram
  // frequencies: the loss a model that ignores context would reach. NaN when unknown.
  virtual double unigram_baseline() const;
  // Where the next training batch comes from, for checkpoints; null for sources whose batches
  // are a pure function of the index alone. load_state continues from such a state.
  virtual nlohmann::json state() const;
  virtual void load_state(const nlohmann::json& state);
};

// Random windows of block+1 tokens over an in-memory token buffer. With rank r of world w (data
// parallel), the rank's micro-batch i is the single-process micro-batch i * w + r: the ranks'
// micro-batches k of a step together are micro-batches k * w ... k * w + w - 1 of one process, so
// w ranks with train.accum = a consume exactly the samples of one process with accum = a * w.
class WindowSource : public BatchSource {
 public:
  // REQUIRES: both splits hold more than block tokens (throws DataError naming `what` otherwise).
  WindowSource(std::vector<int32_t> train, std::vector<int32_t> val, int64_t micro_batch,
               int64_t block, uint64_t seed, std::string what, int64_t rank = 0, int64_t world_size = 1);
  Batch train_batch(int64_t index) override;
  Batch val_batch(int64_t index) override;
  std::string describe() const override { return what_; }
  int64_t train_tokens() const override { return static_cast<int64_t>(train_.size()); }
  int64_t val_tokens() const override { return static_cast<int64_t>(val_.size()); }
  double unigram_baseline() const override;

 private:
  Batch windows(const std::vector<int32_t>& tokens, uint64_t stream);

  std::vector<int32_t> train_, val_;
  int64_t micro_batch_, block_;
  uint64_t seed_;
  int64_t rank_, world_;
  std::string what_;
};

// Byte-level tokens of a string (vocabulary 256).
std::vector<int32_t> byte_tokens(const std::string& text);
std::string bytes_to_text(const std::vector<int64_t>& tokens);

// Builds the source named by config.data.source, for rank `rank` of `world_size` data-parallel
// processes (shards: disjoint sample streams, sampler.h; in-memory sources: interleaved
// micro-batches, WindowSource). Throws ConfigError/DataError.
std::unique_ptr<BatchSource> make_batch_source(const Config& config, int64_t rank = 0,
                                               int64_t world_size = 1);

}  // namespace frugal
