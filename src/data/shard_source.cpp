// ShardSource; see shard_source.h.
#include "frugal/data/shard_source.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"

namespace frugal {

ShardSource::ShardSource(TokenDataset dataset, ShardSourceOptions options) : data_(std::move(dataset)), opts_(options) {
  auto windows = [&](const TokenStream& s, bool val) {
    const int64_t n = s.size() > 0 ? static_cast<int64_t>(s.size() - 1) / opts_.block : 0;
    // An empty validation split comes from prepare --val-fraction 0.
    const char* fix = !val            ? "use more data or a smaller model.block"
                      : s.size() == 0 ? "the trainer evaluates on it (every train.eval_every steps and at the "
                                        "end): prepare the dataset again with --val-fraction above 0"
                                      : "prepare the dataset again with a larger --val-fraction or more data, or "
                                        "use a smaller model.block";
    if (n < 1)
      throw DataError(
          fmt::format("dataset '{}': the {} split has {} tokens, but a window needs model.block + 1 = {}; {}",
                      data_.dir, val ? "validation" : "training", s.size(), opts_.block + 1, fix));
    return n;
  };
  const int64_t n_train = windows(data_.train, false);
  windows(data_.val, true);
  if (data_.vocab > opts_.vocab)
    throw ConfigError(
        fmt::format("dataset '{}' was tokenised with a vocabulary of {} ({}), but "
                    "model.vocab = {}; set model.vocab = {}",
                    data_.dir, data_.vocab, data_.tokenizer, opts_.vocab, data_.vocab));
  cursor_ = std::make_unique<MicroBatchCursor>(EpochSampler(n_train, opts_.seed, opts_.rank, opts_.world_size),
                                               opts_.micro_batch);
  loader_ = std::make_unique<PrefetchLoader<TokenBatch>>([this](int64_t k) { return build_train(k); }, opts_.workers,
                                                         opts_.prefetch, 0);
}

ShardSource::~ShardSource() = default;  // joins the loader threads before data_ goes

TokenBatch ShardSource::build(const TokenStream& stream, const std::vector<int64_t>& windows) const {
  const size_t row = static_cast<size_t>(opts_.block + 1);
  TokenBatch b;
  b.tokens.resize(windows.size() * row);
  b.samples = windows;
  for (size_t r = 0; r < windows.size(); ++r) {
    const uint64_t start = static_cast<uint64_t>(windows[r] * opts_.block);
    int32_t* out = b.tokens.data() + r * row;
    stream.read(start, row, out);
    for (size_t t = 0; t < row; ++t) {
      if (out[t] < 0 || out[t] >= opts_.vocab)
        throw DataError(
            fmt::format("token {} in {} is outside model.vocab = {}; set model.vocab "
                        "above the dataset's largest token (GPT-2 / llm.c data: 50257)",
                        out[t], stream.locate(start + t), opts_.vocab));
    }
  }
  return b;
}

TokenBatch ShardSource::build_train(int64_t k) const {
  const std::vector<int64_t> windows = cursor_->samples(k);
  TokenBatch b = build(data_.train, windows);
  b.cursor = cursor_->first(k);
  return b;
}

Batch ShardSource::to_tensors(const TokenBatch& b) const {
  const int64_t rows = static_cast<int64_t>(b.samples.size());
  const at::Tensor src = at::from_blob(const_cast<int32_t*>(b.tokens.data()), {rows, opts_.block + 1}, at::kInt);
  const auto host = at::TensorOptions().dtype(at::kLong).pinned_memory(opts_.pin_memory);
  Batch out{at::empty({rows, opts_.block}, host), at::empty({rows, opts_.block}, host)};
  out.x.copy_(src.narrow(1, 0, opts_.block));  // int32 -> int64, one copy each, on the trainer thread
  out.y.copy_(src.narrow(1, 1, opts_.block));
  return out;
}

TokenBatch ShardSource::next_train() { return loader_->next(); }

Batch ShardSource::train_batch(int64_t index) {
  loader_->seek(index);  // a no-op when the trainer asks for the batch after the previous one
  return to_tensors(loader_->next());
}

Batch ShardSource::val_batch(int64_t index) {
  const int64_t n = static_cast<int64_t>(data_.val.size() - 1) / opts_.block;
  std::vector<int64_t> windows(static_cast<size_t>(opts_.micro_batch));
  for (int64_t i = 0; i < opts_.micro_batch; ++i) windows[static_cast<size_t>(i)] = (index * opts_.micro_batch + i) % n;
  return to_tensors(build(data_.val, windows));
}

std::string ShardSource::describe() const {
  return fmt::format("shards:{} ({}, tokenizer {}, {} train windows, {} loader workers, prefetch {})", data_.dir,
                     data_.format, data_.tokenizer, cursor_->sampler().dataset_size(), opts_.workers, opts_.prefetch);
}

nlohmann::json ShardSource::state() const { return cursor_->state(loader_->next_index()); }

void ShardSource::load_state(const nlohmann::json& state) { loader_->seek(cursor_->batch_of(state, "samples")); }

}  // namespace frugal
