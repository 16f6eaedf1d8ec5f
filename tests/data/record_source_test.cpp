// records:DIR batches: x and y hold the prepared values, an epoch visits every training record
// once, a stop/resume through state()/load_state() continues the uninterrupted order exactly,
// ranks are disjoint and covering, batches do not depend on the worker count, and image
// batches are (B, 3, H, W) floats in [0, 1].
#include "frugal/data/record_source.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <set>

#include "frugal/core/config.h"
#include "frugal/core/errors.h"
#include "frugal/data/prepare.h"
#include "image_writers.h"
#include "test_util.h"

namespace frugal::record_source_test {
namespace {

// A table whose first feature is the row number and label = row % 3: every batch row names
// the CSV row it came from.
std::string make_table(const test::TempDir& dir, int rows) {
  std::string csv = "row,half,label\n";
  for (int i = 0; i < rows; ++i)
    csv += fmt::format("{},{},{}\n", i, i * 0.5, i % 3 == 0 ? "a" : i % 3 == 1 ? "b" : "c");
  test::write_text(dir.file("t.csv"), csv);
  PrepareOptions o;
  o.inputs = {dir.file("t.csv")};
  o.out_dir = dir.file("ds");
  o.format = InputFormat::kCsv;
  o.val_fraction = 0.1;
  o.shard_records = 16;  // several shards per split
  prepare_dataset(o);
  return dir.file("ds");
}

RecordSourceOptions opts(int workers, int64_t batch = 8, int64_t rank = 0, int64_t world = 1) {
  RecordSourceOptions o;
  o.micro_batch = batch;
  o.seed = 42;
  o.workers = workers;
  o.prefetch = 3;
  o.rank = rank;
  o.world_size = world;
  return o;
}

std::vector<int64_t> rows_of(const Batch& b) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < b.x.size(0); ++i) out.push_back(static_cast<int64_t>(b.x[i][0].item<float>()));
  return out;
}

TEST(RecordSource, TableBatchesHoldThePreparedValues) {
  test::TempDir dir;
  RecordSource src(open_record_dataset(make_table(dir, 100)), opts(1));
  EXPECT_EQ(src.train_tokens() + src.val_tokens(), 100);
  EXPECT_EQ(src.val_tokens(), 10);
  const Batch b = src.train_batch(0);
  ASSERT_EQ(b.x.sizes(), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(b.x.scalar_type(), at::kFloat);
  ASSERT_EQ(b.y.sizes(), (std::vector<int64_t>{8}));
  EXPECT_EQ(b.y.scalar_type(), at::kLong);
  for (int64_t i = 0; i < 8; ++i) {
    const float row = b.x[i][0].item<float>();
    EXPECT_FLOAT_EQ(b.x[i][1].item<float>(), row * 0.5f);
    EXPECT_EQ(b.y[i].item<int64_t>(), static_cast<int64_t>(row) % 3);  // classes a, b, c -> 0, 1, 2
  }
  // Validation: the held-out rows in file order, the same at every call.
  const Batch v = src.val_batch(0);
  EXPECT_TRUE(at::equal(v.x, src.val_batch(0).x));
  const auto vr = rows_of(v);
  EXPECT_TRUE(std::is_sorted(vr.begin(), vr.begin() + 8));
  // The class-prior baseline: about ln 3 for three balanced classes.
  EXPECT_NEAR(src.unigram_baseline(), std::log(3.0), 0.1);
}

TEST(RecordSource, StopAndResumeContinuesTheUninterruptedOrder) {
  test::TempDir dir;
  const std::string ds = make_table(dir, 100);  // 90 training rows: an epoch is 11.25 batches of 8
  std::vector<int64_t> straight;
  {
    RecordSource src(open_record_dataset(ds), opts(2));
    for (int k = 0; k < 24; ++k) {
      const auto r = rows_of(src.train_batch(k));
      straight.insert(straight.end(), r.begin(), r.end());
    }
  }
  // One epoch visits each training row exactly once.
  std::set<int64_t> first_epoch(straight.begin(), straight.begin() + 90);
  EXPECT_EQ(first_epoch.size(), 90u);
  for (int stop : {1, 7, 11, 12, 17}) {
    std::vector<int64_t> resumed;
    nlohmann::json cursor;
    {
      RecordSource src(open_record_dataset(ds), opts(2));
      for (int k = 0; k < stop; ++k) {
        const auto r = rows_of(src.train_batch(k));
        resumed.insert(resumed.end(), r.begin(), r.end());
      }
      cursor = src.state();
    }
    RecordSource src(open_record_dataset(ds), opts(1));
    src.load_state(cursor);
    for (int k = stop; k < 24; ++k) {
      const RecordBatch b = src.next_train();
      for (int64_t i = 0; i < b.x.size(0); ++i) resumed.push_back(static_cast<int64_t>(b.x[i][0].item<float>()));
    }
    EXPECT_EQ(resumed, straight) << "stopped after " << stop << " batches, cursor " << cursor.dump();
  }
}

TEST(RecordSource, RanksAreDisjointAndCoverAnEpoch) {
  test::TempDir dir;
  const std::string ds = make_table(dir, 100);
  std::multiset<int64_t> all;
  int64_t total = 0;
  for (int64_t rank = 0; rank < 3; ++rank) {
    RecordSource src(open_record_dataset(ds), opts(1, 5, rank, 3));
    const int64_t per = src.sampler().per_epoch();  // 30 each for 90 records
    EXPECT_EQ(per, 30);
    total += per;
    for (int k = 0; k < per / 5; ++k)
      for (int64_t r : rows_of(src.train_batch(k))) all.insert(r);
  }
  EXPECT_EQ(total, 90);
  EXPECT_EQ(all.size(), 90u);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 90u);  // no row twice: disjoint
}

TEST(RecordSource, BatchesDoNotDependOnTheWorkerCount) {
  test::TempDir dir;
  const std::string ds = make_table(dir, 60);
  RecordSource a(open_record_dataset(ds), opts(0)), b(open_record_dataset(ds), opts(3));
  for (int k = 0; k < 10; ++k) {
    const Batch x = a.train_batch(k), y = b.train_batch(k);
    EXPECT_TRUE(at::equal(x.x, y.x) && at::equal(x.y, y.y)) << k;
  }
}

TEST(RecordSource, ImageBatchesAreFloatChwInTheUnitInterval) {
  FRUGAL_NEED_FEATURE("images");
  test::TempDir dir;
  for (int c = 0; c < 3; ++c) {
    std::filesystem::create_directories(dir.file(fmt::format("in/c{}", c)));
    for (int i = 0; i < 4; ++i)
      test::write_bytes(dir.file(fmt::format("in/c{}/{}.png", c, i)),
                        encode_png(test::gradient_image(12, 10, c * 4 + i)));
  }
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.out_dir = dir.file("ds");
  o.format = InputFormat::kImages;
  o.image_size = 6;
  o.val_fraction = 0.25;
  prepare_dataset(o);
  Config c;
  c.data.source = {DataSource::Kind::kRecords, dir.file("ds")};
  c.data.micro_batch = 4;
  auto src = make_batch_source(c);  // the factory builds the records source
  const Batch b = src->train_batch(0);
  ASSERT_EQ(b.x.sizes(), (std::vector<int64_t>{4, 3, 6, 6}));
  EXPECT_GE(b.x.min().item<float>(), 0.0f);
  EXPECT_LE(b.x.max().item<float>(), 1.0f);
  EXPECT_GT(b.x.max().item<float>(), 0.5f);  // the gradients span most of [0, 255]
  EXPECT_GE(b.y.min().item<int64_t>(), 0);
  EXPECT_LT(b.y.max().item<int64_t>(), 3);
  EXPECT_FALSE(b.x.is_pinned());  // run.device = cpu: plain memory
  EXPECT_NE(src->describe().find("records:"), std::string::npos);
}

TEST(RecordSource, WrongDatasetKindsAreNamed) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), "some text\n\nmore text\n");
  PrepareOptions o;
  o.inputs = {dir.file("c.txt")};
  o.out_dir = dir.file("tokens");
  o.val_fraction = 0.2;
  prepare_dataset(o);
  try {
    open_record_dataset(dir.file("tokens"));
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("shards:DIR"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_record_dataset(dir.file("missing")), DataError);
}

TEST(RecordSource, AShortOrMissingShardIsNamedWithTheManifestsSize) {
  test::TempDir dir;
  const std::string ds = make_table(dir, 100);
  const auto manifest = nlohmann::json::parse(test::read_text(ds + "/manifest.json"));
  const std::string shard = ds + "/" + manifest["splits"]["train"][0]["file"].get<std::string>();
  const uint64_t bytes = manifest["splits"]["train"][0]["bytes"].get<uint64_t>();
  std::filesystem::resize_file(shard, bytes - 1);
  try {
    open_record_dataset(ds);
    FAIL() << "a truncated shard was opened";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("has {} bytes, the manifest says {}", bytes - 1, bytes)),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(shard);
  try {
    open_record_dataset(ds);
    FAIL() << "a missing shard went unnoticed";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("listed in the manifest is missing"), std::string::npos) << e.what();
  }
}

// A manifest without format_version or kind is a DataError naming what is missing (the message
// once read the absent key through a const reference: an assertion, found by the fuzz target on
// the token reader, which shares the manifest reader).
TEST(RecordSource, AManifestWithoutItsFormatFieldsIsADataErrorSayingWhatIsMissing) {
  test::TempDir dir;
  const std::string ds = make_table(dir, 40);
  const auto good = nlohmann::json::parse(test::read_text(ds + "/manifest.json"));
  for (const char* key : {"format_version", "kind"}) {
    auto m = good;
    m.erase(key);
    test::write_text(ds + "/manifest.json", m.dump());
    try {
      open_record_dataset(ds);
      FAIL() << "accepted a manifest without " << key;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace frugal::record_source_test
