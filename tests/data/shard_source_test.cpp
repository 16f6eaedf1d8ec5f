// ShardSource and token datasets: windows hold the right tokens, batches are the same for any
// worker count, a stop/resume through the cursor replays one uninterrupted epoch exactly, llm.c
// .bin files are read, and bad data stops with the file and offset.
#include "frugal/data/shard_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"
#include "data/internal/little_endian.h"
#include "test_util.h"

namespace frugal::shard_source_test {
namespace {

std::vector<int32_t> stream(size_t n, uint32_t salt) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 31 + salt) % 251);
  return t;
}

// A dataset directory as `frugal prepare` lays it out, with the train split in several shards.
void write_dataset(const std::string& dir, const std::vector<int32_t>& train, const std::vector<int32_t>& val,
                   size_t shard_tokens) {
  nlohmann::json m = {{"format", "frugal-dataset"},
                      {"format_version", 1},
                      {"kind", "tokens"},
                      {"tokenizer", {{"name", "bytes"}, {"vocab", 256}}}};
  for (auto [split, tokens] : {std::pair{"train", &train}, std::pair{"val", &val}}) {
    m["splits"][split] = nlohmann::json::array();
    for (size_t i = 0, n = 0; n < tokens->size(); ++i, n += shard_tokens) {
      const std::string file = std::string(split) + "_" + std::to_string(i) + ".frs";
      ShardWriterOptions o;
      o.block_bytes = 256;
      ShardWriter w(dir + "/" + file, ShardKind::kTokens, ShardDtype::kUint16, o);
      w.add_tokens(tokens->data() + n, std::min(shard_tokens, tokens->size() - n));
      const uint64_t hash = w.finish();
      m["splits"][split].push_back({{"file", file},
                                    {"bytes", std::filesystem::file_size(dir + "/" + file)},
                                    {"xxh64", hex64(hash)},
                                    {"index_xxh64", hex64(w.index_hash())}});
    }
  }
  test::write_text(dir + "/manifest.json", m.dump());
}

ShardSourceOptions options(int workers) {
  ShardSourceOptions o;
  o.micro_batch = 4;
  o.block = 8;
  o.seed = 5;
  o.workers = workers;
  o.prefetch = 3;
  return o;
}

TEST(ShardSource, EveryRowIsTheWindowItNamesAcrossShardBoundaries) {
  test::TempDir dir;
  auto train = stream(2001, 1);
  write_dataset(dir.path(), train, stream(300, 2), 700);
  ShardSource s(open_token_dataset(dir.path()), options(1));
  EXPECT_EQ(s.train_windows(), 250);
  for (int k = 0; k < 20; ++k) {
    TokenBatch b = s.next_train();
    ASSERT_EQ(b.samples.size(), 4u);
    for (size_t r = 0; r < 4; ++r)
      for (size_t t = 0; t < 9; ++t) ASSERT_EQ(b.tokens[r * 9 + t], train[static_cast<size_t>(b.samples[r]) * 8 + t]);
  }
  Batch t = s.train_batch(20);
  EXPECT_TRUE(t.x.narrow(1, 1, 7).equal(t.y.narrow(1, 0, 7)));  // targets are inputs shifted by one
}

TEST(ShardSource, BatchesAreIdenticalForZeroAndTwoWorkers) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(3001, 3), stream(300, 4), 1000);
  ShardSource inline_src(open_token_dataset(dir.path()), options(0));
  ShardSource threaded(open_token_dataset(dir.path()), options(2));
  for (int64_t k = 0; k < 200; ++k) {  // crosses two epoch boundaries (375 windows / 4)
    Batch a = inline_src.train_batch(k), b = threaded.train_batch(k);
    ASSERT_TRUE(a.x.equal(b.x) && a.y.equal(b.y)) << "batch " << k;
  }
  EXPECT_TRUE(inline_src.val_batch(3).x.equal(threaded.val_batch(3).x));
}

TEST(ShardSource, StopAndResumeThroughTheCursorReplaysOneUninterruptedEpochInOrder) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(481, 5), stream(100, 6), 200);  // 60 windows = 15 batches
  std::vector<int64_t> uninterrupted;
  {
    ShardSource s(open_token_dataset(dir.path()), options(2));
    for (int k = 0; k < 15; ++k)
      for (int64_t w : s.next_train().samples) uninterrupted.push_back(w);
  }
  std::vector<int64_t> resumed;
  nlohmann::json cursor;
  {
    ShardSource s(open_token_dataset(dir.path()), options(2));
    for (int k = 0; k < 6; ++k)
      for (int64_t w : s.next_train().samples) resumed.push_back(w);
    cursor = nlohmann::json::parse(s.state().dump());  // as a checkpoint would store it
  }
  EXPECT_EQ(cursor, (nlohmann::json{{"epoch", 0}, {"position", 24}}));
  {
    ShardSource s(open_token_dataset(dir.path()), options(1));
    s.load_state(cursor);
    for (int k = 0; k < 9; ++k)
      for (int64_t w : s.next_train().samples) resumed.push_back(w);
    EXPECT_EQ(s.state(), (nlohmann::json{{"epoch", 1}, {"position", 0}}));
  }
  EXPECT_EQ(resumed, uninterrupted);
  std::vector<int64_t> sorted = uninterrupted;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
}

TEST(ShardSource, CorruptShardStopsTheTrainerThreadWithFileAndOffset) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(3001, 7), stream(300, 8), 4000);
  const std::string shard = dir.file("train_0.frs");
  std::string bytes = test::read_text(shard);
  bytes[64 + 256 * 3 + 10] ^= 0x40;  // inside block 3
  test::write_text(shard, bytes);
  ShardSource s(open_token_dataset(dir.path()), options(2));
  try {
    for (int k = 0; k < 200; ++k) s.train_batch(k);
    FAIL() << "trained on a corrupt block";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(shard + "' is corrupt at byte offset 832"), std::string::npos) << e.what();
  }
}

// Two same-size shards swapped (or one replaced by a same-size shard of another dataset) pass the
// size check; the manifest's hashes catch them at open, before a step trains on them.
TEST(ShardSource, SwappedSameSizeShardsAreRefusedAtOpen) {
  for (bool index_hash : {true, false}) {  // new manifests; older ones with the file hash only
    test::TempDir dir;
    write_dataset(dir.path(), stream(2000, 7), stream(300, 8), 1000);
    if (!index_hash) {
      auto m = nlohmann::json::parse(test::read_text(dir.file("manifest.json")));
      for (auto& e : m["splits"]["train"]) e.erase("index_xxh64");
      test::write_text(dir.file("manifest.json"), m.dump());
    }
    EXPECT_NO_THROW(open_token_dataset(dir.path()));
    const std::string a = test::read_text(dir.file("train_0.frs")), b = test::read_text(dir.file("train_1.frs"));
    ASSERT_EQ(a.size(), b.size());
    test::write_text(dir.file("train_0.frs"), b);
    test::write_text(dir.file("train_1.frs"), a);
    try {
      open_token_dataset(dir.path());
      FAIL() << "swapped shards were accepted (index_hash " << index_hash << ")";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("train_0.frs") + "' does not hold what the manifest lists"),
                std::string::npos)
          << e.what();
    }
  }
}

// A manifest that parses but lacks a key or has a wrong type is bad input (DataError, exit 2)
// naming the manifest, not a raw JSON-library error (exit 1).
TEST(ShardSource, AManifestWithAMissingKeyOrAWrongTypeNamesTheFile) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(500, 1), stream(100, 1), 1000);
  const auto good = nlohmann::json::parse(test::read_text(dir.file("manifest.json")));
  auto missing = good;
  missing["tokenizer"].erase("vocab");
  auto wrong = good;
  wrong["splits"]["val"] = "val_0.frs";
  auto wrong_type = good;
  wrong_type["tokenizer"]["vocab"] = "many";
  for (const nlohmann::json& m : {missing, wrong, wrong_type}) {
    test::write_text(dir.file("manifest.json"), m.dump());
    try {
      open_token_dataset(dir.path());
      FAIL() << m.dump();
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir.file("manifest.json") + "' is malformed"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
    }
  }
}

// Manifest fields that parse but say what cannot be (hand edits, another tool) are refused by name
// before anything trains: a vocabulary that is no whole number in model.vocab's range (256.5 was
// trained as 256; 2^40 asked for terabytes with the allocator's raw text), a count that is not the
// shard's, a dtype no shard has, a shard listed twice.
TEST(ShardSource, ManifestFieldsAreCheckedAgainstTheShards) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(500, 1), stream(100, 1), 200);
  auto good = nlohmann::json::parse(test::read_text(dir.file("manifest.json")));
  good["dtype"] = "uint16";
  good["splits"]["train"][0]["tokens"] = 200;
  test::write_text(dir.file("manifest.json"), good.dump());
  ASSERT_NO_THROW(open_token_dataset(dir.path()));
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& m) { m["tokenizer"]["vocab"] = 256.5; }, "tokenizer.vocab is 256.5"},
      {[](nlohmann::json& m) { m["tokenizer"]["vocab"] = int64_t{1} << 40; }, "tokenizer.vocab is 1099511627776"},
      {[](nlohmann::json& m) { m["tokenizer"]["vocab"] = 1; }, "tokenizer.vocab is 1"},
      {[](nlohmann::json& m) { m["splits"]["train"][0]["tokens"] = "200"; }, "\"tokens\": \"200\""},
      {[](nlohmann::json& m) { m["splits"]["train"][0]["tokens"] = -200; }, "\"tokens\": -200"},
      {[](nlohmann::json& m) { m["splits"]["train"][0]["tokens"] = 201; }, "the shard holds 200"},
      {[](nlohmann::json& m) { m["dtype"] = "uint64"; }, "dtype is \"uint64\""},
      {[](nlohmann::json& m) { m["dtype"] = "uint32"; }, "holds uint16"},
      {[](nlohmann::json& m) { m["splits"]["train"].push_back(m["splits"]["train"][0]); }, "more than once"},
      {[](nlohmann::json& m) { m["splits"]["val"].push_back(m["splits"]["train"][1]); }, "more than once"},
  };
  for (const auto& [edit, named] : edits) {
    nlohmann::json m = good;
    edit(m);
    test::write_text(dir.file("manifest.json"), m.dump());
    try {
      open_token_dataset(dir.path());
      ADD_FAILURE() << "accepted: " << named;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
}

// Found by the manifest fuzz target: a manifest that is valid JSON but not an object (here "")
// or whose format fields have the wrong type escaped as a raw JSON-library error.
TEST(ShardSource, AManifestThatIsNotAnObjectOrHasAWrongTypedFormatNamesTheFile) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(500, 1), stream(100, 1), 1000);
  auto good = nlohmann::json::parse(test::read_text(dir.file("manifest.json")));
  auto version = good;
  version["format_version"] = "1";
  auto format = good;
  format["format"] = 7;
  // Found by the fuzz target too: without format_version the message read the absent key through a
  // const reference (an assertion, not an error).
  auto no_version = good;
  no_version.erase("format_version");
  for (const std::string& text :
       {std::string("\"\""), std::string("[1, 2]"), version.dump(), format.dump(), no_version.dump()}) {
    test::write_text(dir.file("manifest.json"), text);
    try {
      open_token_dataset(dir.path());
      FAIL() << text;
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir.file("manifest.json")), std::string::npos) << msg;
      EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
    }
  }
}

TEST(ShardSource, ManifestVocabLargerThanTheModelIsAConfigError) {
  test::TempDir dir;
  write_dataset(dir.path(), stream(500, 1), stream(100, 1), 1000);
  ShardSourceOptions o = options(0);
  o.vocab = 100;
  EXPECT_THROW(ShardSource(open_token_dataset(dir.path()), o), ConfigError);
  EXPECT_THROW(open_token_dataset(dir.file("missing")), DataError);
}

// A validation split too short for a window: empty (prepare --val-fraction 0) it is prepared again
// with a positive fraction, not fixed by a smaller block; short, either helps.
TEST(ShardSource, AnEmptyValidationSplitSaysToPrepareWithAValFraction) {
  test::TempDir empty, short_val;
  write_dataset(empty.path(), stream(500, 1), {}, 1000);
  try {
    ShardSource s(open_token_dataset(empty.path()), options(0));
    FAIL() << "an empty validation split was accepted";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("validation split has 0 tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("--val-fraction above 0"), std::string::npos) << what;
    EXPECT_EQ(what.find("smaller model.block"), std::string::npos) << what;
  }
  write_dataset(short_val.path(), stream(500, 1), stream(5, 1), 1000);
  try {
    ShardSource s(open_token_dataset(short_val.path()), options(0));
    FAIL() << "a validation split of 5 tokens was accepted for block 8";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("a larger --val-fraction"), std::string::npos) << e.what();
  }
}

// An llm.c token file: 256 int32 header words (magic, version, count), then uint16 tokens.
std::string llmc_file(const std::vector<int32_t>& tokens) {
  std::string s(1024 + 2 * tokens.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(s.data());
  detail::put_u32(p, 20240520);
  detail::put_u32(p + 4, 1);
  detail::put_u32(p + 8, static_cast<uint32_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) detail::put_u16(p + 1024 + 2 * i, static_cast<uint16_t>(tokens[i]));
  return s;
}

TEST(ShardSource, ReadsLlmcBinFiles) {
  test::TempDir dir;
  std::vector<int32_t> a(500), b(300), v(200);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(50256 - i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i * 3);
  test::write_text(dir.file("fineweb_train_000001.bin"), llmc_file(a));
  test::write_text(dir.file("fineweb_train_000002.bin"), llmc_file(b));
  test::write_text(dir.file("fineweb_val_000000.bin"), llmc_file(v));
  TokenDataset d = open_token_dataset(dir.path());
  EXPECT_EQ(d.format, "llm.c");
  ASSERT_EQ(d.train.size(), 800u);
  std::vector<int32_t> out(10);
  d.train.read(495, 10, out.data());  // crosses from file 1 into file 2
  EXPECT_EQ(out, (std::vector<int32_t>{a[495], a[496], a[497], a[498], a[499], 0, 1, 2, 3, 4}));

  ShardSourceOptions o = options(0);
  o.vocab = 256;  // too small for GPT-2 tokens: must stop, naming the file and offset
  ShardSource s(std::move(d), o);
  try {
    for (int k = 0; k < 100; ++k) s.train_batch(k);
    FAIL() << "a token outside the vocabulary reached the model";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("fineweb_train_000001.bin' at byte offset"), std::string::npos) << e.what();
  }
}

// nanoGPT's prepare.py writes train.bin and val.bin: uint16 tokens, no header.
TEST(ShardSource, ReadsNanoGptBinFilesAndRefusesAnOddSize) {
  test::TempDir dir;
  auto raw = [](const std::vector<int32_t>& tokens) {
    std::string s(2 * tokens.size(), '\0');
    for (size_t i = 0; i < tokens.size(); ++i)
      detail::put_u16(reinterpret_cast<uint8_t*>(s.data()) + 2 * i, static_cast<uint16_t>(tokens[i]));
    return s;
  };
  std::vector<int32_t> t(700), v(90);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7919) % 50257);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i + 1000);
  test::write_text(dir.file("train.bin"), raw(t));
  test::write_text(dir.file("val.bin"), raw(v));
  TokenDataset d = open_token_dataset(dir.path());
  EXPECT_EQ(d.format, "nanoGPT");
  ASSERT_EQ(d.train.size(), 700u);
  ASSERT_EQ(d.val.size(), 90u);
  std::vector<int32_t> out(5);
  d.train.read(0, 5, out.data());  // the first token is the file's first two bytes: no header skipped
  EXPECT_EQ(out, (std::vector<int32_t>{t[0], t[1], t[2], t[3], t[4]}));
  d.val.read(85, 5, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{v[85], v[86], v[87], v[88], v[89]}));
  test::write_text(dir.file("val.bin"), raw(v) + "x");
  try {
    open_token_dataset(dir.path());
    FAIL() << "an odd-sized nanoGPT file was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("val.bin' is invalid at byte offset 180"), std::string::npos) << e.what();
  }
}

TEST(ShardSource, TruncatedOrForeignLlmcFileIsRefusedWithItsName) {
  test::TempDir dir;
  std::string good = llmc_file(std::vector<int32_t>(100, 7));
  test::write_text(dir.file("x_val_0.bin"), good);
  test::write_text(dir.file("x_train_0.bin"), good.substr(0, good.size() - 3));
  try {
    open_token_dataset(dir.path());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("x_train_0.bin' is invalid at byte offset 1221"), std::string::npos)
        << e.what();
  }
  good[0] = 'X';
  test::write_text(dir.file("x_train_0.bin"), good);
  EXPECT_THROW(open_token_dataset(dir.path()), DataError);
}

}  // namespace
}  // namespace frugal::shard_source_test
