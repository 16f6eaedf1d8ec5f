// [memory] reuse_freed: freed tensor memory stays in the process and is reused without page faults.
#include "frugal/monitor/memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "test_util.h"

namespace frugal {
namespace {

long child_minor_faults() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_minflt;
}

// The demo GPT's step frees and allocates activations of a few MiB each, in the same sizes every
// step. With glibc's defaults they go back to the OS and return as fresh pages (each one a page
// fault and a page the kernel zeroes); kept in the process, only the first steps fault them in.
// Page faults of a given program are a count, not a timing. A run's faults are a fixed start-up
// part (~70k: loading LibTorch) plus a per-step part that only reuse_freed = false pays, so the
// run is long enough (90 steps, ~2k faults per step without reuse) that halving is far from the
// edge: 70k against 306k measured.
TEST(MemoryReuse, TrainingWithReuseFaultsInFarFewerPages) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc malloc only";
#endif
  test::TempDir dir;
  auto faults = [&](const char* reuse) {
    const long before = child_minor_faults();
    auto r = test::run_frugal("train --quiet --overwrite --set run.out_dir=" + dir.path() +
                              " --set train.steps=90 --set precision.mode=fp32 --set train.eval_every=0"
                              " --set train.answer_samples=0 --set checkpoint.enabled=false"
                              " --set memory.reuse_freed=" + reuse);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return child_minor_faults() - before;
  };
  const long off = faults("false");
  const long on = faults("true");
  EXPECT_LT(on * 2, off) << "minor page faults over a 90-step run: " << on << " with reuse_freed, " << off
                         << " without";
}

TEST(MemoryReuse, KeepingFreedMemoryIsAvailableOnGlibc) {
#if defined(__GLIBC__)
  EXPECT_TRUE(keep_freed_memory_in_process());
  EXPECT_TRUE(keep_freed_memory_in_process());  // idempotent
#else
  EXPECT_FALSE(keep_freed_memory_in_process());
#endif
}

}  // namespace
}  // namespace frugal
