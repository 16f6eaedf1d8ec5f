// A prepared token dataset on disk: the train and validation token streams of a directory that
// `frugal prepare` wrote (manifest.json + token shards), or of llm.c/nanoGPT `.bin` files
// (`*_train_*.bin`, `*_val_*.bin`, header in docs/data.md). Each split is the concatenation of
// its files in name order; tokens are addressed by a global offset, in O(1) per file.
//
// Thread-safe for reading. Errors are DataError naming the directory, file and byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace frugal {

// One file of a split: our token shard or an llm.c .bin file.
class TokenFile {
 public:
  virtual ~TokenFile() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;  // tokens
  virtual void read(uint64_t start, size_t n, int32_t* out) const = 0;
  // Byte offset in the file where token i is stored, or where its zstd block starts (for error
  // messages).
  virtual uint64_t byte_offset(uint64_t token) const = 0;
};

// An llm.c token file: a 256 x int32 little-endian header (magic 20240520, version 1, token
// count), then uint16 tokens. Throws DataError naming the file and offset if the header or the
// size is wrong.
std::unique_ptr<TokenFile> open_llmc_bin(const std::string& path);
// A nanoGPT token file (`train.bin`, `val.bin` of its prepare.py scripts): uint16 tokens, no
// header. Throws DataError naming the file if it is empty or has an odd number of bytes.
std::unique_ptr<TokenFile> open_nanogpt_bin(const std::string& path);

class TokenStream {
 public:
  TokenStream() = default;
  explicit TokenStream(std::vector<std::unique_ptr<TokenFile>> files);
  uint64_t size() const { return total_; }
  // Copies tokens [start, start + n) into out (crossing file boundaries as needed).
  void read(uint64_t start, size_t n, int32_t* out) const;
  // "FILE at byte offset N" for the token at a global offset.
  std::string locate(uint64_t token) const;
  size_t files() const { return files_.size(); }

 private:
  std::vector<std::shared_ptr<TokenFile>> files_;
  std::vector<uint64_t> starts_;  // global offset of each file's first token
  uint64_t total_ = 0;
};

struct TokenDataset {
  std::string dir;
  std::string format;     // "frugal" (manifest) or "llm.c"
  int64_t vocab = -1;     // from the manifest; -1 when the files do not say (llm.c)
  std::string tokenizer;  // the manifest's tokenizer name, or "gpt2 (llm.c convention)"
  TokenStream train, val;
};

// Opens DIR. Throws DataError if it holds neither a manifest nor llm.c files, or if a listed
// shard is missing or does not match its manifest hash size.
TokenDataset open_token_dataset(const std::string& dir);

// The tokenizer DIR/manifest.json records (tokenizer.name and .vocab), without opening any shard;
// nullopt when there is no readable manifest or it records no vocabulary (open_token_dataset then
// says what is wrong).
struct ManifestTokenizer {
  std::string name;
  int64_t vocab = 0;
};
std::optional<ManifestTokenizer> manifest_tokenizer(const std::string& dir);

// Keeps the tokenizer of the dataset in `dataset_dir` in `to_dir` (a run's tokenizer/ folder,
// ckpt/run_dir.h): manifest.json with the dataset manifest's "tokenizer" entry and "dataset" (the
// folder it came from), and the model file the entry names (tokenizer.model, tokenizer.json),
// whose xxh64 is checked. Then manifest_tokenizer(to_dir) reads it as it reads the dataset, and
// sample and export need not find the dataset. Does nothing (returns false) when the dataset has
// no readable manifest with a tokenizer or `to_dir` already holds one; throws IoError when the
// named model file is missing or differs from its checksum.
bool keep_tokenizer(const std::string& dataset_dir, const std::string& to_dir);

// What `frugal prepare` wrote into `dataset_dir`, as an xxh64 of its manifest's shard list (every
// shard's name, size, record count and checksums): a dataset prepared again from other inputs
// differs, one prepared again from the same inputs does not. "" without a readable manifest.
std::string dataset_fingerprint(const std::string& dataset_dir);

}  // namespace frugal
