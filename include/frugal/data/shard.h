// Shards: frugal's on-disk dataset files (spec: docs/formats/shards.md). A token shard holds a
// stream of uint16 or uint32 tokens; a record shard holds variable-length byte records (an image
// tensor plus its label, a cached feature vector, ...). Both are cut into blocks, each with an
// xxhash64 checksum and optional zstd compression, and carry an index so that token i or record i
// is found in O(1).
//
// Every field is encoded explicitly, little-endian; nothing casts structs onto bytes. A reader
// checks the header, index and footer checksums when it opens a file, and each block's checksum
// before its first use: a corrupt or truncated shard raises DataError naming the file and the
// byte offset, so training never sees garbage.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace frugal {

enum class ShardKind : uint32_t { kTokens = 1, kRecords = 2 };
// Element type of a token shard (records are plain bytes: kBytes).
enum class ShardDtype : uint32_t { kBytes = 0, kUint16 = 1, kUint32 = 2 };

size_t dtype_width(ShardDtype d);      // bytes per element: 1, 2 or 4
std::string dtype_name(ShardDtype d);  // "bytes", "uint16", "uint32"

struct ShardWriterOptions {
  // Target uncompressed block size. Larger blocks compress better; smaller ones make the first
  // touch of a random record cheaper (one block is checked, and decompressed, per touch).
  uint32_t block_bytes = 1u << 20;
  bool zstd = false;  // compress every block with zstd (a flag of the whole file)
  int zstd_level = 3;
};

// Writes one shard to a temporary file beside `path`; finish() fsyncs and renames it into
// place. A writer destroyed before finish() removes its temporary file. Not thread-safe.
class ShardWriter {
 public:
  ShardWriter(std::string path, ShardKind kind, ShardDtype dtype, ShardWriterOptions options = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // REQUIRES: a token shard; every token fits the dtype (DataError otherwise).
  void add_tokens(const int32_t* tokens, size_t n);
  // REQUIRES: a record shard; one record of any length below 4 GiB.
  void add_record(std::string_view record);
  // Writes the index and footer, fsyncs, renames. Returns the xxhash64 of the whole file.
  uint64_t finish();

  uint64_t items() const { return items_; }
  // After finish(): the xxhash64 of the index (it lists every block's checksum, so it identifies
  // the content). Manifests record it as "index_xxh64"; readers compare it at open, for free.
  uint64_t index_hash() const { return index_hash_; }

 private:
  void flush_block();
  void write_raw(const void* p, size_t n);

  std::string path_, tmp_path_;
  ShardKind kind_;
  ShardDtype dtype_;
  ShardWriterOptions opts_;
  std::FILE* file_ = nullptr;
  uint64_t file_offset_ = 0, items_ = 0;
  uint32_t items_per_block_ = 0;  // token shards: fixed tokens per block
  std::string block_;             // the open block, uncompressed
  uint64_t open_items_ = 0;       // tokens or records in the open block
  struct BlockEntry {
    uint64_t offset;
    uint32_t stored_size, raw_size;
    uint64_t checksum;
  };
  std::vector<BlockEntry> blocks_;
  struct RecordEntry {
    uint32_t block, offset, length;
  };
  std::vector<RecordEntry> records_;
  bool finished_ = false;
  uint64_t index_hash_ = 0;
};

// Read access to one shard through a read-only memory map. Thread-safe: any number of threads
// may read concurrently. Throws DataError (file + byte offset) on any inconsistency.
class ShardReader {
 public:
  explicit ShardReader(std::string path);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  ShardKind kind() const { return kind_; }
  ShardDtype dtype() const { return dtype_; }
  uint64_t size() const { return items_; }  // tokens or records
  uint64_t file_bytes() const { return file_size_; }
  bool compressed() const { return compressed_; }
  uint64_t index_hash() const { return index_hash_; }  // see ShardWriter::index_hash()

  // Token shards: copies tokens [start, start + n) into out. REQUIRES start + n <= size().
  void read_tokens(uint64_t start, size_t n, int32_t* out) const;
  // Record shards: a copy of record i (a zstd block it lies in may leave the cache meanwhile).
  std::string record(uint64_t i) const;
  // Record shards: the size of record i in bytes, from the index (nothing read or decompressed).
  uint32_t record_size(uint64_t i) const;
  // The byte offset in the file of token i (uncompressed), or of the block holding it (zstd):
  // where to look when token i is wrong.
  uint64_t token_offset(uint64_t i) const;
  // Checks every block now (instead of on first use).
  void verify_all() const;

 private:
  struct Block {
    uint64_t offset;
    uint32_t stored_size, raw_size;
    uint64_t checksum;
  };
  // Verified, decompressed bytes of block b; `hold` keeps a decompressed block alive while used.
  struct BlockView {
    const uint8_t* data = nullptr;
    std::shared_ptr<const std::string> hold;
  };
  BlockView block_data(uint64_t b) const;
  [[noreturn]] void fail(uint64_t offset, const std::string& what) const;
  void parse();

  std::string path_;
  const uint8_t* map_ = nullptr;
  uint64_t file_size_ = 0;
  ShardKind kind_ = ShardKind::kTokens;
  ShardDtype dtype_ = ShardDtype::kUint16;
  bool compressed_ = false;
  uint64_t items_ = 0;
  uint32_t items_per_block_ = 0;
  std::vector<Block> blocks_;
  const uint8_t* record_index_ = nullptr;  // 12 bytes per record, inside the map
  std::unique_ptr<std::atomic<uint8_t>[]> verified_;
  uint64_t index_hash_ = 0;
  uint64_t id_ = 0;  // this reader's key in the process-wide cache of decompressed blocks
};

// zstd blocks are decompressed into one cache shared by every reader of the process, bounded in
// bytes (least recently used out first; 64 MiB unless set), so memory stays flat however large the
// dataset. Tests set a small limit; the figure in use is for tests and `doctor`.
void set_shard_cache_limit(size_t bytes);
size_t shard_cache_bytes();

}  // namespace frugal
