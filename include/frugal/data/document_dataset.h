// A documents dataset: what `frugal prepare --format chat | prompt-completion` writes (docs/data.md,
// docs/formats/shards.md): record shards of one document each, its token ids and its loss mask,
// in a train and a val split, with the tokenizer that made them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/data/batch_source.h"
#include "frugal/data/tokenizer.h"

namespace frugal {

class ShardReader;

class DocumentDataset {
 public:
  // Opens DIR (manifest.json and every shard it lists, checked). DataError naming the file when it
  // is not a documents dataset, or a shard is missing, changed or corrupt.
  explicit DocumentDataset(const std::string& dir);
  ~DocumentDataset();
  DocumentDataset(const DocumentDataset&) = delete;
  DocumentDataset& operator=(const DocumentDataset&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& content() const { return content_; }  // "chat" or "prompt-completion"
  int64_t vocab() const { return vocab_; }
  std::string tokenizer_json() const { return dir_ + "/tokenizer.json"; }
  // Documents of a split ("train" or "val"), its tokens (0 where the manifest predates the count),
  // and document i of it, in stored order.
  int64_t size(const std::string& split) const;
  int64_t tokens(const std::string& split) const;
  MaskedDocument document(const std::string& split, int64_t i) const;

 private:
  struct Split {
    std::vector<std::unique_ptr<ShardReader>> shards;
    std::vector<int64_t> starts;  // the first document of each shard
    int64_t size = 0, tokens = 0;
  };
  const Split& split(const std::string& name) const;

  std::string dir_, content_;
  int64_t vocab_ = 0;
  Split train_, val_;
};

// Whether DIR/manifest.json names a documents dataset (false when it cannot be read).
bool is_document_dataset(const std::string& dir);

// Training on a documents dataset (data.source = "shards:DIR" naming one, docs/data.md): one
// document a row, cut to model.block + 1 tokens and padded to model.block; a target only where the
// loss mask is 1 (kIgnoreIndex on the rest and on padding), so the loss is the mean over the
// micro-batch's trained-on tokens. Micro-batch i holds documents [i B, (i + 1) B) of an endless
// sequence of seeded permutations of the training documents (a new one each pass); with rank r of
// w, the rank's micro-batch i is the single process's i w + r. A pure function of (seed, index):
// a resume draws what the uninterrupted run would have. Validation batches take the val split's
// documents in order.
class DocumentSource : public BatchSource {
 public:
  DocumentSource(std::shared_ptr<const DocumentDataset> dataset, int64_t micro_batch, int64_t block, uint64_t seed,
                 int64_t rank = 0, int64_t world_size = 1, bool pin_memory = false);
  Batch train_batch(int64_t index) override;
  Batch val_batch(int64_t index) override;
  std::string describe() const override;
  int64_t train_tokens() const override { return ds_->tokens("train"); }
  int64_t val_tokens() const override { return ds_->tokens("val"); }

 private:
  Batch rows(const std::string& split, const std::vector<int64_t>& docs) const;
  int64_t train_document(int64_t k);  // the k-th of the endless permuted sequence

  std::shared_ptr<const DocumentDataset> ds_;
  int64_t micro_batch_, block_;
  uint64_t seed_;
  int64_t rank_, world_;
  bool pin_memory_;
  std::mutex mutex_;    // guards the permutation below
  int64_t epoch_ = -1;  // the pass whose permutation `order_` holds
  std::vector<int64_t> order_;
};

}  // namespace frugal
