// EpochSampler: every sample once per epoch, disjoint and covering ranks,
// seeded orders (the prefetching loader has prefetch_loader_test.cpp).
#include "frugal/data/sampler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <set>

#include "frugal/core/errors.h"

namespace frugal::sampler_test {
namespace {

std::vector<int64_t> epoch_order(const EpochSampler& s, int64_t epoch) {
  std::vector<int64_t> v;
  for (int64_t p = 0; p < s.per_epoch(epoch); ++p) v.push_back(s.sample({epoch, p}));
  return v;
}

TEST(EpochSampler, EveryEpochVisitsEverySampleExactlyOnceInANewOrder) {
  for (int64_t n : {1, 2, 3, 17, 1000, 4097}) {
    EpochSampler s(n, 42);
    std::vector<int64_t> prev;
    for (int64_t e = 0; e < 3; ++e) {
      auto order = epoch_order(s, e);
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i) << "n=" << n;
      if (n >= 17 && !prev.empty()) {
        EXPECT_NE(order, prev) << "epochs must be reshuffled";
      }
      prev = order;
    }
  }
}

TEST(EpochSampler, OrderIsAFunctionOfTheSeed) {
  EXPECT_EQ(epoch_order(EpochSampler(500, 1), 0), epoch_order(EpochSampler(500, 1), 0));
  EXPECT_NE(epoch_order(EpochSampler(500, 1), 0), epoch_order(EpochSampler(500, 2), 0));
  auto plain = epoch_order(EpochSampler(50, 1, 0, 1, /*shuffle=*/false), 0);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(plain[static_cast<size_t>(i)], i);
}

TEST(EpochSampler, RanksAreDisjointAndCoverEachEpoch) {
  for (int64_t world : {1, 2, 3, 4, 7}) {
    const int64_t n = 103;
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      EpochSampler s(n, 9, r, world);
      for (int64_t v : epoch_order(s, 1)) seen.insert(v);
    }
    ASSERT_EQ(seen.size(), static_cast<size_t>(n)) << "world " << world;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u) << i << " world " << world;
  }
  EXPECT_THROW(EpochSampler(10, 1, 2, 2), ConfigError);
}

// The samples of a step (global batch G) are the same set for any world size, across epoch
// boundaries too: what an elastic resume relies on. 103 samples: no world size above 1 divides it.
TEST(EpochSampler, AStepsSamplesAreTheSameForAnyWorldSize) {
  const int64_t n = 103, global = 12, steps = 30;  // 30 steps of 12 cross three epoch boundaries
  auto step_samples = [&](int64_t world, int64_t step) {
    std::multiset<int64_t> out;
    const int64_t share = global / world;  // samples per rank per step
    for (int64_t r = 0; r < world; ++r) {
      EpochSampler s(n, 5, r, world);
      for (int64_t k = step * share; k < (step + 1) * share; ++k) out.insert(s.sample(s.at(k)));
    }
    return out;
  };
  for (int64_t step = 0; step < steps; ++step) {
    const auto one = step_samples(1, step);
    for (int64_t world : {2, 3, 4, 6})
      EXPECT_EQ(step_samples(world, step), one) << "world " << world << " step " << step;
  }
}

TEST(EpochSampler, CursorAndIndexRoundTripForEveryRank) {
  for (int64_t world : {1, 3, 4}) {
    for (int64_t r = 0; r < world; ++r) {
      EpochSampler s(10, 3, r, world);
      for (int64_t k = 0; k < 40; ++k) {
        const SampleCursor c = s.at(k);
        ASSERT_LT(c.position, s.per_epoch(c.epoch)) << k;
        EXPECT_EQ(s.index_of(c), k);
        EXPECT_EQ(s.advance(c, 3), s.at(k + 3));
      }
    }
  }
}

TEST(EpochSampler, CursorAdvancesAcrossEpochsAndRoundTripsThroughJson) {
  EpochSampler s(10, 3);
  EXPECT_EQ(s.at(25), (SampleCursor{2, 5}));
  EXPECT_EQ(s.advance({1, 9}, 1), (SampleCursor{2, 0}));
  EXPECT_EQ(cursor_from_json(cursor_to_json({4, 7})), (SampleCursor{4, 7}));
  EXPECT_THROW(cursor_from_json(nlohmann::json{{"epoch", 1}}), DataError);
}

// The record and shard sources' shared cursor: micro-batch k is the rank's samples
// [k * mb, (k + 1) * mb) across epoch boundaries, and its state names k again; a state between
// two micro-batches (saved with another micro_batch) is refused, naming the unit.
TEST(MicroBatchCursor, MicroBatchesFollowTheStreamAndTheirStateRoundTrips) {
  const EpochSampler sampler(10, 7, 1, 2);  // 5 samples per epoch for rank 1
  const MicroBatchCursor cursor(sampler, 3);
  for (int64_t k = 0; k < 6; ++k) {  // micro-batch 1 spans epochs 0 and 1
    const std::vector<int64_t> got = cursor.samples(k);
    ASSERT_EQ(got.size(), 3u);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], sampler.sample(sampler.at(k * 3 + i))) << k;
    EXPECT_TRUE(cursor.first(k) == sampler.at(k * 3)) << k;
    EXPECT_EQ(cursor.batch_of(cursor.state(k), "records"), k) << cursor.state(k).dump();
  }
  try {
    cursor.batch_of(cursor_to_json(sampler.at(4)), "records");
    FAIL() << "a cursor between two micro-batches was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("micro_batch 3, 5 records per epoch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cursor.batch_of(nlohmann::json{{"epoch", 0}, {"position", 5}}, "samples"), DataError);  // past the epoch
  EXPECT_THROW(cursor.batch_of(nlohmann::json{{"epoch", "x"}}, "samples"), DataError);
}

}  // namespace
}  // namespace frugal::sampler_test
