// RecordSource and record datasets; see record_source.h.
#include "frugal/data/record_source.h"

#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "data/internal/little_endian.h"
#include "data/internal/manifest.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;
using detail::get_u16;
using detail::get_u32;
using detail::get_u64;

namespace {

size_t dtype_bytes(RecordDtype d) { return d == RecordDtype::kUint8 ? 1 : d == RecordDtype::kFloat16 ? 2 : 4; }
}  // namespace

int64_t RecordSpec::values() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void RecordSplit::add(std::unique_ptr<ShardReader> shard) {
  starts_.push_back(total_);
  total_ += static_cast<int64_t>(shard->size());
  shards_.push_back(std::move(shard));
}

size_t RecordSplit::file_of(int64_t i) const {
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
}

std::string RecordSplit::record(int64_t i) const {
  const size_t f = file_of(i);
  return shards_[f]->record(static_cast<uint64_t>(i - starts_[f]));
}

std::string RecordSplit::locate(int64_t i) const {
  if (i < 0 || i >= total_) return "past the end";
  const size_t f = file_of(i);
  return fmt::format("shard '{}' record {}", shards_[f]->path(), i - starts_[f]);
}

RecordDataset open_record_dataset(const std::string& dir) {
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  if (!fs::exists(mpath))
    throw DataError(
        fmt::format("data.source: '{}' has no manifest.json; create a record dataset with "
                    "`frugal prepare --format images|tar|csv INPUT --out {}`",
                    dir, dir));
  const nlohmann::json m = internal::read_manifest_json(dir, "record");
  RecordDataset d;
  d.dir = dir;
  try {  // value() throws on a field of the wrong type: that is a malformed manifest too
    internal::refuse_documents_dataset(m, dir + "/manifest.json");
    if (m.value("format", "") != "frugal-dataset" || m.value("kind", "") != "records")
      throw DataError(
          fmt::format("not a frugal record-dataset manifest (kind {}); token datasets are read with "
                      "data.source = \"shards:DIR\"",
                      internal::manifest_field(m, "kind")));
    if (m.value("format_version", 0) != 1)
      throw DataError(fmt::format("format_version {} is not supported (this build reads 1)",
                                  internal::manifest_field(m, "format_version")));
    const auto& rec = m.at("record");
    d.spec.content = rec.at("content").get<std::string>();
    const std::string dtype = rec.at("dtype").get<std::string>();
    if (dtype == "uint8")
      d.spec.dtype = RecordDtype::kUint8;
    else if (dtype == "float16")
      d.spec.dtype = RecordDtype::kFloat16;
    else if (dtype == "float32")
      d.spec.dtype = RecordDtype::kFloat32;
    else
      throw DataError(fmt::format("unknown record dtype \"{}\"", dtype));
    d.spec.shape = rec.at("shape").get<std::vector<int64_t>>();
    d.spec.bytes = kRecordLabelBytes + static_cast<size_t>(d.spec.values()) * dtype_bytes(d.spec.dtype);
    if (rec.at("bytes").get<size_t>() != d.spec.bytes)
      throw DataError(
          fmt::format("record bytes {} disagree with dtype and shape ({})", rec.at("bytes").dump(), d.spec.bytes));
    d.classes = m.at("classes").get<std::vector<std::string>>();
  } catch (const DataError& e) {
    throw DataError(fmt::format("'{}': {}", mpath, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(internal::malformed_manifest(mpath, e));
  }
  try {
    std::set<std::string> listed;
    for (const char* split : {"train", "val"}) {
      for (const auto& s : m.at("splits").at(split)) {
        internal::check_listed_once(dir, s, listed);
        const std::string path = internal::checked_shard_path(dir, s);
        auto reader = std::make_unique<ShardReader>(path);
        if (reader->kind() != ShardKind::kRecords)
          throw DataError(fmt::format("shard '{}' holds tokens, but a record dataset needs record shards", path));
        internal::check_shard_identity(dir, s, *reader);
        (std::string(split) == "train" ? d.train : d.val).add(std::move(reader));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(internal::malformed_manifest(mpath, e));
  }
  return d;
}

RecordSource::RecordSource(RecordDataset dataset, RecordSourceOptions options)
    : data_(std::move(dataset)), opts_(options) {
  if (data_.train.size() < 1 || data_.val.size() < 1)
    throw DataError(
        fmt::format("record dataset '{}': the {} split holds no records; prepare it with a "
                    "positive --val-fraction (or a val/ folder) and more samples",
                    data_.dir, data_.train.size() < 1 ? "training" : "validation"));
  cursor_ = std::make_unique<MicroBatchCursor>(
      EpochSampler(data_.train.size(), opts_.seed, opts_.rank, opts_.world_size), opts_.micro_batch);
  loader_ = std::make_unique<PrefetchLoader<RecordBatch>>([this](int64_t k) { return build_train(k); }, opts_.workers,
                                                          opts_.prefetch, 0);
}

RecordSource::~RecordSource() = default;  // joins the loader threads before data_ goes

RecordBatch RecordSource::build(const RecordSplit& split, const std::vector<int64_t>& indices) const {
  const int64_t rows = static_cast<int64_t>(indices.size());
  std::vector<int64_t> xshape{rows};
  xshape.insert(xshape.end(), data_.spec.shape.begin(), data_.spec.shape.end());
  // Page-locked when the batch goes to a CUDA device: its copy can then run asynchronously.
  const auto host = at::TensorOptions().pinned_memory(opts_.pin_memory);
  RecordBatch b;
  b.x = at::empty(xshape, host.dtype(at::kFloat));
  b.y = at::empty({rows}, host.dtype(at::kLong));
  b.samples = indices;
  float* x = b.x.data_ptr<float>();
  int64_t* y = b.y.data_ptr<int64_t>();
  const int64_t n = data_.spec.values();
  const int64_t classes = static_cast<int64_t>(data_.classes.size());
  for (int64_t r = 0; r < rows; ++r) {
    const std::string rec = split.record(indices[static_cast<size_t>(r)]);
    if (rec.size() != data_.spec.bytes)
      throw DataError(fmt::format("{} has {} bytes, the manifest says every record has {}; re-run frugal prepare",
                                  split.locate(indices[static_cast<size_t>(r)]), rec.size(), data_.spec.bytes));
    const auto* p = reinterpret_cast<const uint8_t*>(rec.data());
    const auto label = static_cast<int64_t>(get_u64(p));
    if (label < 0 || label >= classes)
      throw DataError(fmt::format("{}: label {} is outside the manifest's {} classes",
                                  split.locate(indices[static_cast<size_t>(r)]), label, classes));
    y[r] = label;
    p += kRecordLabelBytes;
    float* out = x + r * n;
    switch (data_.spec.dtype) {
      case RecordDtype::kUint8:
        // A multiply, not a table lookup: the compiler vectorises the uint8 -> float conversion.
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]) * (1.0f / 255.0f);
        break;
      case RecordDtype::kFloat16:
        for (int64_t i = 0; i < n; ++i)
          out[i] = static_cast<float>(c10::Half(get_u16(p + 2 * i), c10::Half::from_bits()));
        break;
      case RecordDtype::kFloat32:
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t bits = get_u32(p + 4 * i);
          std::memcpy(out + i, &bits, 4);
        }
        break;
    }
  }
  return b;
}

RecordBatch RecordSource::build_train(int64_t k) const {
  const std::vector<int64_t> indices = cursor_->samples(k);
  RecordBatch b = build(data_.train, indices);
  b.cursor = cursor_->first(k);
  return b;
}

RecordBatch RecordSource::next_train() { return loader_->next(); }

Batch RecordSource::train_batch(int64_t index) {
  loader_->seek(index);  // a no-op when the trainer asks for the batch after the previous one
  RecordBatch b = loader_->next();
  return {std::move(b.x), std::move(b.y)};
}

Batch RecordSource::val_batch(int64_t index) {
  const int64_t n = data_.val.size();
  std::vector<int64_t> indices(static_cast<size_t>(opts_.micro_batch));
  for (int64_t i = 0; i < opts_.micro_batch; ++i) indices[static_cast<size_t>(i)] = (index * opts_.micro_batch + i) % n;
  RecordBatch b = build(data_.val, indices);
  return {std::move(b.x), std::move(b.y)};
}

double RecordSource::unigram_baseline() const {
  const size_t classes = data_.classes.size();
  std::vector<double> counts(classes, 0.0);
  auto label = [](const RecordSplit& s, int64_t i) -> int64_t {
    const std::string r = s.record(i);
    if (r.size() < 8) return -1;  // no label field; the loader reports such a record when it reads it
    return static_cast<int64_t>(get_u64(reinterpret_cast<const uint8_t*>(r.data())));
  };
  for (int64_t i = 0; i < data_.train.size(); ++i) {
    const int64_t l = label(data_.train, i);
    if (l >= 0 && static_cast<size_t>(l) < classes) counts[static_cast<size_t>(l)] += 1;
  }
  const double total = static_cast<double>(data_.train.size()) + static_cast<double>(classes);
  double nll = 0;
  for (int64_t i = 0; i < data_.val.size(); ++i) {
    const int64_t l = label(data_.val, i);
    const double c = l >= 0 && static_cast<size_t>(l) < classes ? counts[static_cast<size_t>(l)] : 0.0;
    nll -= std::log((c + 1.0) / total);
  }
  return nll / static_cast<double>(data_.val.size());
}

std::string RecordSource::describe() const {
  std::string shape;
  for (int64_t s : data_.spec.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(s);
  return fmt::format(
      "records:{} ({} [{}], {} classes, {} train / {} val records, {} loader workers, "
      "prefetch {}{})",
      data_.dir, data_.spec.content, shape, data_.classes.size(), data_.train.size(), data_.val.size(), opts_.workers,
      opts_.prefetch, opts_.pin_memory ? ", pinned" : "");
}

nlohmann::json RecordSource::state() const { return cursor_->state(loader_->next_index()); }

void RecordSource::load_state(const nlohmann::json& state) { loader_->seek(cursor_->batch_of(state, "records")); }

}  // namespace frugal
