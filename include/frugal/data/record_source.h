// The BatchSource for `data.source = "records:DIR"`: labelled samples (images or table rows)
// from a record dataset that `frugal prepare --format images|tar|csv` wrote (record layout:
// docs/formats/shards.md; manifest: docs/data.md).
//
// Batches: x is float32, (B, C, H, W) for images with values in [0, 1] (uint8 pixels / 255, or
// the stored fp16 values; no mean/std normalisation: a model normalises if it wants to), (B, F)
// for tables (the stored values; the manifest's feature_stats has the training split's mean and
// standard deviation per feature); y is int64 (B) class ids.
//
// Order, sharding and resume work exactly as for shards:DIR (shard_source.h): every epoch visits
// each training record once in a seeded permutation (sampler.h); rank r of world_size w takes
// positions r, r + w, ...; training batch k is a pure function of (seed, rank, world_size, k),
// whatever the worker count; state() / load_state() carry the two-integer cursor. Augmented
// variants stored by `prepare --augment N` are records of their own, so an epoch sees each
// image 1 + N times, each time differently. Validation batch i holds validation records
// i * B ... (i + 1) * B - 1 (mod their count), in file order, the same at every evaluation.
//
// Workers decode records straight into the batch tensors (in page-locked memory when
// `pin_memory`, so the trainer's non-blocking copy to a CUDA device overlaps compute). A record
// of the wrong size or a label outside the class list raises DataError naming the shard and
// record; a corrupt block names the shard and byte offset (shard.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/data/batch_source.h"
#include "frugal/data/prefetch_loader.h"
#include "frugal/data/sampler.h"
#include "frugal/data/shard.h"

namespace frugal {

enum class RecordDtype { kUint8, kFloat16, kFloat32 };

// What one record holds: an int64 label (kRecordLabelBytes), then prod(shape) values of dtype.
inline constexpr size_t kRecordLabelBytes = 8;
struct RecordSpec {
  std::string content;  // "image" or "table"
  RecordDtype dtype = RecordDtype::kUint8;
  std::vector<int64_t> shape;  // per-sample tensor shape: [3, H, W] or [F]
  size_t bytes = 0;            // 8 + prod(shape) * dtype width
  int64_t values() const;      // prod(shape)
};

// The records of one split: its shard files concatenated in manifest order.
class RecordSplit {
 public:
  void add(std::unique_ptr<ShardReader> shard);
  int64_t size() const { return total_; }
  // Record i of the split (REQUIRES i < size()), and "SHARD record J" for error messages.
  std::string record(int64_t i) const;  // a copy (see ShardReader::record)
  std::string locate(int64_t i) const;

 private:
  size_t file_of(int64_t i) const;
  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

struct RecordDataset {
  std::string dir;
  RecordSpec spec;
  std::vector<std::string> classes;
  RecordSplit train, val;
};

// Opens DIR/manifest.json (kind "records"). Throws DataError if it is missing, not a record
// dataset, or a listed shard is missing or has another size than the manifest says.
RecordDataset open_record_dataset(const std::string& dir);

// One training batch as the workers build it.
struct RecordBatch {
  at::Tensor x, y;
  std::vector<int64_t> samples;  // the record index of each row
  SampleCursor cursor;           // where the batch's first sample sits in the rank's stream
};

struct RecordSourceOptions {
  int64_t micro_batch = 32;
  uint64_t seed = 0;
  int workers = 1;   // loader threads; 0 = build batches inline on the trainer thread
  int prefetch = 4;  // batches built ahead of the trainer at most
  int64_t rank = 0;  // this process's rank and the world size: ranks see disjoint records
  int64_t world_size = 1;
  bool pin_memory = false;  // page-locked host batches (REQUIRES a CUDA build; see pin_memory_for)
};

class RecordSource : public BatchSource {
 public:
  RecordSource(RecordDataset dataset, RecordSourceOptions options);
  ~RecordSource() override;

  Batch train_batch(int64_t index) override;
  Batch val_batch(int64_t index) override;
  std::string describe() const override;
  // Records (not tokens) in each split.
  int64_t train_tokens() const override { return data_.train.size(); }
  int64_t val_tokens() const override { return data_.val.size(); }
  // Cross-entropy (nats/sample) of predicting validation labels from the training label
  // frequencies (add-one smoothed): what a classifier that ignores its input reaches.
  double unigram_baseline() const override;
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;

  // The next training batch with its sample indices and cursor, for tests and benches.
  RecordBatch next_train();
  const EpochSampler& sampler() const { return cursor_->sampler(); }
  const RecordDataset& dataset() const { return data_; }

 private:
  RecordBatch build(const RecordSplit& split, const std::vector<int64_t>& indices) const;
  RecordBatch build_train(int64_t k) const;

  RecordDataset data_;
  RecordSourceOptions opts_;
  std::unique_ptr<MicroBatchCursor> cursor_;  // the sample order, in micro-batches
  std::unique_ptr<PrefetchLoader<RecordBatch>> loader_;
};

}  // namespace frugal
