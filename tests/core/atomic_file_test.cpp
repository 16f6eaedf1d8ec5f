// Atomic file writes: a reader sees the old file or the new one, never a part, and no temporary
// file is left behind.
#include "frugal/core/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::atomic_file_test {
namespace {

TEST(AtomicFile, ReplacesWholeAndLeavesNoTemporaryFile) {
  test::TempDir dir;
  write_file_atomic(dir.file("sub/f.txt"), "one");
  write_file_atomic(dir.file("sub/f.txt"), "two");
  EXPECT_EQ(read_file(dir.file("sub/f.txt")), "two");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.file("sub"))) ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_THROW(write_file_atomic("/proc/nonexistent/x", "y"), IoError);
}

}  // namespace
}  // namespace frugal::atomic_file_test
