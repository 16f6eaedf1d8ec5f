// xxhash64 of files and strings; see file_hash.h.
#include "frugal/data/file_hash.h"

#include <fmt/format.h>
#define XXH_INLINE_ALL  // xxHash header-only (third_party/xxhash)
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "frugal/core/errors.h"

namespace frugal {

uint64_t xxh64_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw DataError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> st(XXH64_createState(), &XXH64_freeState);
  XXH64_reset(st.get(), 0);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) XXH64_update(st.get(), buf.data(), n);
  if (std::ferror(f.get())) throw DataError(fmt::format("cannot read '{}'", path));
  return XXH64_digest(st.get());
}

uint64_t xxh64_bytes(std::string_view bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace frugal
