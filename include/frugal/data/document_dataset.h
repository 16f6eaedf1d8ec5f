// A documents dataset: what `frugal prepare --format chat | prompt-completion` writes (docs/data.md,
// docs/formats/shards.md): record shards of one document each, its token ids and its loss mask,
// in a train and a val split, with the tokenizer that made them.
#pragma once

#include <cstdint>
#include <map>
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
  // Its token count, from the shard's index (the record is not read).
  int64_t length(const std::string& split, int64_t i) const;

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

// Training on a documents dataset (data.source = "shards:DIR" naming one, docs/data.md). A document
// of n tokens trains n - 1 positions (x its tokens but the last, y the next tokens where the loss
// mask is 1, kIgnoreIndex elsewhere); one longer than model.block + 1 tokens is cut to its first
// block + 1 (prepare --max-tokens / --overflow split keeps the rest as documents of their own). A
// document whose trained tokens all lie past that cut trains nothing and is left out of the rows:
// the constructor finds them (reading the documents longer than block + 1), throws DataError when
// every document of the train split, or of a non-empty val split, is one (saying where their first
// trained token lies and what to do), and otherwise warns (rank 0) of how many. Rows
// hold model.block positions, built two ways (data.packing):
//   pack  several whole documents a row, never one split across rows: the documents of each pass's
//         seeded permutation go, in order, into the first of 8 open rows with room for them; when
//         none has, the oldest open row is closed (its rest padded) and a new one opened. Batch::pos
//         gives each token's position inside its document, so the model keeps attention within
//         each document and restarts positions (causal_lm.h): a document's losses are those it has
//         alone in a row.
//   pad   one document a row, padded to model.block (pos undefined).
// Rows form an endless sequence over passes; micro-batch i holds rows [i B, (i + 1) B), and with
// rank r of w the rank's micro-batch i is the single process's i w + r. A pure function of (seed,
// index): a resume draws what the uninterrupted run would have. Validation takes the val split's
// documents in stored order, built into rows the same way.
class DocumentSource : public BatchSource {
 public:
  DocumentSource(std::shared_ptr<const DocumentDataset> dataset, int64_t micro_batch, int64_t block, uint64_t seed,
                 int64_t rank = 0, int64_t world_size = 1, bool pin_memory = false,
                 DataConfig::Packing packing = DataConfig::Packing::kPack);
  Batch train_batch(int64_t index) override;
  Batch val_batch(int64_t index) override;
  std::string describe() const override;
  int64_t train_tokens() const override { return ds_->tokens("train"); }
  int64_t val_tokens() const override { return ds_->tokens("val"); }
  bool ragged_targets() const override { return true; }

  using Row = std::vector<int64_t>;  // documents of one row, in order
  // Positions a document of the split takes in a row: its tokens, cut to block + 1, less one.
  int64_t positions(const std::string& split, int64_t doc) const;
  // Documents `order` built into rows as described above (pack), or one a row (pad); documents
  // without a target (one token, or every trained token past the cut) are left out.
  std::vector<Row> build_rows(const std::string& split, const std::vector<int64_t>& order) const;
  // Whether every trained token of the split's document lies past the cut (it is left out).
  bool untrained(const std::string& split, int64_t doc) const;

 private:
  std::vector<bool> find_untrained(const std::string& split) const;  // per document; throws or warns
  Batch batch_of(const std::string& split, const std::vector<Row>& rows) const;
  const Row& train_row(int64_t k);              // row k of the endless sequence; under mutex_
  const std::vector<Row>& pass(int64_t epoch);  // the rows of one pass; under mutex_

  std::shared_ptr<const DocumentDataset> ds_;
  int64_t micro_batch_, block_;
  uint64_t seed_;
  int64_t rank_, world_;
  bool pin_memory_;
  DataConfig::Packing packing_;
  std::vector<bool> untrained_train_, untrained_val_;  // untrained(split, doc) of each document
  std::vector<Row> val_rows_;
  std::mutex mutex_;                            // guards what follows
  std::vector<int64_t> pass_start_{0};          // pass_start_[e]: the first row of pass e
  std::map<int64_t, std::vector<Row>> passes_;  // the rows of the last two passes built
};

}  // namespace frugal
