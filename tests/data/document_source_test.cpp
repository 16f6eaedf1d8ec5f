// Documents datasets (data/document_dataset.h): documents come back as stored; padded, a training
// batch holds one document a row with targets only where the loss mask is 1 (padding and the rest
// ignored), cut to the block; packed (the default), whole documents share rows with each token's
// position counted from its document's start and padding only at a row's end, far less padding
// than one a row; a pass visits every document once in a seeded order and the next pass in
// another; a rank's micro-batches are the single process's interleaved; the same index gives the
// same batch; validation takes the val split in order; a corrupt record is named; documents whose
// trained tokens all lie past model.block are left out with a warning, or refused when no document
// of a split keeps a target.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include <nlohmann/json.hpp>

#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/data/document_dataset.h"
#include "frugal/data/packing.h"
#include "test_util.h"

namespace frugal::document_source_test {
namespace {

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

// Document i of `n` tokens (ids 10 i + 1, ...) trained from token `first` on: a system prompt
// longer than the block before the assistant's turn.
MaskedDocument late_doc(int64_t i, int64_t n, int64_t first) {
  MaskedDocument d;
  for (int64_t t = 0; t < n; ++t) {
    d.ids.push_back(static_cast<int32_t>((10 * i + t + 1) % 500));
    d.mask.push_back(t >= first ? 1 : 0);
  }
  return d;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string make_dataset(const test::TempDir& dir, int64_t train, int64_t val, const std::string& corrupt = "") {
  std::vector<MaskedDocument> t, v;
  for (int64_t i = 0; i < train; ++i) t.push_back(doc(i));
  for (int64_t i = 0; i < val; ++i) v.push_back(doc(100 + i));
  return test::write_documents_dataset(dir.path(), t, v, 500, corrupt);
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
  constexpr auto kPad = DataConfig::Packing::kPad;
  DocumentSource src(ds, 7, 5, /*seed=*/3, 0, 1, false, kPad);
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
  DocumentSource fresh(ds, 7, 5, 3, 0, 1, false, kPad);
  EXPECT_TRUE(fresh.train_batch(1).x.equal(next.x));
  EXPECT_TRUE(fresh.train_batch(0).y.equal(b.y));
  // Validation: the val split in order.
  const Batch v = src.val_batch(0);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(v.x[r][0].item<int64_t>(), doc(100 + r).ids[0]);
}

TEST(DocumentSource, TwoRanksDrawTheSingleProcesssMicroBatchesInterleaved) {
  test::TempDir dir;
  auto ds = std::make_shared<const DocumentDataset>(make_dataset(dir, 11, 1));
  for (auto packing : {DataConfig::Packing::kPack, DataConfig::Packing::kPad}) {
    DocumentSource one(ds, 2, 8, 5, 0, 1, false, packing), r0(ds, 2, 8, 5, 0, 2, false, packing),
        r1(ds, 2, 8, 5, 1, 2, false, packing);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_TRUE(r0.train_batch(i).x.equal(one.train_batch(2 * i).x)) << i;
      EXPECT_TRUE(r1.train_batch(i).y.equal(one.train_batch(2 * i + 1).y)) << i;
    }
  }
}

// The documents of a packed row, from its positions: (first token, length in positions) each.
std::vector<std::pair<int64_t, int64_t>> segments(const Batch& b, int64_t r) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t T = b.x.size(1);
  for (int64_t t = 0; t < T; ++t) {
    if (b.pos[r][t].item<int64_t>() == 0) out.push_back({t, 0});
    EXPECT_EQ(b.pos[r][t].item<int64_t>(), t - out.back().first) << "row " << r << " position " << t;
    out.back().second += 1;
  }
  return out;
}

// Packing: whole documents (never one across two rows), each token's position counted from its
// document's start, targets where the mask says, padding only at a row's end; over one pass every
// training document exactly once; far less padding than one document a row; a fresh source (a
// resume) draws the same batch at the same index, past the first pass too.
TEST(DocumentSource, PackedRowsHoldWholeDocumentsWithPositionsFromEachStart) {
  test::TempDir dir;
  auto ds = std::make_shared<const DocumentDataset>(make_dataset(dir, 40, 3));
  const int64_t block = 16;
  DocumentSource src(ds, 1, block, 9);  // packing by default
  std::multiset<int64_t> seen;
  int64_t positions = 0, padding = 0;
  for (int64_t i = 0; static_cast<int64_t>(std::set<int64_t>(seen.begin(), seen.end()).size()) < 40; ++i) {
    ASSERT_LT(i, 40) << "a pass took more rows than documents";
    const Batch b = src.train_batch(i);
    ASSERT_TRUE(b.pos.defined());
    for (const auto& [start, n] : segments(b, 0)) {
      positions += n;
      const int64_t first = b.x[0][start].item<int64_t>();
      if (first == 0) {  // padding: the row's rest, no targets
        EXPECT_EQ(start + n, block);
        EXPECT_EQ(b.y[0].narrow(0, start, n).ne(kIgnoreIndex).sum().item<int64_t>(), 0);
        padding += n;
        continue;
      }
      const int64_t id = (first - 1) / 10;
      seen.insert(id);
      const MaskedDocument d = doc(id);
      ASSERT_EQ(n, static_cast<int64_t>(d.ids.size()) - 1) << "document " << id << " cut or split";
      for (int64_t u = 0; u < n; ++u) {
        EXPECT_EQ(b.x[0][start + u].item<int64_t>(), d.ids[static_cast<size_t>(u)]);
        const int64_t want = d.mask[static_cast<size_t>(u + 1)] ? d.ids[static_cast<size_t>(u + 1)] : kIgnoreIndex;
        EXPECT_EQ(b.y[0][start + u].item<int64_t>(), want);
      }
    }
  }
  EXPECT_EQ(seen.size(), 40u) << "a document came twice in one pass";
  // Documents train 2..6 positions each (4 on average): one a row would pad 3/4 of block 16.
  EXPECT_LT(static_cast<double>(padding) / static_cast<double>(positions), 0.2);
  DocumentSource again(ds, 1, block, 9), fresh(ds, 1, block, 9);
  for (int64_t i = 0; i < 30; ++i) again.train_batch(i);
  for (int64_t i : {29, 3, 17}) {
    const Batch a = again.train_batch(i), f = fresh.train_batch(i);
    EXPECT_TRUE(a.x.equal(f.x) && a.y.equal(f.y) && a.pos.equal(f.pos)) << i;
  }
  // Validation rows: the val split's documents in stored order, packed.
  const Batch v = src.val_batch(0);
  EXPECT_EQ(v.x[0][0].item<int64_t>(), doc(100).ids[0]);
  EXPECT_EQ(v.pos[0][static_cast<int64_t>(doc(100).ids.size()) - 1].item<int64_t>(), 0);
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
  // The empty validation split is refused as the source is made, before the first step: it used
  // to train train.eval_every steps and then fail at the first evaluation.
  try {
    DocumentSource src(ds, 1, 4, 0);
    FAIL() << "a dataset without validation documents was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no validation documents"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--val-fraction above 0"), std::string::npos) << e.what();
  }
}

// Block 5 keeps a document's first 6 tokens; these are trained from token 9 (or 11) on, so training
// would see no target at all (loss 0.0000 every step, val_loss nan): refused at once, saying where
// the targets lie and the block that reaches them.
TEST(DocumentSource, ASplitWhoseEveryTargetLiesPastTheBlockIsRefusedSayingWhere) {
  test::TempDir dir, val_dir;
  std::vector<MaskedDocument> late;
  for (int64_t i = 0; i < 4; ++i) late.push_back(late_doc(i, 14, i == 3 ? 11 : 9));
  auto ds = std::make_shared<const DocumentDataset>(test::write_documents_dataset(dir.path(), late, {doc(100)}, 500));
  for (auto packing : {DataConfig::Packing::kPack, DataConfig::Packing::kPad}) {
    try {
      DocumentSource src(ds, 2, 5, 0, 0, 1, false, packing);
      FAIL() << "a training split without a target within the block was accepted";
    } catch (const DataError& e) {
      const std::string what = e.what();
      for (const char* part : {"none of its 4 training documents", "model.block = 5", "token 9 to 11", "at least 11",
                               "--overflow split", "docs/data.md"})
        EXPECT_TRUE(contains(what, part)) << part << " missing from: " << what;
    }
  }
  // The validation split alike: an evaluation with no target is val_loss nan.
  auto vs = std::make_shared<const DocumentDataset>(
      test::write_documents_dataset(val_dir.path(), {doc(0), doc(1)}, {late_doc(7, 14, 9)}, 500));
  try {
    DocumentSource src(vs, 2, 5, 0);
    FAIL() << "a validation split without a target within the block was accepted";
  } catch (const DataError& e) {
    EXPECT_TRUE(contains(e.what(), "none of its 1 validation documents")) << e.what();
    EXPECT_TRUE(contains(e.what(), "val_loss nan")) << e.what();
  }
  EXPECT_NO_THROW(DocumentSource(vs, 2, 9, 0)) << "block 9 keeps token 9, a target";
}

// Some documents lose every target to the cut: they are left out of the rows (a row of them would
// train nothing), with one warning that counts them; every batch keeps targets.
TEST(DocumentSource, DocumentsWithEveryTargetPastTheBlockAreLeftOutWithAWarning) {
  test::TempDir dir;
  std::vector<MaskedDocument> train;
  for (int64_t i = 0; i < 6; ++i) train.push_back(doc(i));               // 3..7 tokens: whole in block 8
  for (int64_t i = 6; i < 8; ++i) train.push_back(late_doc(i, 14, 10));  // first target past token 9
  auto ds = std::make_shared<const DocumentDataset>(test::write_documents_dataset(dir.path(), train, {doc(100)}, 500));
  Console& con = Console::get();
  const bool was_quiet = con.quiet(), was_json = con.json_mode();
  con.set_quiet(false);
  con.set_json_mode(false);
  testing::internal::CaptureStdout();
  DocumentSource pad(ds, 1, 8, 4, 0, 1, false, DataConfig::Packing::kPad);
  const std::string said = testing::internal::GetCapturedStdout();
  con.set_quiet(was_quiet);
  con.set_json_mode(was_json);
  EXPECT_TRUE(contains(said, "warning: ")) << said;
  EXPECT_TRUE(contains(said, "2 of its 8 training documents")) << said;
  EXPECT_TRUE(contains(said, "at least 10")) << said;
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 12; ++i) {  // two passes of the 6 documents that train
    const Batch b = pad.train_batch(i);
    const int64_t id = (b.x[0][0].item<int64_t>() - 1) / 10;
    EXPECT_LT(id, 6) << "batch " << i << " holds a document with no target within the block";
    EXPECT_GT(count_targets(b.y), 0) << "batch " << i;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 6u);
  DocumentSource pack(ds, 1, 8, 4);
  std::vector<int64_t> order(8);
  for (int64_t i = 0; i < 8; ++i) order[static_cast<size_t>(i)] = i;
  int64_t rows_docs = 0;
  for (const auto& row : pack.build_rows("train", order))
    for (int64_t d : row) {
      EXPECT_LT(d, 6) << "a packed row holds a document with no target within the block";
      ++rows_docs;
    }
  EXPECT_EQ(rows_docs, 6);
}

}  // namespace
}  // namespace frugal::document_source_test
