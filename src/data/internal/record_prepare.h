// The record-dataset half of `frugal prepare` (images, tar images, CSV tables, and the chat and
// prompt-completion documents of masked_prepare.cpp), called by
// prepare_dataset once it has checked the cache and made the temporary output folder. Each
// function writes the record shards into `tmp` and fills the manifest fields that describe them
// (kind, record, classes, splits, counts) and the report. Layout: docs/formats/shards.md.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"

#include "frugal/data/csv_table.h"
#include "frugal/data/prepare.h"
#include "frugal/data/tar_samples.h"

namespace frugal::detail {

// Appends records to `{split}_NNNNNN.frs` files of at most `per_shard` records each.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, const PrepareOptions& o, PrepareReport* r)
      : dir_(std::move(dir)), split_(std::move(split)), o_(o), r_(r) {}

  void add(std::string_view record) {
    if (!w_) {
      name_ = fmt::format("{}_{:06d}.frs", split_, files_.size());
      ShardWriterOptions wo;
      wo.zstd = o_.zstd;
      w_ = std::make_unique<ShardWriter>(dir_ + "/" + name_, ShardKind::kRecords, ShardDtype::kBytes, wo);
    }
    w_->add_record(record);
    ++records_;
    if (static_cast<int64_t>(w_->items()) >= o_.shard_records) close();
  }

  nlohmann::json finish() {
    close();
    return files_;
  }
  int64_t records() const { return records_; }

 private:
  void close() {
    if (!w_) return;
    const uint64_t n = w_->items();
    const uint64_t hash = w_->finish();
    const uint64_t index_hash = w_->index_hash();
    w_.reset();
    const auto bytes = static_cast<int64_t>(std::filesystem::file_size(dir_ + "/" + name_));
    r_->bytes_out += bytes;
    ++r_->shards;
    files_.push_back({{"file", name_},
                      {"records", n},
                      {"bytes", bytes},
                      {"xxh64", hex64(hash)},
                      {"index_xxh64", hex64(index_hash)}});
  }

  std::string dir_, split_, name_;
  const PrepareOptions& o_;
  PrepareReport* r_;
  std::unique_ptr<ShardWriter> w_;
  nlohmann::json files_ = nlohmann::json::array();
  int64_t records_ = 0;
};

// One image to prepare: its encoded bytes, or the file to read them from.
struct ImageItem {
  std::string key;    // stable name: "class/file.jpg" in a folder, the sample key in a tar
  std::string what;   // for error messages: the file path, or "archive:member"
  std::string path;   // read from here when `bytes` is empty
  std::string bytes;  // the encoded image, when it came from a tar
  int64_t label = 0;
  bool val = false;  // an explicit val/ folder put it in the validation split
};

// An image folder (or folders): INPUT/<class>/...; or INPUT/train/<class>/... and
// INPUT/val/<class>/... for an explicit validation split.
void prepare_image_folders(const PrepareOptions& o, const std::string& tmp, nlohmann::ordered_json* m, PrepareReport* r,
                           const PrepareProgress& say);

// Tar samples that carry images (key.jpg / key.jpeg / key.png with key.cls).
void prepare_tar_images(const PrepareOptions& o, std::vector<std::pair<std::string, TarSample>> samples,
                        const std::string& tmp, nlohmann::ordered_json* m, PrepareReport* r,
                        const PrepareProgress& say);

// A table (CSV or Parquet files read by csv_table.h): one record per row, float32 features and
// the label, rows held out by `held_out`.
void prepare_table(const PrepareOptions& o, const CsvTable& t, const std::string& tmp, nlohmann::ordered_json* m,
                   PrepareReport* r, const PrepareProgress& say);

// Chat or prompt-completion jsonl `files` (masked_prepare.cpp): one record per document, its ids and
// loss mask; documents held out by `held_out`.
void prepare_masked_documents(const PrepareOptions& o, const std::vector<std::string>& files, const std::string& tmp,
                              nlohmann::ordered_json* m, PrepareReport* r, const PrepareProgress& say);

// The splits prepare_dataset is about to publish (their counts in `r`), checked against what frugal
// train needs (prepare_report.cpp): an empty training split, or one without a target, is a DataError
// naming the cause and the flag to change; an empty validation split adds a warning to `r` (the
// trainer evaluates on it and refuses a dataset without one).
void check_splits(const PrepareOptions& o, PrepareReport* r);

// The samples held out for validation: round(n * fraction) of them (at least 1 when fraction > 0
// and n > 1), chosen by a seeded permutation of [0, n).
std::vector<bool> held_out(int64_t n, double fraction, uint64_t seed);

}  // namespace frugal::detail
