// The record-dataset half of `frugal prepare` (images, tar images, CSV tables), called by
// prepare_dataset once it has checked the cache and made the temporary output folder. Each
// function writes the record shards into `tmp` and fills the manifest fields that describe them
// (kind, record, classes, splits, counts) and the report. Layout: docs/formats/shards.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/data/csv_table.h"
#include "frugal/data/prepare.h"
#include "frugal/data/tar_samples.h"

namespace frugal::detail {

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

// The samples held out for validation: round(n * fraction) of them (at least 1 when fraction > 0
// and n > 1), chosen by a seeded permutation of [0, n).
std::vector<bool> held_out(int64_t n, double fraction, uint64_t seed);

}  // namespace frugal::detail
