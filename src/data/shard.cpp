// Shard writer and reader; the byte layout is specified in docs/formats/shards.md and mirrored by
// the constants below. Readers trust nothing: every offset and size read from the file is
// checked against the file size before it is used.
#include "frugal/data/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL  // xxHash header-only (third_party/xxhash)
#include <xxhash.h>

#include "frugal_build_config.h"  // FRUGAL_HAVE_ZSTD
#if FRUGAL_HAVE_ZSTD
#include <zstd.h>
#endif

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <list>
#include <unordered_map>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/data/file_hash.h"
#include "data/internal/little_endian.h"

namespace frugal {
using namespace detail;

namespace {
constexpr char kMagic[8] = {'F', 'R', 'U', 'G', 'S', 'H', 'R', 'D'};
constexpr char kEndMagic[8] = {'F', 'R', 'U', 'G', 'S', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kFlagZstd = 1;
constexpr size_t kHeaderBytes = 64;
constexpr size_t kHeaderHashed = 56;  // the header checksum covers bytes [0, 56)
constexpr size_t kBlockEntryBytes = 24;
constexpr size_t kRecordEntryBytes = 12;
constexpr size_t kFooterBytes = 16;
// zstd cannot expand data by more than this: a block of at most 128 KiB needs a 3-byte header and
// at least 1 byte of content (an RLE block), so 4 stored bytes give at most 128 KiB. A declared
// raw size beyond stored * kMaxZstdRatio is a lie, refused before anything is allocated.
constexpr uint64_t kMaxZstdRatio = 32768;
// What a writer puts in one block at most: a target of at most kMaxBlockTarget plus one record of
// at most kMaxRecordBytes (a token block is its target). A zstd block declaring more is refused
// when the shard is opened: within zstd's ratio a 145 KB file could still declare 4 GiB, and the
// reader would allocate and inflate all of it for one sample.
constexpr uint32_t kMaxBlockTarget = 32u << 20;
constexpr uint32_t kMaxRecordBytes = 32u << 20;
constexpr uint64_t kMaxBlockRawBytes = uint64_t{kMaxBlockTarget} + kMaxRecordBytes;

// "cannot write 'path': <errno's text>", carrying errno (a full disk is told apart by it).
[[noreturn]] void throw_errno(const char* what, const std::string& path) {
  const int err = errno;
  throw IoError(fmt::format("{} '{}': {}", what, path, std::strerror(err)), err);
}

// The process-wide cache of decompressed blocks (see shard.h).
class InflatedCache {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // reader id, block
  std::shared_ptr<const std::string> get(Key k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.second);  // most recently used first
    return it->second.first;
  }
  void put(Key k, std::shared_ptr<const std::string> v) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(k)) return;
    bytes_ += v->size();
    lru_.push_front(k);
    map_.emplace(k, std::make_pair(std::move(v), lru_.begin()));
    trim();
  }
  void set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
    trim();
  }
  size_t bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

 private:
  void trim() {  // a block in use elsewhere stays alive through its shared_ptr, outside the count
    while (bytes_ > limit_ && !lru_.empty()) {
      auto it = map_.find(lru_.back());
      bytes_ -= it->second.first->size();
      map_.erase(it);
      lru_.pop_back();
    }
  }
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.first * 1000003u ^ k.second); }
  };
  std::mutex mu_;
  std::list<Key> lru_;
  std::unordered_map<Key, std::pair<std::shared_ptr<const std::string>, std::list<Key>::iterator>, KeyHash> map_;
  size_t bytes_ = 0, limit_ = size_t{64} << 20;
};

InflatedCache& inflated_cache() {
  static InflatedCache* cache = new InflatedCache();  // never destroyed: readers may outlive statics
  return *cache;
}
std::atomic<uint64_t> next_reader_id{1};
}  // namespace

void set_shard_cache_limit(size_t bytes) { inflated_cache().set_limit(bytes); }
size_t shard_cache_bytes() { return inflated_cache().bytes(); }

size_t dtype_width(ShardDtype d) {
  switch (d) {
    case ShardDtype::kBytes:
      return 1;
    case ShardDtype::kUint16:
      return 2;
    case ShardDtype::kUint32:
      return 4;
  }
  return 0;
}

std::string dtype_name(ShardDtype d) {
  switch (d) {
    case ShardDtype::kBytes:
      return "bytes";
    case ShardDtype::kUint16:
      return "uint16";
    case ShardDtype::kUint32:
      return "uint32";
  }
  return "?";
}

// ---- writer ------------------------------------------------------------------------------------

ShardWriter::ShardWriter(std::string path, ShardKind kind, ShardDtype dtype, ShardWriterOptions options)
    : path_(std::move(path)), kind_(kind), dtype_(dtype), opts_(options) {
  if (opts_.zstd) require_feature("zstd", fmt::format("writing the zstd-compressed shard '{}'", path_));
  FRUGAL_INTERNAL_ASSERT((kind_ == ShardKind::kTokens) != (dtype_ == ShardDtype::kBytes),
                         path_ + ": token shards need dtype uint16 or uint32, record shards bytes");
  if (opts_.block_bytes < 64) opts_.block_bytes = 64;
  if (opts_.block_bytes > kMaxBlockTarget) opts_.block_bytes = kMaxBlockTarget;
  if (kind_ == ShardKind::kTokens) items_per_block_ = opts_.block_bytes / static_cast<uint32_t>(dtype_width(dtype_));
  tmp_path_ = path_ + ".tmp";
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) throw_errno("cannot create", tmp_path_);
  const std::string zeros(kHeaderBytes, '\0');  // the header is written last, by finish()
  write_raw(zeros.data(), zeros.size());
}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
  if (!finished_) std::remove(tmp_path_.c_str());
}

void ShardWriter::write_raw(const void* p, size_t n) {
  if (std::fwrite(p, 1, n, file_) != n) throw_errno("cannot write", tmp_path_);
  file_offset_ += n;
}

void ShardWriter::add_tokens(const int32_t* tokens, size_t n) {
  FRUGAL_INTERNAL_ASSERT(kind_ == ShardKind::kTokens, path_ + ": add_tokens on a record shard");
  const uint32_t max = dtype_ == ShardDtype::kUint16 ? 0xffffu : 0xffffffffu;
  const size_t w = dtype_width(dtype_);
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || static_cast<uint32_t>(t) > max)
      throw DataError(fmt::format("{}: token {} does not fit dtype {}", path_, t, dtype_name(dtype_)));
    uint8_t b[4];
    if (w == 2)
      put_u16(b, static_cast<uint16_t>(t));
    else
      put_u32(b, static_cast<uint32_t>(t));
    block_.append(reinterpret_cast<const char*>(b), w);
    ++items_;
    ++open_items_;
    if (block_.size() == static_cast<size_t>(items_per_block_) * w) flush_block();
  }
}

void ShardWriter::add_record(std::string_view record) {
  FRUGAL_INTERNAL_ASSERT(kind_ == ShardKind::kRecords, path_ + ": add_record on a token shard");
  if (record.size() > kMaxRecordBytes)
    throw DataError(
        fmt::format("{}: a record of {} bytes exceeds the {} MiB a shard record may hold (docs/formats/"
                    "shards.md); make the samples smaller (e.g. prepare --size for images)",
                    path_, record.size(), kMaxRecordBytes >> 20));
  records_.push_back({static_cast<uint32_t>(blocks_.size()), static_cast<uint32_t>(block_.size()),
                      static_cast<uint32_t>(record.size())});
  block_.append(record);
  ++items_;
  ++open_items_;
  if (block_.size() >= opts_.block_bytes) flush_block();
}

void ShardWriter::flush_block() {
  if (open_items_ == 0) return;
  const uint32_t raw = static_cast<uint32_t>(block_.size());
  std::string payload;
  if (opts_.zstd) {
#if FRUGAL_HAVE_ZSTD
    payload.resize(ZSTD_compressBound(block_.size()));
    size_t n = ZSTD_compress(payload.data(), payload.size(), block_.data(), block_.size(), opts_.zstd_level);
    if (ZSTD_isError(n)) throw DataError(fmt::format("{}: zstd: {}", path_, ZSTD_getErrorName(n)));
    payload.resize(n);
#endif
  } else {
    payload.swap(block_);
  }
  blocks_.push_back({file_offset_, static_cast<uint32_t>(payload.size()), raw, xxh64_bytes(payload)});
  write_raw(payload.data(), payload.size());
  block_.clear();
  open_items_ = 0;
}

uint64_t ShardWriter::finish() {
  FRUGAL_INTERNAL_ASSERT(!finished_, path_ + ": finish() called twice");
  flush_block();
  const uint64_t index_offset = file_offset_;
  std::string index;
  for (const auto& b : blocks_) {
    append_u64(index, b.offset);
    append_u32(index, b.stored_size);
    append_u32(index, b.raw_size);
    append_u64(index, b.checksum);
  }
  for (const auto& r : records_) {
    append_u32(index, r.block);
    append_u32(index, r.offset);
    append_u32(index, r.length);
  }
  std::string footer;
  index_hash_ = xxh64_bytes(index);
  append_u64(footer, index_hash_);
  footer.append(kEndMagic, 8);
  write_raw(index.data(), index.size());
  write_raw(footer.data(), footer.size());

  uint8_t h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, 8);
  put_u32(h + 8, kVersion);
  put_u32(h + 12, static_cast<uint32_t>(kind_));
  put_u32(h + 16, static_cast<uint32_t>(dtype_));
  put_u32(h + 20, opts_.zstd ? kFlagZstd : 0);
  put_u64(h + 24, items_);
  put_u64(h + 32, blocks_.size());
  put_u64(h + 40, index_offset);
  put_u32(h + 48, items_per_block_);
  put_u32(h + 52, 0);
  put_u64(h + 56, XXH64(h, kHeaderHashed, 0));
  if (std::fseek(file_, 0, SEEK_SET) != 0 || std::fwrite(h, 1, kHeaderBytes, file_) != kHeaderBytes ||
      std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw_errno("cannot write", tmp_path_);
  std::fclose(file_);
  file_ = nullptr;
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    throw IoError(fmt::format("cannot rename '{}' to '{}': {}", tmp_path_, path_, std::strerror(err)), err);
  }
  finished_ = true;
  fsync_dir(std::filesystem::path(path_).parent_path().string());
  return xxh64_file(path_);
}

// ---- reader ------------------------------------------------------------------------------------

ShardReader::ShardReader(std::string path) : path_(std::move(path)) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(fmt::format("cannot open shard '{}': {}", path_, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw DataError(fmt::format("cannot stat shard '{}': {}", path_, std::strerror(errno)));
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (file_size_ > 0) {
    void* m = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw DataError(fmt::format("cannot map shard '{}': {}", path_, std::strerror(errno)));
    }
    map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  try {
    parse();
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), file_size_);
    map_ = nullptr;
    throw;
  }
}

ShardReader::~ShardReader() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), file_size_);
}

void ShardReader::fail(uint64_t offset, const std::string& what) const {
  throw DataError(
      fmt::format("shard '{}' is corrupt at byte offset {}: {}; re-create it with "
                  "`frugal prepare ... --force` (without --force, prepare checks its inputs, not the shards it "
                  "wrote, and finds the dataset up to date), or restore it from a copy",
                  path_, offset, what));
}

void ShardReader::parse() {
  if (file_size_ < kHeaderBytes + kFooterBytes)
    fail(file_size_, fmt::format("truncated: the file has {} bytes, less than a header and footer "
                                 "({} bytes)",
                                 file_size_, kHeaderBytes + kFooterBytes));
  const uint8_t* h = map_;
  if (std::memcmp(h, kMagic, 8) != 0) fail(0, "bad magic (not a frugal shard)");
  if (get_u64(h + 56) != XXH64(h, kHeaderHashed, 0)) fail(0, "header checksum mismatch");
  if (get_u32(h + 8) != kVersion)
    fail(8, fmt::format("format version {} is not supported (this build reads {})", get_u32(h + 8), kVersion));
  const uint32_t kind = get_u32(h + 12), dtype = get_u32(h + 16), flags = get_u32(h + 20);
  if (kind != 1 && kind != 2) fail(12, fmt::format("unknown kind {}", kind));
  if (dtype > 2 || (kind == 1) == (dtype == 0)) fail(16, fmt::format("bad dtype {} for kind {}", dtype, kind));
  if (flags & ~kFlagZstd) fail(20, fmt::format("unknown flags 0x{:x}", flags));
  kind_ = static_cast<ShardKind>(kind);
  dtype_ = static_cast<ShardDtype>(dtype);
  compressed_ = (flags & kFlagZstd) != 0;
  if (compressed_) require_feature("zstd", fmt::format("reading the zstd-compressed shard '{}'", path_));
  items_ = get_u64(h + 24);
  const uint64_t nblocks = get_u64(h + 32), index_offset = get_u64(h + 40);
  items_per_block_ = get_u32(h + 48);
  const uint64_t nrecords = kind_ == ShardKind::kRecords ? items_ : 0;
  if (nblocks > file_size_ / kBlockEntryBytes || nrecords > file_size_ / kRecordEntryBytes)
    fail(24, "counts larger than the file can hold");
  const uint64_t index_bytes = nblocks * kBlockEntryBytes + nrecords * kRecordEntryBytes;
  const uint64_t expected = index_offset + index_bytes + kFooterBytes;
  if (index_offset < kHeaderBytes || expected != file_size_)
    fail(std::min(expected, file_size_),
         fmt::format("truncated or extended: the header describes {} bytes, the file has {}", expected, file_size_));
  const uint8_t* footer = map_ + file_size_ - kFooterBytes;
  if (std::memcmp(footer + 8, kEndMagic, 8) != 0) fail(file_size_ - 8, "bad end magic");
  const uint64_t index_hash = XXH64(map_ + index_offset, index_bytes, 0);
  if (get_u64(footer) != index_hash) fail(index_offset, "index checksum mismatch");
  index_hash_ = index_hash;

  const uint8_t* p = map_ + index_offset;
  uint64_t next = kHeaderBytes, raw_total = 0;
  blocks_.resize(nblocks);
  for (uint64_t b = 0; b < nblocks; ++b, p += kBlockEntryBytes) {
    Block& k = blocks_[b];
    k = {get_u64(p), get_u32(p + 8), get_u32(p + 12), get_u64(p + 16)};
    if (k.offset != next || k.offset + k.stored_size > index_offset || (!compressed_ && k.stored_size != k.raw_size))
      fail(index_offset + b * kBlockEntryBytes, fmt::format("block {} entry is inconsistent", b));
    if (compressed_ && k.raw_size > static_cast<uint64_t>(k.stored_size) * kMaxZstdRatio)
      fail(index_offset + b * kBlockEntryBytes,
           fmt::format("block {} declares {} bytes decompressed from {} stored, more than zstd can expand "
                       "to (at most {}x)",
                       b, k.raw_size, k.stored_size, kMaxZstdRatio));
    if (compressed_ && k.raw_size > kMaxBlockRawBytes)
      fail(index_offset + b * kBlockEntryBytes,
           fmt::format("block {} declares {} bytes decompressed, more than the {} MiB a writer puts in a block", b,
                       k.raw_size, kMaxBlockRawBytes >> 20));
    next = k.offset + k.stored_size;
    raw_total += k.raw_size;
  }
  if (next != index_offset) fail(next, "blocks do not end where the index begins");
  if (kind_ == ShardKind::kTokens) {
    const uint64_t w = dtype_width(dtype_);
    if (items_per_block_ == 0 || raw_total != items_ * w ||
        nblocks != (items_ + items_per_block_ - 1) / items_per_block_)
      fail(24, "token count, block size and blocks disagree");
    for (uint64_t b = 0; b + 1 < nblocks; ++b)
      if (blocks_[b].raw_size != items_per_block_ * w)
        fail(index_offset + b * kBlockEntryBytes, fmt::format("block {} holds a wrong token count", b));
  } else {
    record_index_ = p;
    for (uint64_t r = 0; r < nrecords; ++r) {
      const uint8_t* e = p + r * kRecordEntryBytes;
      const uint32_t blk = get_u32(e), off = get_u32(e + 4), len = get_u32(e + 8);
      if (blk >= nblocks || static_cast<uint64_t>(off) + len > blocks_[blk].raw_size)
        fail(static_cast<uint64_t>(e - map_), fmt::format("record {} points outside its block", r));
    }
  }
  verified_ = std::make_unique<std::atomic<uint8_t>[]>(nblocks);
  for (uint64_t b = 0; b < nblocks; ++b) verified_[b].store(0, std::memory_order_relaxed);
  id_ = next_reader_id.fetch_add(1);
}

ShardReader::BlockView ShardReader::block_data(uint64_t b) const {
  const Block& k = blocks_[b];
  const uint8_t* stored = map_ + k.offset;
  if (!verified_[b].load(std::memory_order_acquire)) {
    const uint64_t got = XXH64(stored, k.stored_size, 0);
    if (got != k.checksum)
      fail(k.offset, fmt::format("block {} ({} bytes) fails its xxhash64 check (stored {}, computed {})", b,
                                 k.stored_size, hex64(k.checksum), hex64(got)));
    if (!compressed_) verified_[b].store(1, std::memory_order_release);
  }
  if (!compressed_) return {stored, nullptr};
  if (auto hit = inflated_cache().get({id_, b})) return {reinterpret_cast<const uint8_t*>(hit->data()), hit};
#if FRUGAL_HAVE_ZSTD
  // The frame states its own size: a block whose frame disagrees with the index is refused before
  // the buffer is allocated.
  const unsigned long long framed = ZSTD_getFrameContentSize(stored, k.stored_size);
  if (framed != k.raw_size)
    fail(k.offset, fmt::format("block {}: the zstd frame holds {} bytes, the index says {}", b,
                               framed == ZSTD_CONTENTSIZE_UNKNOWN ? std::string("an unknown number of")
                               : framed == ZSTD_CONTENTSIZE_ERROR ? std::string("no valid frame, so no")
                                                                  : std::to_string(framed),
                               k.raw_size));
  auto out = std::make_shared<std::string>(k.raw_size, '\0');
  size_t n = ZSTD_decompress(out->data(), out->size(), stored, k.stored_size);
  if (ZSTD_isError(n) || n != k.raw_size)
    fail(k.offset, fmt::format("block {} does not decompress to {} bytes ({})", b, k.raw_size,
                               ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size"));
#else
  auto out = std::make_shared<std::string>();
#endif
  verified_[b].store(1, std::memory_order_release);
  std::shared_ptr<const std::string> held = std::move(out);
  inflated_cache().put({id_, b}, held);
  return {reinterpret_cast<const uint8_t*>(held->data()), held};
}

void ShardReader::read_tokens(uint64_t start, size_t n, int32_t* out) const {
  FRUGAL_INTERNAL_ASSERT(kind_ == ShardKind::kTokens, path_ + ": read_tokens on a record shard");
  if (start + n > items_)
    throw DataError(fmt::format("{}: tokens [{}, {}) are past the end ({} tokens)", path_, start, start + n, items_));
  while (n > 0) {
    const uint64_t b = start / items_per_block_, off = start % items_per_block_;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, items_per_block_ - off));
    const BlockView view = block_data(b);
    const uint8_t* d = view.data;
    if (dtype_ == ShardDtype::kUint16) {
      for (size_t i = 0; i < take; ++i) out[i] = get_u16(d + 2 * (off + i));
    } else {
      for (size_t i = 0; i < take; ++i) out[i] = static_cast<int32_t>(get_u32(d + 4 * (off + i)));
    }
    out += take;
    start += take;
    n -= take;
  }
}

std::string ShardReader::record(uint64_t i) const {
  FRUGAL_INTERNAL_ASSERT(kind_ == ShardKind::kRecords, path_ + ": record() on a token shard");
  if (i >= items_) throw DataError(fmt::format("{}: record {} is past the end ({} records)", path_, i, items_));
  const uint8_t* e = record_index_ + i * kRecordEntryBytes;
  const BlockView view = block_data(get_u32(e));
  return {reinterpret_cast<const char*>(view.data + get_u32(e + 4)), get_u32(e + 8)};
}

uint32_t ShardReader::record_size(uint64_t i) const {
  FRUGAL_INTERNAL_ASSERT(kind_ == ShardKind::kRecords, path_ + ": record_size() on a token shard");
  if (i >= items_) throw DataError(fmt::format("{}: record {} is past the end ({} records)", path_, i, items_));
  return get_u32(record_index_ + i * kRecordEntryBytes + 8);
}

uint64_t ShardReader::token_offset(uint64_t i) const {
  if (kind_ != ShardKind::kTokens || i >= items_) return file_size_;
  const Block& b = blocks_[i / items_per_block_];
  return compressed_ ? b.offset : b.offset + (i % items_per_block_) * dtype_width(dtype_);
}

void ShardReader::verify_all() const {
  for (uint64_t b = 0; b < blocks_.size(); ++b) block_data(b);
}

}  // namespace frugal
