// Atomic file writes: a reader sees the old file or the new one, never a part, and no temporary
// file is left behind. remove_tree: std::filesystem::remove_all's job without libstdc++'s
// internals (which the LibTorch wheel exports a second build of).
#include "frugal/core/atomic_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "frugal/core/errors.h"
#include "frugal/core/features.h"
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

namespace fs = std::filesystem;

void touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(RemoveTree, RemovesANestedTreeAndCountsWhatItRemoved) {
  test::TempDir dir;
  const std::string root = dir.file("tree");
  fs::create_directories(root + "/a/b/c");
  fs::create_directories(root + "/empty");
  touch(root + "/top.txt");
  touch(root + "/a/one");
  touch(root + "/a/b/c/deep");
  std::error_code ec;
  // 4 directories under root + root + 3 files, as std::filesystem::remove_all would count them.
  EXPECT_EQ(remove_tree(root, ec), 8u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(fs::exists(root));
  EXPECT_TRUE(fs::exists(dir.path()));  // only what was named
}

TEST(RemoveTree, ASymbolicLinkIsRemovedNotFollowed) {
  test::TempDir dir;
  fs::create_directories(dir.file("keep/inner"));
  touch(dir.file("keep/inner/file"));
  fs::create_directories(dir.file("tree"));
  fs::create_directory_symlink(dir.file("keep"), dir.file("tree/link"));
  EXPECT_EQ(remove_tree(dir.file("tree")), 2u);
  EXPECT_FALSE(fs::exists(dir.file("tree")));
  EXPECT_TRUE(fs::exists(dir.file("keep/inner/file"))) << "the walk followed the link";
  // A link named directly is removed itself.
  fs::create_directory_symlink(dir.file("keep"), dir.file("alone"));
  EXPECT_EQ(remove_tree(dir.file("alone")), 1u);
  EXPECT_FALSE(fs::is_symlink(dir.file("alone")));
  EXPECT_TRUE(fs::exists(dir.file("keep/inner/file")));
}

// Moved aside under a name the debris sweep knows (".trash-<name>-<pid>-<n>"), then removed: the
// parent ends empty, also for a path written with a trailing slash; a directory that cannot be
// moved aside is an error naming it, and nothing else changes.
TEST(RemoveTree, HiddenFirstRemovesTheDirectoryAndReportsOneThatCannotBeMovedAside) {
  test::TempDir dir;
  for (const char* step : {"step-00000010", "step-00000020"}) {
    std::filesystem::create_directories(dir.file(std::string("ck/") + step + "/sub"));
    std::ofstream(dir.file(std::string("ck/") + step + "/sub/f")) << "x";
  }
  remove_tree_hidden_first(dir.file("ck/step-00000010"));
  std::error_code ec;
  EXPECT_TRUE(remove_tree_hidden_first(dir.file("ck/step-00000020/"), ec)) << ec.message();
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("ck"))) << "a directory or its hidden copy was left";
  EXPECT_FALSE(remove_tree_hidden_first(dir.file("ck/step-00000030"), ec));
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  try {
    remove_tree_hidden_first(dir.file("ck/step-00000030"));
    FAIL() << "no error for a directory that is not there";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot move " + dir.file("ck/step-00000030")), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("ck")));
}

TEST(RemoveTree, AMissingPathIsNoErrorAndAFailureIsReported) {
  test::TempDir dir;
  std::error_code ec;
  EXPECT_EQ(remove_tree(dir.file("never-made"), ec), 0u);
  EXPECT_FALSE(ec);
  EXPECT_EQ(remove_tree(dir.file("never-made")), 0u);
  // A file the kernel will not unlink (even for root): the error comes back, and the throwing
  // form names the path.
  EXPECT_EQ(remove_tree("/proc/self/status", ec), 0u);
  EXPECT_TRUE(ec);
  try {
    remove_tree("/proc/self/status");
    FAIL() << "no error for an entry that cannot be removed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot remove /proc/self/status"), std::string::npos) << e.what();
  }
}

// The program's std::filesystem is libstdc++'s: the build links libstdc++ ahead of LibTorch,
// whose wheel exports a second build of it (a remove_all begun in one build and continued in the
// other faults). Fails if that link order is lost.
TEST(RemoveTree, TheProgramsStdFilesystemIsLibstdcxxs) {
  const std::string lib = std_filesystem_library();
  EXPECT_NE(lib.find("libstdc++"), std::string::npos) << "std::filesystem resolves to '" << lib << "'";
}

}  // namespace
}  // namespace frugal::atomic_file_test
