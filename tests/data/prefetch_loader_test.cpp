// The prefetching loader: the same batches for any worker count, worker errors rethrown on the
// consumer at their batch, seeking, a bounded queue and joined threads.
#include "frugal/data/prefetch_loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "frugal/core/errors.h"

namespace frugal::prefetch_loader_test {
namespace {

std::vector<int64_t> make_batch(int64_t k) { return {k, k * k, 7 * k + 1}; }

TEST(PrefetchLoader, OutputIsTheSameForZeroOneAndTwoWorkers) {
  for (int workers : {0, 1, 2}) {
    PrefetchLoader<std::vector<int64_t>> l(make_batch, workers, 3, 5);
    for (int64_t k = 5; k < 60; ++k) ASSERT_EQ(l.next(), make_batch(k)) << "workers " << workers;
  }
}

TEST(PrefetchLoader, WorkerExceptionIsRethrownOnTheConsumerAtItsBatch) {
  for (int workers : {0, 2}) {
    PrefetchLoader<std::vector<int64_t>> l(
        [](int64_t k) {
          if (k == 4) throw DataError("shard 'x.frs' is corrupt at byte offset 99");
          return make_batch(k);
        },
        workers, 2);
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(l.next(), make_batch(k));
    try {
      l.next();
      FAIL() << "no exception";
    } catch (const DataError& e) {
      EXPECT_STREQ(e.what(), "shard 'x.frs' is corrupt at byte offset 99");
    }
    EXPECT_EQ(l.next(), make_batch(5));  // the loader keeps working after an error
  }
}

TEST(PrefetchLoader, SeekContinuesFromTheRequestedBatch) {
  PrefetchLoader<std::vector<int64_t>> l(make_batch, 2, 4);
  EXPECT_EQ(l.next(), make_batch(0));
  l.seek(100);
  EXPECT_EQ(l.next_index(), 100);
  EXPECT_EQ(l.next(), make_batch(100));
  l.seek(3);
  EXPECT_EQ(l.next(), make_batch(3));
}

TEST(PrefetchLoader, BuildsNoMoreThanPrefetchAheadAndJoinsOnDestruction) {
  std::atomic<int64_t> built{0};
  {
    PrefetchLoader<std::vector<int64_t>> l(
        [&](int64_t k) {
          ++built;
          return make_batch(k);
        },
        2, 3);
    l.next();
    for (int i = 0; i < 200 && built.load() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_LE(built.load(), 4);  // batch 0 (returned) + at most 3 ahead
  }                              // destructor joins workers blocked on a full queue
}

}  // namespace
}  // namespace frugal::prefetch_loader_test
