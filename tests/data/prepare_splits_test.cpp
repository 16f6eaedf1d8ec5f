// frugal prepare checks the splits it is about to publish against what frugal train needs
// (detail::check_splits): an empty validation split is published with a warning that says what to
// change (text --val-fraction 0, a CSV of one row); a documents dataset whose training split would
// be empty (every document dropped at --max-tokens, pieces without a target, everything held out)
// is refused with the cause and the flag, and nothing is published.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "data/internal/record_prepare.h"
#include "frugal/core/errors.h"
#include "frugal/data/prepare.h"
#include "test_util.h"

namespace frugal::prepare_splits_test {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the DataError check_splits throws for report `r` ("" when it throws none).
std::string refusal(const PrepareOptions& o, PrepareReport r) {
  try {
    detail::check_splits(o, &r);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// Before: exit 0 and no word of it; frugal train then refused the dataset ("validation split has 0
// tokens ... use more data or a smaller model.block").
TEST(PrepareSplits, TextWithValFractionZeroWarnsThatTrainingNeedsValidation) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i) text += fmt::format("document {} of the corpus\n\n", i);
  test::write_text(dir.file("c.txt"), text);
  auto p = test::run_frugal(
      fmt::format("prepare '{}' --out '{}' --val-fraction 0 --quiet", dir.file("c.txt"), dir.file("ds")));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_TRUE(contains(p.output, "warning: the validation split is empty")) << p.output;
  EXPECT_TRUE(contains(p.output, "--val-fraction above 0")) << p.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("ds/manifest.json"))) << "a warning does not stop the dataset";
  auto fine = test::run_frugal(
      fmt::format("prepare '{}' --out '{}' --val-fraction 0.1 --quiet", dir.file("c.txt"), dir.file("ds2")));
  ASSERT_EQ(fine.exit_code, 0) << fine.output;
  EXPECT_FALSE(contains(fine.output, "warning")) << fine.output;
}

// Before: "1 train / 0 val", exit 0, no warning.
TEST(PrepareSplits, ACsvOfOneRowWarnsThatItsValidationSplitIsEmpty) {
  test::TempDir dir;
  test::write_text(dir.file("t.csv"), "x,y,label\n1.5,2,a\n");
  auto p =
      test::run_frugal(fmt::format("prepare '{}' --out '{}' --format csv --quiet", dir.file("t.csv"), dir.file("ds")));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_TRUE(contains(p.output, "warning: the validation split is empty (1 sample,")) << p.output;
  EXPECT_TRUE(contains(p.output, "more data")) << p.output;
}

// The documents cases (a chat prepare needs a Hugging Face tokenizer; CTest chat_template_interop
// runs them end to end): the cause and the flag to change, for each way the training split is empty.
TEST(PrepareSplits, ADocumentsDatasetWithoutTrainingDocumentsIsRefusedNamingTheFlag) {
  PrepareOptions o;
  o.format = InputFormat::kChat;
  PrepareReport r;
  r.kind = "documents";
  r.documents_in = 10;
  r.dropped_documents = 10;
  r.truncated_documents = 10;
  o.max_tokens = 8;
  std::string why = refusal(o, r);
  EXPECT_TRUE(contains(why, "none of the 10 documents read keeps a token to train on")) << why;
  EXPECT_TRUE(contains(why, "10 truncated to their first --max-tokens 8")) << why;
  EXPECT_TRUE(contains(why, "raise --max-tokens")) << why;
  EXPECT_TRUE(contains(why, "--overflow split")) << why;

  o.max_tokens = 1;
  o.overflow = "split";
  r.truncated_documents = 0;
  r.split_documents = 10;
  r.dropped_documents = 300;
  why = refusal(o, r);
  EXPECT_TRUE(contains(why, "300 pieces dropped, 10 split into pieces of --max-tokens 1")) << why;
  EXPECT_TRUE(contains(why, "raise --max-tokens")) << why;

  PrepareOptions held;
  held.val_fraction = 0.9;
  PrepareReport one;
  one.kind = "documents";
  one.documents_in = one.documents = one.val_records = 1;
  why = refusal(held, one);
  EXPECT_TRUE(contains(why, "every one of the 1 documents went to the validation split")) << why;
  EXPECT_TRUE(contains(why, "lower --val-fraction")) << why;

  // Training documents but no validation ones: published, with a warning.
  PrepareOptions none;
  none.val_fraction = 0;
  PrepareReport kept;
  kept.kind = "documents";
  kept.documents_in = kept.documents = kept.train_records = 5;
  detail::check_splits(none, &kept);
  ASSERT_EQ(kept.warnings.size(), 1u);
  EXPECT_TRUE(contains(kept.warnings[0], "--val-fraction above 0")) << kept.warnings[0];
  EXPECT_TRUE(contains(format_report(kept), "\nwarning: the validation split is empty (5 documents"))
      << format_report(kept);
}

}  // namespace
}  // namespace frugal::prepare_splits_test
