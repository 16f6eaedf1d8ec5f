// Content hashes used by datasets: the xxhash64 of a file (what `xxh64sum` prints) and of a byte
// string, as 16 lowercase hex digits for manifests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace frugal {

// xxhash64 (seed 0) of a whole file, read in 1 MiB chunks. Throws DataError if it cannot be read.
uint64_t xxh64_file(const std::string& path);
uint64_t xxh64_bytes(std::string_view bytes);
std::string hex64(uint64_t v);

}  // namespace frugal
