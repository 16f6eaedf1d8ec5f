// Shard format: round trips (tokens and records, raw and zstd), and corruption: every flipped
// byte and every truncation point of a small multi-block shard must raise DataError, never data.
#include "frugal/data/shard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "frugal/core/errors.h"
#include "frugal/data/file_hash.h"
#include "data/internal/little_endian.h"
#include "test_util.h"

namespace frugal::shard_test {
namespace {

std::vector<int32_t> random_tokens(size_t n, int32_t max, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % (static_cast<uint32_t>(max) + 1));
  return t;
}

std::vector<std::string> random_records(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> r(n);
  for (size_t i = 0; i < n; ++i) {
    r[i].resize(rng() % 200);  // includes empty records
    for (auto& c : r[i]) c = static_cast<char>(rng() & 0xff);
  }
  return r;
}

void write_tokens(const std::string& path, const std::vector<int32_t>& t, ShardDtype d, bool zstd,
                  uint32_t block_bytes) {
  ShardWriterOptions o;
  o.zstd = zstd;
  o.block_bytes = block_bytes;
  ShardWriter w(path, ShardKind::kTokens, d, o);
  w.add_tokens(t.data(), t.size() / 2);  // two calls: appends continue the same stream
  w.add_tokens(t.data() + t.size() / 2, t.size() - t.size() / 2);
  w.finish();
}

// Opens, checks every block and reads everything; throws on any corruption.
void read_everything(const std::string& path) {
  ShardReader r(path);
  r.verify_all();
  if (r.kind() == ShardKind::kTokens) {
    std::vector<int32_t> out(r.size());
    r.read_tokens(0, out.size(), out.data());
  } else {
    for (uint64_t i = 0; i < r.size(); ++i) r.record(i);
  }
}

TEST(Shard, TokenShardsRoundTripInEveryDtypeWithAndWithoutZstd) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  for (ShardDtype d : {ShardDtype::kUint16, ShardDtype::kUint32}) {
    for (bool zstd : {false, true}) {
      const int32_t max = d == ShardDtype::kUint16 ? 65535 : 1 << 30;
      auto tokens = random_tokens(5000, max, 7);
      const std::string path = dir.file("t.frs");
      write_tokens(path, tokens, d, zstd, 1000);
      ShardReader r(path);
      EXPECT_EQ(r.kind(), ShardKind::kTokens);
      EXPECT_EQ(r.dtype(), d);
      EXPECT_EQ(r.compressed(), zstd);
      ASSERT_EQ(r.size(), tokens.size());
      std::vector<int32_t> all(tokens.size());
      r.read_tokens(0, all.size(), all.data());
      EXPECT_EQ(all, tokens);
      const uint64_t block = 1000 / dtype_width(d);  // tokens per block
      EXPECT_EQ(r.token_offset(1234), zstd ? r.token_offset((1234 / block) * block) : 64 + 1234 * dtype_width(d));
      std::vector<int32_t> mid(777);  // spans several blocks from an unaligned start
      r.read_tokens(1234, mid.size(), mid.data());
      EXPECT_TRUE(std::equal(mid.begin(), mid.end(), tokens.begin() + 1234));
    }
  }
}

TEST(Shard, RecordShardsRoundTripVariableLengthRecordsIncludingEmptyOnes) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  for (bool zstd : {false, true}) {
    auto recs = random_records(300, 11);
    ShardWriterOptions o;
    o.zstd = zstd;
    o.block_bytes = 2000;
    ShardWriter w(dir.file("r.frs"), ShardKind::kRecords, ShardDtype::kBytes, o);
    for (const auto& r : recs) w.add_record(r);
    const uint64_t hash = w.finish();
    EXPECT_EQ(hash, xxh64_file(dir.file("r.frs")));
    ShardReader r(dir.file("r.frs"));
    ASSERT_EQ(r.size(), recs.size());
    for (size_t i : {size_t{299}, size_t{0}, size_t{150}}) EXPECT_EQ(r.record(i), recs[i]);
    for (size_t i = 0; i < recs.size(); ++i) ASSERT_EQ(r.record(i), recs[i]) << i;
  }
}

// A build without libzstd refuses to write a compressed shard before it creates any file, with a
// message naming the feature and the package (the case a bare GPU node meets).
TEST(Shard, WithoutZstdACompressedShardIsRefusedBeforeAnyFileIsMade) {
  if (have_feature("zstd")) GTEST_SKIP() << "this build has zstd; the refusal is for builds without it";
  test::TempDir dir;
  ShardWriterOptions o;
  o.zstd = true;
  try {
    ShardWriter w(dir.file("z.frs"), ShardKind::kTokens, ShardDtype::kUint16, o);
    ADD_FAILURE() << "a zstd shard writer was made without zstd";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("z.frs"), std::string::npos) << m;
    EXPECT_NE(m.find("libzstd-dev"), std::string::npos) << m;
    EXPECT_NE(m.find("FRUGAL_WITH_ZSTD"), std::string::npos) << m;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Shard, TokenOutsideTheDtypeIsRefusedByTheWriter) {
  test::TempDir dir;
  ShardWriter w(dir.file("t.frs"), ShardKind::kTokens, ShardDtype::kUint16);
  const int32_t big = 70000;
  EXPECT_THROW(w.add_tokens(&big, 1), DataError);
}

TEST(Shard, UnfinishedWriterLeavesNoFileBehind) {
  test::TempDir dir;
  {
    ShardWriter w(dir.file("t.frs"), ShardKind::kTokens, ShardDtype::kUint16);
    const int32_t t = 1;
    w.add_tokens(&t, 1);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Every byte of a shard is covered by a checksum or a consistency check.
TEST(Shard, EveryFlippedByteIsDetected) {
  test::TempDir dir;
  for (bool records : {false, true}) {
    const std::string good = dir.file("good.frs"), bad = dir.file("bad.frs");
    if (records) {
      ShardWriterOptions o;
      o.block_bytes = 100;
      ShardWriter w(good, ShardKind::kRecords, ShardDtype::kBytes, o);
      for (const auto& r : random_records(4, 3)) w.add_record(r);
      w.finish();
    } else {
      write_tokens(good, random_tokens(100, 60000, 5), ShardDtype::kUint16, false, 64);
    }
    const std::string bytes = test::read_text(good);
    ASSERT_GT(bytes.size(), 200u);
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string b = bytes;
      b[i] = static_cast<char>(b[i] ^ 0x10);
      test::write_text(bad, b);
      EXPECT_THROW(read_everything(bad), DataError) << "flipped byte " << i << " went unnoticed";
    }
  }
}

TEST(Shard, FlippedByteInAZstdBlockIsDetected) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  write_tokens(dir.file("z.frs"), random_tokens(3000, 300, 9), ShardDtype::kUint16, true, 1024);
  std::string b = test::read_text(dir.file("z.frs"));
  b[100] = static_cast<char>(b[100] ^ 1);
  test::write_text(dir.file("z.frs"), b);
  EXPECT_THROW(read_everything(dir.file("z.frs")), DataError);
}

// Rewrites a single-block zstd token shard's header and index so that it declares `raw` bytes
// (raw / 2 uint16 tokens) with every checksum recomputed: a well-formed lie.
std::string declare_raw_size(std::string b, uint32_t raw) {
  auto* p = reinterpret_cast<uint8_t*>(b.data());
  const uint64_t index_offset = detail::get_u64(p + 40);
  detail::put_u64(p + 24, raw / 2);  // tokens
  detail::put_u32(p + 48, raw / 2);  // tokens per block: still one block
  detail::put_u64(p + 56, xxh64_bytes(std::string_view(b.data(), 56)));
  detail::put_u32(p + index_offset + 12, raw);  // the block's raw size
  detail::put_u64(p + index_offset + 24, xxh64_bytes(std::string_view(b.data() + index_offset, 24)));
  return b;
}

// A 100-odd-byte shard that declares a 4 GiB block must be refused from its sizes, before any
// buffer is allocated (it used to allocate 4.4 GB first); one that declares a size zstd could
// reach but its frame disagrees with is refused before decompressing.
TEST(Shard, DeclaredSizesAreCheckedBeforeAllocating) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  write_tokens(dir.file("z.frs"), random_tokens(32, 300, 4), ShardDtype::kUint16, true, 64);
  const std::string good = test::read_text(dir.file("z.frs"));
  ASSERT_LT(good.size(), 300u);
  EXPECT_NO_THROW(read_everything(dir.file("z.frs")));
  test::write_text(dir.file("huge.frs"), declare_raw_size(good, 0xFFFFFFFEu));
  try {
    ShardReader r(dir.file("huge.frs"));
    FAIL() << "a block declaring 4 GiB was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("more than zstd can expand"), std::string::npos) << e.what();
  }
  test::write_text(dir.file("lie.frs"), declare_raw_size(good, 1000));
  ShardReader r(dir.file("lie.frs"));
  std::vector<int32_t> out(1);
  try {
    r.read_tokens(0, 1, out.data());
    FAIL() << "a block whose frame disagrees with the index was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("the zstd frame holds 64 bytes, the index says 1000"), std::string::npos)
        << e.what();
  }
}

// Within zstd's ratio a small block may still declare far more than any writer puts in a block
// (a 145 KB shard declared 4 GiB, and reading one sample allocated and inflated all of it): the
// reader refuses a zstd block over 64 MiB when the shard is opened, and the writer never makes
// one (a record over 32 MiB is refused).
TEST(Shard, AZstdBlockLargerThanAnyWriterMakesIsRefusedOnOpen) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  // 8 KiB of random tokens: incompressible, so 100 MiB stays within zstd's 32768x ratio.
  write_tokens(dir.file("z.frs"), random_tokens(4096, 60000, 9), ShardDtype::kUint16, true, 8192);
  test::write_text(dir.file("big.frs"), declare_raw_size(test::read_text(dir.file("z.frs")), 100u << 20));
  try {
    ShardReader r(dir.file("big.frs"));
    FAIL() << "a zstd block declaring 100 MiB was accepted on open";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the 64 MiB a writer puts in a block"), std::string::npos)
        << e.what();
  }
  ShardWriter w(dir.file("records.frs"), ShardKind::kRecords, ShardDtype::kBytes);
  try {
    w.add_record(std::string((32u << 20) + 1, 'x'));
    FAIL() << "a record over 32 MiB was written";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the 32 MiB"), std::string::npos) << e.what();
  }
}

// Decompressed blocks are cached in a bounded process-wide cache: reading a dataset many times
// the limit keeps memory at the limit, and the data stays right.
TEST(Shard, DecompressedBlocksStayWithinTheCacheLimit) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  const auto tokens = random_tokens(64 * 1024, 60000, 8);  // 128 KiB raw in 1 KiB blocks
  write_tokens(dir.file("big.frs"), tokens, ShardDtype::kUint16, true, 1024);
  set_shard_cache_limit(16 * 1024);
  {
    ShardReader r(dir.file("big.frs"));
    std::vector<int32_t> out(tokens.size());
    for (int pass = 0; pass < 2; ++pass) {
      r.read_tokens(0, out.size(), out.data());
      EXPECT_EQ(out, tokens);
      EXPECT_LE(shard_cache_bytes(), 16u * 1024) << "pass " << pass;
    }
    EXPECT_GT(shard_cache_bytes(), 0u);
  }
  set_shard_cache_limit(size_t{64} << 20);
}

TEST(Shard, CorruptBlockErrorNamesTheFileAndTheBlockOffset) {
  test::TempDir dir;
  const std::string path = dir.file("named.frs");
  write_tokens(path, random_tokens(100, 60000, 5), ShardDtype::kUint16, false, 64);
  std::string b = test::read_text(path);
  b[64 + 64 + 3] ^= 1;  // the second block starts at 64 (header) + 64 (first block)
  test::write_text(path, b);
  ShardReader r(path);  // header, index and footer are intact: opening succeeds
  std::vector<int32_t> out(32);
  r.read_tokens(0, 32, out.data());  // the first block is fine
  try {
    r.read_tokens(32, 32, out.data());
    FAIL() << "corrupt block was read";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte offset 128"), std::string::npos) << msg;
    EXPECT_NE(msg.find("block 1"), std::string::npos) << msg;
  }
}

TEST(Shard, TruncationAtEveryCutPointIsDetected) {
  FRUGAL_NEED_FEATURE("zstd");
  test::TempDir dir;
  for (bool zstd : {false, true}) {
    write_tokens(dir.file("good.frs"), random_tokens(120, 1000, 2), ShardDtype::kUint16, zstd, 64);
    const std::string bytes = test::read_text(dir.file("good.frs"));
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      test::write_text(dir.file("cut.frs"), bytes.substr(0, cut));
      try {
        read_everything(dir.file("cut.frs"));
        ADD_FAILURE() << "truncation at " << cut << " went unnoticed";
      } catch (const DataError& e) {
        EXPECT_NE(std::string(e.what()).find("cut.frs"), std::string::npos);
      }
    }
  }
}

}  // namespace
}  // namespace frugal::shard_test
