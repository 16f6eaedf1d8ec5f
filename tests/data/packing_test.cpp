// Padding, bucketing and packing: no token lost, every target exactly once, masks right, and
// deterministic.
#include "frugal/data/packing.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace frugal::packing_test {
namespace {

constexpr int32_t kPad = 0;
constexpr int32_t kSep = 1;

// Documents of lengths 1..3*block (some longer than a row), tokens >= 2 so they never collide
// with the pad or separator ids, plus an empty one that must be skipped.
std::vector<std::vector<int32_t>> make_docs(int64_t block, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> docs;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> d(static_cast<size_t>(1 + rng() % static_cast<uint64_t>(3 * block)));
    for (auto& t : d) t = static_cast<int32_t>(2 + rng() % 200);
    docs.push_back(d);
  }
  docs.insert(docs.begin() + 3, std::vector<int32_t>{});
  return docs;
}

int64_t total_tokens(const std::vector<std::vector<int32_t>>& docs) {
  int64_t n = 0;
  for (const auto& d : docs) n += static_cast<int64_t>(d.size());
  return n;
}

// Rebuilds each document from padded/bucketed rows: every x token at its (doc, offset + t), the
// last target of each row one further. Fails on any disagreement (a token placed twice with
// different values) into *out.
void rebuild(const std::vector<TokenRows>& batches, std::map<int32_t, std::vector<int32_t>>* out) {
  std::map<int32_t, std::map<int64_t, int32_t>> at;
  for (const auto& b : batches) {
    ASSERT_EQ(b.x.size(), static_cast<size_t>(b.rows * b.width));
    for (int64_t r = 0; r < b.rows; ++r) {
      for (int64_t t = 0; t < b.width; ++t) {
        const size_t i = static_cast<size_t>(r * b.width + t);
        if (b.doc[i] < 0) {
          EXPECT_EQ(b.x[i], kPad);
          EXPECT_EQ(b.y[i], kIgnoreIndex) << "a padding position has a target";
          continue;
        }
        auto put = [&](int64_t pos, int64_t tok) {
          auto [it, fresh] = at[b.doc[i]].emplace(pos, static_cast<int32_t>(tok));
          if (!fresh) {
            EXPECT_EQ(it->second, tok);
          }
        };
        put(b.offset[static_cast<size_t>(r)] + t, b.x[i]);
        if (b.y[i] != kIgnoreIndex) put(b.offset[static_cast<size_t>(r)] + t + 1, b.y[i]);
      }
    }
  }
  for (const auto& [d, m] : at) {
    for (const auto& [pos, tok] : m) {
      EXPECT_EQ(pos, static_cast<int64_t>((*out)[d].size())) << "a gap in document " << d;
      (*out)[d].push_back(tok);
    }
  }
}
std::map<int32_t, std::vector<int32_t>> rebuilt(const std::vector<TokenRows>& batches) {
  std::map<int32_t, std::vector<int32_t>> out;
  rebuild(batches, &out);
  return out;
}

void expect_docs_equal(const std::vector<std::vector<int32_t>>& docs,
                       const std::map<int32_t, std::vector<int32_t>>& got) {
  size_t nonempty = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (docs[d].empty()) {
      EXPECT_EQ(got.count(static_cast<int32_t>(d)), 0u);
      continue;
    }
    ++nonempty;
    ASSERT_EQ(got.count(static_cast<int32_t>(d)), 1u) << "document " << d << " lost";
    EXPECT_EQ(got.at(static_cast<int32_t>(d)), docs[d]) << "document " << d;
  }
  EXPECT_EQ(got.size(), nonempty);
}

TEST(Packing, PaddingKeepsEveryTokenAndEveryTargetOnce) {
  const int64_t block = 16;
  auto docs = make_docs(block, 50, 7);
  auto batches = pad_batches(docs, block, 8, kPad);
  for (const auto& b : batches) EXPECT_EQ(b.width, block);
  expect_docs_equal(docs, rebuilt(batches));
  // Each document of length L has L - 1 next-token targets; pieces overlap so none is repeated.
  const BatchingStats s = batching_stats(batches);
  EXPECT_EQ(s.targets, total_tokens(docs) - 50);
}

TEST(Packing, BucketingKeepsEveryTokenPadsLessAndIsDeterministic) {
  const int64_t block = 16;
  auto docs = make_docs(block, 200, 11);
  auto padded = pad_batches(docs, block, 8, kPad);
  auto a = bucket_batches(docs, block, 8, kPad, 42, 4);
  auto b = bucket_batches(docs, block, 8, kPad, 42, 4);
  auto c = bucket_batches(docs, block, 8, kPad, 43, 4);
  expect_docs_equal(docs, rebuilt(a));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].x, b[i].x);
  bool order_differs = false;
  for (size_t i = 0; i < a.size() && i < c.size(); ++i) order_differs |= a[i].x != c[i].x;
  EXPECT_TRUE(order_differs) << "the seed does not change the batch order";
  const BatchingStats sp = batching_stats(padded), sb = batching_stats(a);
  EXPECT_EQ(sb.targets, sp.targets);
  EXPECT_LT(sb.padding_fraction(), sp.padding_fraction());
  for (const auto& t : a) {  // each batch is as wide as its longest row, no wider
    int64_t longest = 0;
    for (int64_t r = 0; r < t.rows; ++r) {
      int64_t used = 0;
      for (int64_t k = 0; k < t.width; ++k) used += t.doc[static_cast<size_t>(r * t.width + k)] >= 0;
      longest = std::max(longest, used);
    }
    EXPECT_EQ(t.width, longest);
  }
}

TEST(Packing, PackingFillsRowsSeparatesDocumentsAndMasksTheirFirstToken) {
  const int64_t block = 16;
  auto docs = make_docs(block, 100, 5);
  auto batches = pack_batches(docs, block, 8, kSep, kPad);
  // Rebuild the stream from x (plus the last target) and compare with docs joined by separators.
  std::vector<int32_t> expect, expect_owner;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (docs[d].empty()) continue;
    expect.insert(expect.end(), docs[d].begin(), docs[d].end());
    expect.push_back(kSep);
    expect_owner.insert(expect_owner.end(), docs[d].size() + 1, static_cast<int32_t>(d));
  }
  std::vector<int32_t> stream, owner;
  int64_t padded_rows = 0;
  for (const auto& b : batches) {
    EXPECT_EQ(b.width, block);
    for (int64_t r = 0; r < b.rows; ++r) {
      EXPECT_EQ(b.offset[static_cast<size_t>(r)], static_cast<int64_t>(stream.size()));
      int64_t pad = 0;
      for (int64_t t = 0; t < block; ++t) {
        const size_t i = static_cast<size_t>(r * block + t);
        if (b.doc[i] < 0) {
          ++pad;
          EXPECT_EQ(b.y[i], kIgnoreIndex);
          continue;
        }
        stream.push_back(static_cast<int32_t>(b.x[i]));
        owner.push_back(b.doc[i]);
      }
      padded_rows += pad > 0;
    }
  }
  stream.push_back(kSep);  // the final separator is only ever a target
  owner.push_back(expect_owner.back());
  EXPECT_EQ(stream, expect);
  EXPECT_EQ(owner, expect_owner);
  EXPECT_LE(padded_rows, 1) << "only the last row may be padded";
  // Targets: y[i] is the next stream token unless it starts a new document.
  size_t s = 0;
  int64_t masked = 0;
  for (const auto& b : batches) {
    for (size_t i = 0; i < b.x.size(); ++i) {
      if (b.doc[i] < 0) continue;
      const bool new_doc = expect_owner[s + 1] != expect_owner[s];
      EXPECT_EQ(b.y[i], new_doc ? kIgnoreIndex : expect[s + 1]) << "stream position " << s;
      masked += new_doc;
      ++s;
    }
  }
  EXPECT_EQ(masked, 99);  // 100 documents: every first token but the stream's first is masked
  // Padding predicts L - 1 targets per document; packing adds the separator of each.
  EXPECT_EQ(batching_stats(batches).targets, batching_stats(pad_batches(docs, block, 8, kPad)).targets + 100);
  EXPECT_LT(batching_stats(batches).padding, block);
}

TEST(Packing, TinyInputsAreHandled) {
  std::vector<std::vector<int32_t>> one{{5}};
  auto p = pad_batches(one, 4, 2, kPad);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rows, 1);
  EXPECT_EQ(p[0].x[0], 5);
  EXPECT_EQ(p[0].targets(), 0);
  auto k = pack_batches(one, 4, 2, kSep, kPad);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].x[0], 5);
  EXPECT_EQ(k[0].y[0], kSep);
  EXPECT_TRUE(pack_batches({}, 4, 2, kSep, kPad).empty());
  EXPECT_TRUE(bucket_batches(std::vector<std::vector<int32_t>>{std::vector<int32_t>{}}, 4, 2, kPad, 1).empty());
}

}  // namespace
}  // namespace frugal::packing_test
