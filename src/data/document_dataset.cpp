// Reading a documents dataset; see document_dataset.h.
#include "frugal/data/document_dataset.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "data/internal/little_endian.h"
#include "data/internal/manifest.h"
#include "frugal/core/errors.h"
#include "frugal/data/packing.h"
#include "frugal/data/rng.h"
#include "frugal/data/shard.h"

namespace frugal {

DocumentDataset::DocumentDataset(const std::string& dir) : dir_(dir) {
  const nlohmann::json m = internal::read_manifest_json(dir, "documents");
  const std::string mpath = dir + "/manifest.json";
  if (m.value("kind", "") != "documents")
    throw DataError(
        fmt::format("'{}' is a {} dataset, not a documents dataset (frugal prepare --format chat or "
                    "prompt-completion writes those)",
                    mpath, internal::manifest_field(m, "kind")));
  try {
    content_ = m.at("content").get<std::string>();
    vocab_ = m.at("tokenizer").at("vocab").get<int64_t>();
    train_.tokens = m.at("counts").value("train_tokens", int64_t{0});
    val_.tokens = m.at("counts").value("val_tokens", int64_t{0});
    std::set<std::string> seen;
    for (const char* name : {"train", "val"}) {
      Split& s = std::string(name) == "train" ? train_ : val_;
      for (const auto& entry : m.at("splits").at(name)) {
        internal::check_listed_once(dir, entry, seen);
        auto r = std::make_unique<ShardReader>(internal::checked_shard_path(dir, entry));
        internal::check_shard_identity(dir, entry, *r);
        s.starts.push_back(s.size);
        s.size += static_cast<int64_t>(r->size());
        s.shards.push_back(std::move(r));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(internal::malformed_manifest(mpath, e));
  }
}

DocumentDataset::~DocumentDataset() = default;

const DocumentDataset::Split& DocumentDataset::split(const std::string& name) const {
  if (name != "train" && name != "val") throw ConfigError(fmt::format("no split '{}' (train or val)", name));
  return name == "train" ? train_ : val_;
}

int64_t DocumentDataset::size(const std::string& name) const { return split(name).size; }
int64_t DocumentDataset::tokens(const std::string& name) const { return split(name).tokens; }

MaskedDocument DocumentDataset::document(const std::string& name, int64_t i) const {
  const Split& s = split(name);
  if (i < 0 || i >= s.size) throw ConfigError(fmt::format("document {} of {}: the split has {}", i, name, s.size));
  size_t k = s.starts.size() - 1;
  while (s.starts[k] > i) --k;
  const ShardReader& r = *s.shards[k];
  const std::string rec = r.record(static_cast<uint64_t>(i - s.starts[k]));
  const auto* p = reinterpret_cast<const uint8_t*>(rec.data());
  const uint32_t n = rec.size() >= 4 ? detail::get_u32(p) : 0;
  if (rec.size() < 4 || rec.size() != 4 + 5ull * n)
    throw DataError(fmt::format("{}: record {} is {} bytes, not a document (u32 n, n ids, n mask bytes)", r.path(),
                                i - s.starts[k], rec.size()));
  MaskedDocument d;
  d.ids.resize(n);
  for (uint32_t t = 0; t < n; ++t) d.ids[t] = static_cast<int32_t>(detail::get_u32(p + 4 + 4ull * t));
  d.mask.assign(p + 4 + 4ull * n, p + 4 + 5ull * n);
  return d;
}

bool is_document_dataset(const std::string& dir) {
  try {
    return internal::read_manifest_json(dir, "documents").value("kind", "") == "documents";
  } catch (const std::exception&) {
    return false;
  }
}

DocumentSource::DocumentSource(std::shared_ptr<const DocumentDataset> dataset, int64_t micro_batch, int64_t block,
                               uint64_t seed, int64_t rank, int64_t world_size, bool pin_memory)
    : ds_(std::move(dataset)),
      micro_batch_(micro_batch),
      block_(block),
      seed_(seed),
      rank_(rank),
      world_(world_size),
      pin_memory_(pin_memory) {
  if (ds_->size("train") == 0) throw DataError(fmt::format("dataset '{}' holds no training documents", ds_->dir()));
}

std::string DocumentSource::describe() const {
  return fmt::format(
      "shards:{} ({} documents, {} train / {} val; one a row, padded to the block, trained on the "
      "loss mask)",
      ds_->dir(), ds_->content(), ds_->size("train"), ds_->size("val"));
}

int64_t DocumentSource::train_document(int64_t k) {
  const int64_t n = ds_->size("train"), epoch = k / n;
  if (epoch != epoch_) {  // a seeded Fisher-Yates permutation per pass
    order_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order_[static_cast<size_t>(i)] = i;
    uint64_t state = derive_seed(seed_, 0x646f6373ULL /* "docs" */, static_cast<uint64_t>(epoch));
    for (int64_t i = n - 1; i > 0; --i) {
      state = splitmix64(state);
      std::swap(order_[static_cast<size_t>(i)], order_[state % static_cast<uint64_t>(i + 1)]);
    }
    epoch_ = epoch;
  }
  return order_[static_cast<size_t>(k % n)];
}

Batch DocumentSource::rows(const std::string& split, const std::vector<int64_t>& docs) const {
  const auto B = static_cast<int64_t>(docs.size());
  auto opts = at::TensorOptions().dtype(at::kLong);
  if (pin_memory_) opts = opts.pinned_memory(true);
  at::Tensor x = at::zeros({B, block_}, opts), y = at::full({B, block_}, kIgnoreIndex, opts);
  auto* xp = x.data_ptr<int64_t>();
  auto* yp = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const MaskedDocument d = ds_->document(split, docs[static_cast<size_t>(b)]);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(d.ids.size()), block_ + 1);
    for (int64_t t = 0; t + 1 < n; ++t) {
      xp[b * block_ + t] = d.ids[static_cast<size_t>(t)];
      if (d.mask[static_cast<size_t>(t + 1)]) yp[b * block_ + t] = d.ids[static_cast<size_t>(t + 1)];
    }
  }
  return {x, y};
}

Batch DocumentSource::train_batch(int64_t index) {
  std::vector<int64_t> docs;
  const int64_t first = (index * world_ + rank_) * micro_batch_;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t k = 0; k < micro_batch_; ++k) docs.push_back(train_document(first + k));
  }
  return rows("train", docs);
}

Batch DocumentSource::val_batch(int64_t index) {
  const int64_t n = ds_->size("val");
  if (n == 0)
    throw DataError(
        fmt::format("dataset '{}' holds no validation documents: prepare it with --val-fraction above 0, "
                    "or set train.eval_batches = 0",
                    ds_->dir()));
  std::vector<int64_t> docs;
  for (int64_t k = 0; k < micro_batch_; ++k) docs.push_back((index * micro_batch_ + k) % n);
  return rows("val", docs);
}

}  // namespace frugal
