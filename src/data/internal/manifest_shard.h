// The path of one shard listed in a dataset manifest, checked against the listing: shared by the
// token and record dataset readers (token_dataset.cpp, record_source.cpp).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"

namespace frugal::internal {

// DIR/entry["file"], after checking that it exists and has entry["bytes"] bytes. Throws DataError
// naming the dataset and the shard otherwise.
inline std::string checked_shard_path(const std::string& dir, const nlohmann::json& entry) {
  const std::string path = (std::filesystem::path(dir) / entry.at("file").get<std::string>()).string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    throw DataError(fmt::format("dataset '{}': shard '{}' listed in the manifest is missing; "
                                "re-run frugal prepare", dir, path));
  if (size != entry.at("bytes").get<uint64_t>())
    throw DataError(fmt::format("dataset '{}': shard '{}' has {} bytes, the manifest says {}; "
                                "re-run frugal prepare", dir, path, size, entry.at("bytes").get<uint64_t>()));
  return path;
}

}  // namespace frugal::internal
