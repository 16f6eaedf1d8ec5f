// Reading a dataset's manifest.json and the shards it lists, shared by the token and record
// dataset readers (token_dataset.cpp, record_source.cpp): the manifest as a JSON object, a
// malformed one said as such, and each shard's path checked against the listing.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"

namespace frugal::internal {

// DIR/manifest.json parsed, as a JSON object. DataError naming the file when it cannot be read,
// is not JSON, or holds something other than an object; `kind` ("token", "record") names the
// dataset kind in that message.
inline nlohmann::json read_manifest_json(const std::string& dir, const char* kind) {
  const std::string mpath = (std::filesystem::path(dir) / "manifest.json").string();
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_small_file(mpath));
  } catch (const std::exception& e) {
    throw DataError(fmt::format("cannot read dataset manifest '{}': {}", mpath, e.what()));
  }
  if (!m.is_object())
    throw DataError(fmt::format("'{}' is not a frugal {}-dataset manifest: it holds a JSON {}, not an object", mpath,
                                kind, m.type_name()));
  return m;
}

// "MANIFEST: a key is missing or has the wrong type (...)": a manifest that parses as JSON but
// lacks what the readers need (edited by hand, or from another tool).
inline std::string malformed_manifest(const std::string& mpath, const nlohmann::json::exception& e) {
  std::string what = e.what();
  const size_t bracket = what.find("] ");  // drop the library's "[json.exception.type_error.302] "
  if (bracket != std::string::npos) what = what.substr(bracket + 2);
  return fmt::format(
      "dataset manifest '{}' is malformed: {}; re-run frugal prepare to write a new one "
      "(docs/formats/shards.md lists the keys)",
      mpath, what);
}

// The value of `key` in a manifest as JSON text for a message, or "missing": a const json's
// operator[] on an absent key is undefined behaviour (an assertion), so messages go through this.
inline std::string manifest_field(const nlohmann::json& m, const char* key) {
  return m.contains(key) ? m.at(key).dump() : "missing";
}

// A documents dataset (chat, prompt-completion) given where tokens or records are read: refused by
// what it is.
inline void refuse_documents_dataset(const nlohmann::json& m, const std::string& mpath) {
  if (m.is_object() && m.contains("kind") && m["kind"] == "documents")
    throw DataError(
        fmt::format("'{}' is a documents dataset (chat or prompt-completion, with loss masks): train on "
                    "it with data.source = \"shards:DIR\" (docs/data.md)",
                    mpath));
}

// DIR/entry["file"], after checking that it exists and has entry["bytes"] bytes. Throws DataError
// naming the dataset and the shard otherwise.
inline std::string checked_shard_path(const std::string& dir, const nlohmann::json& entry) {
  const std::string path = (std::filesystem::path(dir) / entry.at("file").get<std::string>()).string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    throw DataError(
        fmt::format("dataset '{}': shard '{}' listed in the manifest is missing; "
                    "re-run frugal prepare",
                    dir, path));
  if (size != entry.at("bytes").get<uint64_t>())
    throw DataError(
        fmt::format("dataset '{}': shard '{}' has {} bytes, the manifest says {}; "
                    "re-run frugal prepare",
                    dir, path, size, entry.at("bytes").get<uint64_t>()));
  return path;
}

// Each shard may be listed once in a whole manifest (both splits): a shard listed twice would be
// trained on twice as often, or leak validation data into training. `seen` collects the names.
inline void check_listed_once(const std::string& dir, const nlohmann::json& entry, std::set<std::string>& seen) {
  const std::string file = entry.at("file").get<std::string>();
  const std::string key = std::filesystem::path(file).lexically_normal().string();
  if (!seen.insert(key).second)
    throw DataError(
        fmt::format("dataset '{}': the manifest lists shard '{}' more than once; re-run frugal prepare", dir, file));
}

// Checks that the shard opened from `entry` holds what the manifest lists: same-size shards
// swapped or replaced would otherwise train silently on the wrong data. Compares the index hash
// (free: the reader has checked it already); manifests written before it existed are checked by
// the whole file's xxhash64.
inline void check_shard_identity(const std::string& dir, const nlohmann::json& entry, const ShardReader& r) {
  // The count the manifest gives ("tokens" or "records"), where it gives one: a whole number equal
  // to what the shard holds (a string, a negative or a wrong count was taken as it was).
  for (const char* key : {"tokens", "records"}) {
    if (!entry.contains(key)) continue;
    const nlohmann::json& v = entry.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<uint64_t>() != r.size())
      throw DataError(
          fmt::format("dataset '{}': the manifest gives shard '{}' \"{}\": {}, but the shard holds {}; "
                      "re-run frugal prepare",
                      dir, r.path(), key, v.dump(), r.size()));
  }
  std::string listed, found;
  if (entry.contains("index_xxh64")) {
    listed = entry.at("index_xxh64").get<std::string>();
    found = hex64(r.index_hash());
  } else if (entry.contains("xxh64")) {
    listed = entry.at("xxh64").get<std::string>();
    found = hex64(xxh64_file(r.path()));
  }
  if (listed != found)
    throw DataError(
        fmt::format("dataset '{}': shard '{}' does not hold what the manifest lists for it (hash {}, "
                    "manifest {}): shards were swapped, replaced or copied from another dataset; "
                    "re-run frugal prepare",
                    dir, r.path(), found, listed));
}

}  // namespace frugal::internal
