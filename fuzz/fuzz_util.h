// Shared by the fuzz targets (docs/fuzzing.md): a scratch directory per process, files written
// whole, and the rule every target enforces: a frugal::Error is the expected answer to bad input;
// any other exception escapes and libFuzzer reports it as a crash (a raw library error, an
// allocation the input should never have caused).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace frugal::fuzz {

inline const std::string& scratch() {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path().string() + "/frugal-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_whole(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// When FRUGAL_FUZZ_SEEDS names a directory, a target writes its valid examples there (the seed
// corpus) from LLVMFuzzerInitialize; scripts/fuzz.sh does this before each run.
inline const char* seed_dir() { return std::getenv("FRUGAL_FUZZ_SEEDS"); }

}  // namespace frugal::fuzz
