// Fuzz target: the shard reader (docs/formats/shards.md). The input is a shard file. Half the
// runs first repair the header and index checksums, so that mutations reach the checks behind
// them (counts, offsets, sizes, zstd frames) instead of stopping at the first checksum.
#include <cstring>
#include <vector>

#include "data/internal/little_endian.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"
#include "fuzz_util.h"

using namespace frugal;

namespace {
std::string repair(std::string b) {
  if (b.size() < 80) return b;
  auto* p = reinterpret_cast<uint8_t*>(b.data());
  detail::put_u64(p + 56, xxh64_bytes(std::string_view(b.data(), 56)));
  const uint64_t index = detail::get_u64(p + 40);
  if (index >= 64 && index <= b.size() - 16)
    detail::put_u64(p + b.size() - 16, xxh64_bytes(std::string_view(b.data() + index, b.size() - 16 - index)));
  return b;
}

void write_seeds(const std::string& dir) {
  std::vector<int32_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 60000);
  for (bool zstd : {false, true}) {
    ShardWriterOptions o;
    o.zstd = zstd && have_feature("zstd");
    o.block_bytes = 512;
    ShardWriter w(dir + "/tokens" + (zstd ? "_zstd" : "") + ".frs", ShardKind::kTokens, ShardDtype::kUint16, o);
    w.add_tokens(tokens.data(), tokens.size());
    w.finish();
    ShardWriter r(dir + "/records" + (zstd ? "_zstd" : "") + ".frs", ShardKind::kRecords, ShardDtype::kBytes, o);
    for (int i = 0; i < 40; ++i)
      r.add_record(std::string(static_cast<size_t>(i * 13 % 97), static_cast<char>('a' + i % 26)));
    r.finish();
  }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_shard_cache_limit(1 << 20);
  if (const char* d = fuzz::seed_dir()) write_seeds(d);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 0 && (data[0] & 1)) bytes = repair(std::move(bytes));
  const std::string path = fuzz::scratch() + "/input.frs";
  fuzz::write_whole(path, bytes);
  try {
    ShardReader r(path);
    if (r.kind() == ShardKind::kTokens) {
      std::vector<int32_t> out(static_cast<size_t>(std::min<uint64_t>(r.size(), 1 << 16)));
      if (!out.empty()) r.read_tokens(0, out.size(), out.data());
    } else {
      for (uint64_t i = 0; i < std::min<uint64_t>(r.size(), 1000); ++i) r.record(i);
    }
    r.verify_all();
  } catch (const Error&) {
  }
  return 0;
}
