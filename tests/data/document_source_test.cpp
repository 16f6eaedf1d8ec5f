// Documents datasets (data/document_dataset.h): documents come back as stored; a training batch
// holds one document a row with targets only where the loss mask is 1 (padding and the rest
// ignored), cut to the block; a pass visits every document once in a seeded order and the next
// pass in another; a rank's micro-batches are the single process's interleaved; the same index
// gives the same batch; validation takes the val split in order; a corrupt record is named.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include <nlohmann/json.hpp>

#include "data/internal/little_endian.h"
#include "frugal/core/errors.h"
#include "frugal/data/document_dataset.h"
#include "frugal/data/packing.h"
#include "frugal/data/shard.h"
#include "test_util.h"

namespace frugal::document_source_test {
namespace {

std::string record_of(const MaskedDocument& d) {
  std::string rec(4 + 5 * d.ids.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(rec.data());
  detail::put_u32(p, static_cast<uint32_t>(d.ids.size()));
  for (size_t k = 0; k < d.ids.size(); ++k) detail::put_u32(p + 4 + 4 * k, static_cast<uint32_t>(d.ids[k]));
  for (size_t k = 0; k < d.mask.size(); ++k) p[4 + 4 * d.ids.size() + k] = d.mask[k];
  return rec;
}

// Document i of the train split: ids 10 i + 1, ..., length 3 + i % 5; the second half trained on.
MaskedDocument doc(int64_t i) {
  MaskedDocument d;
  const int64_t n = 3 + i % 5;
  for (int64_t t = 0; t < n; ++t) {
    d.ids.push_back(static_cast<int32_t>((10 * i + t + 1) % 500));
    d.mask.push_back(t >= n / 2 ? 1 : 0);
  }
  return d;
}

nlohmann::json write_split(const std::string& dir, const std::string& split, const std::vector<MaskedDocument>& docs,
                           const std::string& corrupt = "") {
  const std::string file = split + "_000000.frs";
  ShardWriter w(dir + "/" + file, ShardKind::kRecords, ShardDtype::kBytes);
  for (const MaskedDocument& d : docs) w.add_record(record_of(d));
  if (!corrupt.empty()) w.add_record(corrupt);
  w.finish();
  return nlohmann::json::array({{{"file", file}, {"bytes", std::filesystem::file_size(dir + "/" + file)}}});
}

std::string make_dataset(const test::TempDir& dir, int64_t train, int64_t val, const std::string& corrupt = "") {
  std::vector<MaskedDocument> t, v;
  for (int64_t i = 0; i < train; ++i) t.push_back(doc(i));
  for (int64_t i = 0; i < val; ++i) v.push_back(doc(100 + i));
  nlohmann::json m = {{"format", "frugal-dataset"},
                      {"format_version", 1},
                      {"kind", "documents"},
                      {"content", "chat"},
                      {"tokenizer", {{"name", "hf"}, {"vocab", 500}}},
                      {"counts", {{"train_tokens", 0}, {"val_tokens", 0}}}};
  m["splits"]["train"] = write_split(dir.path(), "train", t, corrupt);
  m["splits"]["val"] = write_split(dir.path(), "val", v);
  test::write_text(dir.file("manifest.json"), m.dump());
  return dir.path();
}

TEST(DocumentSource, RowsHoldOneDocumentWithTargetsOnlyWhereTheMaskIsOne) {
  test::TempDir dir;
  const std::string path = make_dataset(dir, 7, 3);
  EXPECT_TRUE(is_document_dataset(path));
  auto ds = std::make_shared<const DocumentDataset>(path);
  ASSERT_EQ(ds->size("train"), 7);
  EXPECT_EQ(ds->document("train", 4).ids, doc(4).ids);
  EXPECT_EQ(ds->document("val", 2).mask, doc(102).mask);
  // Block 5: document 4 (7 tokens) is cut to 6; shorter ones padded.
  DocumentSource src(ds, 7, 5, /*seed=*/3);
  const Batch b = src.train_batch(0);
  ASSERT_EQ(b.x.sizes(), (std::vector<int64_t>{7, 5}));
  std::set<int64_t> seen;
  for (int64_t r = 0; r < 7; ++r) {
    const int64_t i = (b.x[r][0].item<int64_t>() - 1) / 10;  // the row's document, from its first id
    seen.insert(i);
    const MaskedDocument d = doc(i);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(d.ids.size()), 6);
    for (int64_t t = 0; t < 5; ++t) {
      const int64_t want_x = t + 1 < n ? d.ids[static_cast<size_t>(t)] : 0;
      const int64_t want_y =
          t + 1 < n && d.mask[static_cast<size_t>(t + 1)] ? d.ids[static_cast<size_t>(t + 1)] : kIgnoreIndex;
      EXPECT_EQ(b.x[r][t].item<int64_t>(), want_x) << "document " << i << " position " << t;
      EXPECT_EQ(b.y[r][t].item<int64_t>(), want_y) << "document " << i << " position " << t;
    }
  }
  EXPECT_EQ(seen.size(), 7u) << "a pass does not visit every document once";
  // The next pass: every document again, in another order; the same index, the same batch.
  const Batch next = src.train_batch(1);
  std::set<int64_t> again;
  for (int64_t r = 0; r < 7; ++r) again.insert((next.x[r][0].item<int64_t>() - 1) / 10);
  EXPECT_EQ(again, seen);
  EXPECT_FALSE(next.x.equal(b.x)) << "two passes in the same order";
  DocumentSource fresh(ds, 7, 5, 3);
  EXPECT_TRUE(fresh.train_batch(1).x.equal(next.x));
  EXPECT_TRUE(fresh.train_batch(0).y.equal(b.y));
  // Validation: the val split in order.
  const Batch v = src.val_batch(0);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(v.x[r][0].item<int64_t>(), doc(100 + r).ids[0]);
}

TEST(DocumentSource, TwoRanksDrawTheSingleProcesssMicroBatchesInterleaved) {
  test::TempDir dir;
  auto ds = std::make_shared<const DocumentDataset>(make_dataset(dir, 11, 1));
  DocumentSource one(ds, 2, 8, 5), r0(ds, 2, 8, 5, 0, 2), r1(ds, 2, 8, 5, 1, 2);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(r0.train_batch(i).x.equal(one.train_batch(2 * i).x)) << i;
    EXPECT_TRUE(r1.train_batch(i).y.equal(one.train_batch(2 * i + 1).y)) << i;
  }
}

TEST(DocumentSource, ACorruptRecordAndAMissingValSplitAreNamed) {
  test::TempDir dir;
  auto ds = std::make_shared<const DocumentDataset>(make_dataset(dir, 2, 0, "abc"));
  try {
    ds->document("train", 2);
    FAIL() << "a 3-byte record was read as a document";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("train_000000.frs"), std::string::npos) << e.what();
  }
  DocumentSource src(ds, 1, 4, 0);
  try {
    src.val_batch(0);
    FAIL() << "an empty val split gave a batch";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("--val-fraction"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::document_source_test
