// Fuzz target: a token dataset's manifest.json (docs/data.md, docs/formats/shards.md). The input
// is the manifest text; the directory beside it holds two valid shards the manifest may list.
#include <vector>

#include "frugal/core/errors.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"
#include "frugal/data/token_dataset.h"
#include "fuzz_util.h"

using namespace frugal;

namespace {
std::string g_dir;

std::string shard_entry(const std::string& name) {
  ShardWriterOptions o;
  o.block_bytes = 256;
  std::vector<int32_t> t(500);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i % 256);
  ShardWriter w(g_dir + "/" + name, ShardKind::kTokens, ShardDtype::kUint16, o);
  w.add_tokens(t.data(), t.size());
  const uint64_t hash = w.finish();
  return "{\"file\": \"" + name +
         "\", \"tokens\": 500, \"bytes\": " + std::to_string(std::filesystem::file_size(g_dir + "/" + name)) +
         ", \"xxh64\": \"" + hex64(hash) + "\", \"index_xxh64\": \"" + hex64(w.index_hash()) + "\"}";
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_dir = fuzz::scratch() + "/dataset";
  std::filesystem::create_directories(g_dir);
  const std::string train = shard_entry("train_000000.frs"), val = shard_entry("val_000000.frs");
  if (const char* d = fuzz::seed_dir())
    fuzz::write_whole(std::string(d) + "/manifest.json",
                      "{\"format\": \"frugal-dataset\", \"format_version\": 1, \"kind\": \"tokens\", "
                      "\"tokenizer\": {\"name\": \"bytes\", \"vocab\": 256}, \"splits\": {\"train\": [" +
                          train + "], \"val\": [" + val + "]}}\n");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_whole(g_dir + "/manifest.json", std::string(reinterpret_cast<const char*>(data), size));
  try {
    TokenDataset d = open_token_dataset(g_dir);
    std::vector<int32_t> out(16);
    if (d.train.size() >= out.size()) d.train.read(0, out.size(), out.data());
  } catch (const Error&) {
  }
  return 0;
}
