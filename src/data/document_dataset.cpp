// Reading a documents dataset; see document_dataset.h.
#include "frugal/data/document_dataset.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "data/internal/little_endian.h"
#include "data/internal/manifest.h"
#include "frugal/core/errors.h"
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

int64_t DocumentDataset::length(const std::string& name, int64_t i) const {
  const Split& s = split(name);
  if (i < 0 || i >= s.size) throw ConfigError(fmt::format("document {} of {}: the split has {}", i, name, s.size));
  size_t k = s.starts.size() - 1;
  while (s.starts[k] > i) --k;
  const uint32_t bytes = s.shards[k]->record_size(static_cast<uint64_t>(i - s.starts[k]));
  return bytes >= 4 ? (bytes - 4) / 5 : 0;
}

bool is_document_dataset(const std::string& dir) {
  try {
    return internal::read_manifest_json(dir, "documents").value("kind", "") == "documents";
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace frugal
