// builtin:arith: determinism, grammar, held-out disjointness; windows; text source errors.
#include "frugal/data/arith.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <regex>
#include <set>
#include <sstream>

#include "frugal/core/errors.h"
#include "frugal/data/batch_source.h"
#include "test_util.h"

namespace frugal::arith_test {
namespace {

TEST(Arith, SameSeedSameTextOtherSeedOtherText) {
  ArithTask t(3);
  EXPECT_EQ(t.train_text(500, 42), t.train_text(500, 42));
  EXPECT_NE(t.train_text(500, 42), t.train_text(500, 43));
}

TEST(Arith, EveryLineFollowsTheGrammarAndAddsUp) {
  ArithTask t(3);
  std::istringstream in(t.train_text(2000, 5));
  std::regex line(R"((0|[1-9][0-9]{0,2})\+(0|[1-9][0-9]{0,2})=(0|[1-9][0-9]*))");
  std::string l;
  int n = 0;
  while (std::getline(in, l)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(std::stol(m[1]) + std::stol(m[2]), std::stol(m[3])) << l;
    ++n;
  }
  EXPECT_EQ(n, 2000);
}

TEST(Arith, HeldOutProblemsNeverAppearInTraining) {
  ArithTask t(2);
  std::set<std::string> train;
  std::istringstream in(t.train_text(50000, 9));
  std::string l;
  while (std::getline(in, l)) train.insert(l + "\n");
  auto held = t.held_out(100000, 9);
  // About a tenth of the 10^4 pairs are held out; none of them is in the training text.
  EXPECT_GT(held.size(), 800u);
  EXPECT_LT(held.size(), 1200u);
  for (const auto& p : held) EXPECT_EQ(train.count(p.line()), 0u) << p.line();
  // The training text covers most non-held-out pairs, so the check above is not vacuous.
  EXPECT_GT(train.size(), 8000u);
}

TEST(Arith, HeldOutSetDoesNotDependOnTheSeed) {
  ArithTask t(2);
  auto a = t.held_out(100000, 1), b = t.held_out(100000, 2);
  auto key = [](const std::vector<ArithProblem>& v) {
    std::set<std::pair<int64_t, int64_t>> s;
    for (const auto& p : v) s.insert({p.a, p.b});
    return s;
  };
  EXPECT_EQ(key(a), key(b));
}

TEST(WindowSource, BatchesArePureFunctionsOfSeedAndIndex) {
  std::vector<int32_t> toks(1000);
  for (int i = 0; i < 1000; ++i) toks[i] = i % 251;
  WindowSource a(toks, toks, 4, 8, 7, "t"), b(toks, toks, 4, 8, 7, "t");
  auto b5 = a.train_batch(5);
  a.train_batch(6);
  EXPECT_TRUE(torch::equal(b.train_batch(5).x, b5.x));
  EXPECT_FALSE(torch::equal(a.train_batch(4).x, b5.x));
  // Targets are inputs shifted by one.
  EXPECT_TRUE(torch::equal(b5.x.narrow(1, 1, 7), b5.y.narrow(1, 0, 7)));
}

// A step's micro-batches (4 of them in all) hold the same sequences on 1, 2 or 4 ranks: the
// in-memory sources need no cursor to resume on another number of processes.
TEST(WindowSource, AStepsSequencesAreTheSameForAnyWorldSize) {
  Config c;
  c.data.micro_batch = 3;
  c.model.block = 8;
  c.data.arith_lines = 500;
  auto step_rows = [&](int64_t world, int64_t step) {
    std::multiset<std::vector<int64_t>> rows;
    const int64_t accum = 4 / world;
    for (int64_t r = 0; r < world; ++r) {
      auto src = make_batch_source(c, r, world);
      for (int64_t k = 0; k < accum; ++k) {
        const at::Tensor x = src->train_batch(step * accum + k).x.contiguous();
        for (int64_t i = 0; i < x.size(0); ++i)
          rows.insert(std::vector<int64_t>(x[i].data_ptr<int64_t>(), x[i].data_ptr<int64_t>() + x.size(1)));
      }
    }
    return rows;
  };
  for (int64_t step : {0, 1, 7}) {
    const auto one = step_rows(1, step);
    EXPECT_EQ(step_rows(2, step), one) << "step " << step;
    EXPECT_EQ(step_rows(4, step), one) << "step " << step;
  }
}

TEST(WindowSource, TooShortSplitNamesTheSplitAndTheNeed) {
  try {
    WindowSource s(std::vector<int32_t>(100, 1), std::vector<int32_t>(5, 1), 2, 8, 0, "text:x");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("validation split has 5 tokens"), std::string::npos) << e.what();
  }
}

TEST(BatchSource, MissingTextFileIsADataError) {
  Config c;
  c.data.source = {DataSource::Kind::kText, "/nonexistent/corpus.txt"};
  try {
    make_batch_source(c);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/corpus.txt"), std::string::npos);
  }
}

TEST(BatchSource, TextSourceHoldsOutTheEnd) {
  test::TempDir dir;
  std::string text(1000, 'a');
  text += std::string(1000, 'b');
  test::write_text(dir.file("t.txt"), text);
  Config c;
  c.data.source = {DataSource::Kind::kText, dir.file("t.txt")};
  c.data.val_fraction = 0.25;
  c.model.block = 16;
  auto s = make_batch_source(c);
  EXPECT_EQ(s->train_tokens(), 1500);
  EXPECT_EQ(s->val_tokens(), 500);
  EXPECT_TRUE(torch::all(s->val_batch(0).x == 'b').item<bool>());
}

}  // namespace
}  // namespace frugal::arith_test
