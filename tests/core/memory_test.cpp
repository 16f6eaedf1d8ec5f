// [memory] reuse_freed: freed tensor memory stays in the process for reuse. What it saves (page
// faults and time per run) is a measurement, not a test: bench/compute_levers.py's reuse_freed row.
#include "frugal/core/memory.h"

#include <gtest/gtest.h>

namespace frugal::memory_test {
namespace {

TEST(MemoryReuse, KeepingFreedMemoryIsAvailableOnGlibc) {
#if defined(__GLIBC__)
  EXPECT_TRUE(keep_freed_memory_in_process());
  EXPECT_TRUE(keep_freed_memory_in_process());  // idempotent
#else
  EXPECT_FALSE(keep_freed_memory_in_process());
#endif
}

}  // namespace
}  // namespace frugal::memory_test
