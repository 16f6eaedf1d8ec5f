// The batch-size finder: the search on a fake memory model, the accumulation split, the
// allocator limit that makes CPU runs fail like CUDA ones, the measured finder against an
// exhaustive scan, and the cache.
#include "frugal/tune/batch_finder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "frugal/core/compat.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/memory.h"
#include "test_util.h"

namespace frugal::batch_finder_test {
namespace {

TEST(BatchFinder, SearchFindsTheLargestFittingSizeOfAFakeMemoryModel) {
  // Memory = 1000 + 37 n bytes; the true largest n is (budget - 1000) / 37.
  for (int64_t budget : {1000, 1037, 1500, 4321, 100000, 1000000}) {
    int calls = 0;
    BatchSearch s = search_largest_batch(
        [&](int64_t n) {
          ++calls;
          const int64_t peak = 1000 + 37 * n;
          return ProbeOutcome{peak <= budget, peak, false};
        },
        /*max=*/4096);
    const int64_t truth = std::min<int64_t>(4096, std::max<int64_t>(0, (budget - 1000) / 37));
    EXPECT_EQ(s.largest, truth) << "budget " << budget;
    EXPECT_EQ(static_cast<int>(s.probes.size()), calls);
    EXPECT_LE(calls, 2 * 13 + 1) << "doubling then bisection: O(log max) probes";
  }
}

TEST(BatchFinder, SearchStopsAtMaxAndReportsZeroWhenNothingFits) {
  auto always = [](int64_t n) { return ProbeOutcome{true, n, false}; };
  EXPECT_EQ(search_largest_batch(always, 100).largest, 100);
  EXPECT_EQ(search_largest_batch(always, 1).largest, 1);
  auto never = [](int64_t) { return ProbeOutcome{false, 0, true}; };
  BatchSearch s = search_largest_batch(never, 100);
  EXPECT_EQ(s.largest, 0);
  ASSERT_EQ(s.probes.size(), 1u);
  EXPECT_TRUE(s.probes[0].outcome.out_of_memory);
}

TEST(BatchFinder, SplitKeepsTheGlobalBatchWithTheLargestDivisor) {
  EXPECT_EQ(split_global_batch(48, 20), std::make_pair(int64_t{16}, int64_t{3}));
  EXPECT_EQ(split_global_batch(32, 64), std::make_pair(int64_t{32}, int64_t{1}));
  EXPECT_EQ(split_global_batch(7, 5), std::make_pair(int64_t{1}, int64_t{7}));
  EXPECT_EQ(split_global_batch(12, 12), std::make_pair(int64_t{12}, int64_t{1}));
}

TEST(BatchFinder, AllocatorLimitThrowsTheOutOfMemoryErrorNamingTheKey) {
  install_counting_allocator();
  {
    TensorBytesLimitGuard limit(tensor_bytes_now() + (int64_t{1} << 20));
    at::Tensor small = torch::zeros({1000});  // 4 KB: fine
    try {
      at::Tensor big = torch::zeros({1 << 20});  // 4 MiB: over
      FAIL() << "no out-of-memory error";
    } catch (const c10::OutOfMemoryError& e) {
      EXPECT_TRUE(compat::is_out_of_memory(e));
      EXPECT_NE(std::string(e.what_without_backtrace()).find("memory.limit_mb"), std::string::npos);
    }
  }
  EXPECT_EQ(tensor_bytes_limit(), 0);
  EXPECT_NO_THROW(torch::zeros({1 << 20}));
}

Config tiny_config() {
  Config c = resolve_config("",
                            {"model.layers=1", "model.heads=2", "model.embd=32", "model.block=32",
                             "precision.mode=fp32", "data.micro_batch=64", "run.threads=1", "tune.cache=false"},
                            {})
                 .config;
  return c;
}

// A size that does not fit is the finder's answer, not an event of a run: the training step's
// out-of-memory back-off ("out of memory at step 1: micro-batch 64 -> 32 ...", a micro-batch the
// user never configured) prints nothing, and a size that runs only in halves does not fit.
TEST(BatchFinder, AProbeThatRunsOutOfMemoryPrintsNothingAndDoesNotFit) {
  Config c = tiny_config();
  c.tune.memory_margin = 0;
  const int64_t budget = probe_training_memory(c, 2, 0).peak_bytes;  // room for about 2 sequences, not 64
  testing::internal::CaptureStdout();
  const ProbeOutcome o = probe_training_memory(c, 64, budget);
  const std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(o.fits);
  EXPECT_TRUE(o.out_of_memory);
  EXPECT_EQ(printed.find("out of memory at step"), std::string::npos) << printed;
}

TEST(BatchFinder, MeasuredResultIsWithinTenPercentOfAnExhaustiveScanAndFits) {
  // A long sequence and a narrow model: activations, which grow with the micro-batch, dominate
  // the fixed part (weights, gradients, moments, snapshot), as they do in real runs. With a fixed
  // part F and m per sequence, a margin moves the result by margin x budget / m sequences.
  Config c = tiny_config();
  c.model.block = 128;
  // Memory per sequence, measured around 32 sequences; the budget sits halfway to 33.
  const int64_t p32 = probe_training_memory(c, 32, 0).peak_bytes;
  const int64_t p33 = probe_training_memory(c, 33, 0).peak_bytes;
  ASSERT_GT(p33, p32);
  const int64_t budget = p32 + (p33 - p32) / 2;
  const int64_t fixed = p32 - 32 * (p33 - p32);
  ASSERT_LT(fixed, budget / 2) << "per-sequence memory " << (p33 - p32) << " B, fixed part " << fixed << " B";
  // Exhaustive scan with no margin: the true largest micro-batch under the budget such that every
  // smaller one fits too (the monotone prefix the search assumes).
  Config exact = c;
  exact.tune.memory_margin = 0;
  int64_t truth = 0;
  for (int64_t n = 1; n <= 64; ++n) {
    ProbeOutcome o = probe_training_memory(exact, n, budget);
    if (!o.fits) break;
    truth = n;
  }
  ASSERT_GE(truth, 20);
  // The finder with a 5% margin, on the same budget (memory.limit_mb works in MiB, so the
  // budget is handed over through the probe directly).
  c.tune.memory_margin = 0.05;
  BatchSearch s = search_largest_batch([&](int64_t n) { return probe_training_memory(c, n, budget); }, 1024);
  EXPECT_LE(s.largest, truth);
  EXPECT_GE(static_cast<double>(s.largest), 0.9 * static_cast<double>(truth))
      << "finder " << s.largest << " vs exhaustive " << truth;
  // The chosen size really runs under the limit (the allocator would throw otherwise).
  ProbeOutcome o = probe_training_memory(exact, s.largest, budget);
  EXPECT_TRUE(o.fits);
  EXPECT_FALSE(o.out_of_memory);
  EXPECT_LE(o.peak_bytes, budget);
}

TEST(BatchFinder, FindsUnderMemoryLimitKeepsTheGlobalBatchAndCaches) {
  test::TempDir dir;
  ASSERT_EQ(setenv("FRUGAL_CACHE_DIR", dir.path().c_str(), 1), 0);
  Config c = tiny_config();
  c.model.block = 256;  // a few MiB per sequence, so that memory.limit_mb (MiB) can bind
  c.model.embd = 64;
  c.memory.limit_mb = 48;
  c.tune.cache = true;
  c.train.global_batch = 96;
  c.data.micro_batch = 96;
  FinderResult r = find_batch_size(c);
  EXPECT_FALSE(r.from_cache);
  EXPECT_GE(r.largest, 1);
  EXPECT_LT(r.largest, 96);
  EXPECT_EQ(r.micro_batch * r.accum, 96);
  EXPECT_LE(r.micro_batch, r.largest);
  EXPECT_EQ(96 % r.micro_batch, 0);
  EXPECT_LE(static_cast<double>(r.peak_bytes), 0.9 * 48 * 1024 * 1024);
  EXPECT_TRUE(std::filesystem::exists(dir.file("batch_finder.json")));
  FinderResult again = find_batch_size(c);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.largest, r.largest);
  EXPECT_EQ(again.micro_batch, r.micro_batch);
  EXPECT_NE(again.describe().find("micro_batch"), std::string::npos);
  unsetenv("FRUGAL_CACHE_DIR");
}

}  // namespace
}  // namespace frugal::batch_finder_test
