// Where training and validation batches come from. A BatchSource hands out micro-batches by
// index; for the in-memory sources the batch of index i is a pure function of (seed, i), so a
// resumed run draws exactly the batches the uninterrupted run would have.
//
// A user dataset implements train_batch, val_batch and describe (the rest have defaults), or goes
// through an adapter: DatasetSource (data/dataset_source.h) for torch::data datasets and any
// per-sample function; make_batch_source(config) for data.source (shards, text, builtin).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config.h"

namespace frugal {

// One micro-batch, on the host, batch dimension first. What x and y hold depends on the source:
//  - token sources (builtin:arith, text:PATH, shards:DIR): x int64 (B, T) token ids, y int64
//    (B, T) next-token targets (the reference GPT);
//  - records:DIR: x float32 inputs, (B, C, H, W) images or (B, F) table rows, y int64 (B) class
//    ids (record_source.h);
//  - a user task: whatever its LossFn reads; y may be undefined.
// pos, defined only where rows hold several documents (shards:DIR of documents with data.packing =
// pack, document_dataset.h): int64 (B, T), each token's position inside its own document (0 at a
// document's first token), which the model reads to keep attention inside each document and to
// restart positions (CausalLmImpl::logits).
// A source may hand out page-locked (pinned) tensors; moving them with
// `.to(device, /*non_blocking=*/true)` then overlaps the copy with compute on CUDA.
struct Batch {
  at::Tensor x;
  at::Tensor y;
  at::Tensor pos{};  // (a default, so sources without packed rows write {x, y})
};

// The batch on `device` (non-blocking copies; undefined tensors stay undefined).
Batch to_device(const Batch& b, c10::Device device);

// Targets of y that count (not kIgnoreIndex, data/packing.h); 0 for an undefined y.
int64_t count_targets(const at::Tensor& y);

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Training micro-batch number `index` (counts every micro-batch drawn in the run).
  virtual Batch train_batch(int64_t index) = 0;
  // Validation batch number `index`; the same batches at every evaluation.
  virtual Batch val_batch(int64_t index) = 0;
  virtual std::string describe() const = 0;
  // Size of each split in items (tokens, or samples); 0 = unknown.
  virtual int64_t train_tokens() const;
  virtual int64_t val_tokens() const;
  // Cross-entropy (nats/token) of predicting validation tokens from training unigram
  // frequencies: the loss a model that ignores context would reach. NaN when unknown.
  virtual double unigram_baseline() const;
  // Whether micro-batches hold different numbers of targets (y = kIgnoreIndex where there is no
  // target: loss masks, padding). Then a step's loss is weighted by tokens (the sum over all its
  // targets over their count, across micro-batches and ranks) instead of a mean of means.
  virtual bool ragged_targets() const { return false; }
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
  // pin_memory: batches in page-locked host memory (pin_memory_for), for non-blocking copies.
  WindowSource(std::vector<int32_t> train, std::vector<int32_t> val, int64_t micro_batch, int64_t block, uint64_t seed,
               std::string what, int64_t rank = 0, int64_t world_size = 1, bool pin_memory = false);
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
  bool pin_memory_;
  std::string what_;
};

// Byte-level tokens of a string (vocabulary 256).
std::vector<int32_t> byte_tokens(const std::string& text);
std::string bytes_to_text(const std::vector<int64_t>& tokens);

// Whether host batches bound for `device` ("cpu", "cuda", "cuda:1", ...) should live in
// page-locked memory: true for a CUDA device when this build has CUDA, false otherwise (on CPU
// nothing changes).
bool pin_memory_for(const std::string& device);

// Builds the source named by config.data.source ("builtin:arith", "text:PATH", "shards:DIR",
// "records:DIR") for rank `rank` of `world_size` data-parallel processes (shards: disjoint sample
// streams, sampler.h; in-memory sources: interleaved micro-batches, WindowSource), with pinned
// batches when run.device is CUDA. Throws ConfigError/DataError.
std::unique_ptr<BatchSource> make_batch_source(const Config& config, int64_t rank = 0, int64_t world_size = 1);

}  // namespace frugal
