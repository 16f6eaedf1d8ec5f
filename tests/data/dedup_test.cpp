// Dedup: normalisation, Jaccard, and a synthetic corpus with planted exact and near duplicates
// (and decoys below the threshold): recall and precision must both reach 95%.
#include "frugal/data/dedup.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace frugal::dedup_test {
namespace {

TEST(Dedup, NormalisationLowercasesAndCollapsesWhitespace) {
  EXPECT_EQ(normalize_text("  Hello,\t\tWORLD \n again\n"), "hello, world again");
  EXPECT_EQ(normalize_text(""), "");
}

TEST(Dedup, JaccardOfShingleSets) {
  auto a = shingle_set("a b c d e f", 2), b = shingle_set("a b c d e g", 2);
  EXPECT_EQ(a.size(), 5u);
  EXPECT_DOUBLE_EQ(jaccard(a, b), 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(jaccard(a, shingle_set("A  B c d\ne f", 2)), 1.0);
}

struct Corpus {
  std::vector<std::string> docs;
  std::set<size_t> exact, near;  // indices of planted duplicates
};

// 400 random documents, then 40 exact copies (case and whitespace changed), 40 near copies
// (1-2 words substituted: Jaccard of 5-shingles >= 0.87) and 40 decoys (30 of 150 words
// substituted: Jaccard ~0.3, not duplicates).
Corpus make_corpus(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> vocab(4000);
  for (auto& w : vocab) {
    w.resize(3 + rng() % 6);
    for (auto& c : w) c = static_cast<char>('a' + rng() % 26);
  }
  std::vector<std::vector<std::string>> base(400);
  Corpus c;
  auto join = [](const std::vector<std::string>& words, bool shout) {
    std::string s;
    for (size_t i = 0; i < words.size(); ++i) {
      if (i) s += (i % 7 == 0 && shout) ? "\n  " : " ";
      std::string w = words[i];
      if (shout && i % 3 == 0)
        for (auto& ch : w) ch = static_cast<char>(std::toupper(ch));
      s += w;
    }
    return s;
  };
  for (auto& d : base) {
    for (int i = 0; i < 150; ++i) d.push_back(vocab[rng() % vocab.size()]);
    c.docs.push_back(join(d, false));
  }
  for (int kind = 0; kind < 3; ++kind) {
    for (int i = 0; i < 40; ++i) {
      auto words = base[rng() % base.size()];
      if (kind == 1) {
        const int edits = 1 + static_cast<int>(rng() % 2);
        for (int e = 0; e < edits; ++e) words[rng() % words.size()] = vocab[rng() % vocab.size()];
      } else if (kind == 2) {
        for (int e = 0; e < 30; ++e) words[rng() % words.size()] = vocab[rng() % vocab.size()];
      }
      if (kind == 0) c.exact.insert(c.docs.size());
      if (kind == 1) c.near.insert(c.docs.size());
      c.docs.push_back(join(words, kind == 0));
    }
  }
  return c;
}

TEST(Dedup, ExactModeRemovesEveryPlantedCopyAndNothingElse) {
  Corpus c = make_corpus(1);
  DedupOptions o;
  o.mode = DedupMode::kExact;
  DedupResult r = deduplicate(c.docs, o);
  EXPECT_EQ(r.exact_removed, 40);
  EXPECT_EQ(r.near_removed, 0);
  for (size_t i = 0; i < c.docs.size(); ++i) EXPECT_EQ(r.keep[i] == 0, c.exact.count(i) == 1) << i;
}

TEST(Dedup, NearModeReachesNinetyFivePercentRecallAndPrecision) {
  for (uint32_t seed : {2u, 3u}) {
    Corpus c = make_corpus(seed);
    DedupOptions o;
    o.mode = DedupMode::kNear;
    o.near_threshold = 0.8;
    DedupResult r = deduplicate(c.docs, o);
    std::set<size_t> planted = c.exact;
    planted.insert(c.near.begin(), c.near.end());
    size_t removed = 0, hit = 0;
    for (size_t i = 0; i < c.docs.size(); ++i) {
      if (r.keep[i]) continue;
      ++removed;
      hit += planted.count(i);
    }
    const double recall = static_cast<double>(hit) / static_cast<double>(planted.size());
    const double precision = removed ? static_cast<double>(hit) / static_cast<double>(removed) : 0.0;
    EXPECT_GE(recall, 0.95) << "seed " << seed;
    EXPECT_GE(precision, 0.95) << "seed " << seed;
    EXPECT_EQ(r.exact_removed, 40);  // the exact pass runs first and reports separately
    EXPECT_GE(r.near_removed, 38);
    EXPECT_GT(r.lsh_rows, 1);
    EXPECT_EQ(r.lsh_rows * r.lsh_bands <= 128, true);
  }
}

TEST(Dedup, NoneModeKeepsEverything) {
  Corpus c = make_corpus(4);
  DedupResult r = deduplicate(c.docs, DedupOptions{});
  EXPECT_EQ(std::count(r.keep.begin(), r.keep.end(), 1), static_cast<long>(c.docs.size()));
}

}  // namespace
}  // namespace frugal::dedup_test
