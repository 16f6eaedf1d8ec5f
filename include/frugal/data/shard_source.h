// The BatchSource for `data.source = "shards:DIR"`: next-token windows over a prepared token
// dataset (token_dataset.h), in a seeded epoch order (sampler.h), built ahead of the trainer by
// worker threads (prefetch_loader.h).
//
// Samples: the training stream of N tokens is cut into W = (N - 1) / block windows; window w is
// tokens [w * block, w * block + block + 1), i.e. inputs and their next-token targets. Every epoch
// visits each window once. Training batch k holds the rank's samples k * B ... k * B + B - 1 of
// its epoch-after-epoch stream, so batch k is a pure function of (seed, rank, world_size, k), for
// any worker count. Validation batch i holds windows i * B ... (i + 1) * B - 1 (mod the count) of
// the validation stream, in file order, the same at every evaluation.
//
// Workers build batches in plain buffers (no tensor work off the trainer thread); the trainer
// thread converts a batch into x and y with one copy each (into page-locked memory when
// pin_memory, so the copy to a CUDA device can be non-blocking). A corrupt shard or a token outside model.vocab raises
// DataError on the trainer thread naming the file and byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/data/batch_source.h"
#include "frugal/data/prefetch_loader.h"
#include "frugal/data/sampler.h"
#include "frugal/data/token_dataset.h"

namespace frugal {

// One micro-batch before it becomes tensors: rows x (block + 1) tokens, row-major.
struct TokenBatch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> samples;  // the window index of each row
  SampleCursor cursor;           // where the batch's first sample sits in the rank's stream
};

struct ShardSourceOptions {
  int64_t micro_batch = 32;
  int64_t block = 64;
  uint64_t seed = 0;
  int workers = 1;   // loader threads; 0 = build batches inline on the trainer thread
  int prefetch = 4;  // batches built ahead of the trainer at most
  int64_t rank = 0;  // this process's rank and the world size: ranks see disjoint windows
  int64_t world_size = 1;
  int64_t vocab = 256;      // model.vocab: a token >= vocab is a DataError
  bool pin_memory = false;  // page-locked host batches (REQUIRES a CUDA build; see pin_memory_for)
};

class ShardSource : public BatchSource {
 public:
  ShardSource(TokenDataset dataset, ShardSourceOptions options);
  ~ShardSource() override;

  Batch train_batch(int64_t index) override;
  Batch val_batch(int64_t index) override;
  std::string describe() const override;
  int64_t train_tokens() const override { return static_cast<int64_t>(data_.train.size()); }
  int64_t val_tokens() const override { return static_cast<int64_t>(data_.val.size()); }
  // {"epoch": E, "position": P}: the cursor of the next training batch.
  nlohmann::json state() const override;
  // Continues from a cursor state() returned (same micro_batch and world size).
  void load_state(const nlohmann::json& state) override;

  // The next training batch as plain buffers (what train_batch wraps), for tests and benches.
  TokenBatch next_train();
  const EpochSampler& sampler() const { return cursor_->sampler(); }
  int64_t train_windows() const { return cursor_->sampler().dataset_size(); }

 private:
  TokenBatch build(const TokenStream& stream, const std::vector<int64_t>& windows) const;
  TokenBatch build_train(int64_t k) const;
  Batch to_tensors(const TokenBatch& b) const;

  TokenDataset data_;
  ShardSourceOptions opts_;
  std::unique_ptr<MicroBatchCursor> cursor_;  // the sample order, in micro-batches
  std::unique_ptr<PrefetchLoader<TokenBatch>> loader_;
};

}  // namespace frugal
