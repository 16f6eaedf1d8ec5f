// Atomic file writes: a reader sees the old file or the new one, never a part, and no temporary
// file is left behind. remove_tree: std::filesystem::remove_all's job without libstdc++'s
// internals (which the LibTorch wheel exports a second build of).
#include "frugal/core/atomic_file.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

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

// The message of the DataError `read` throws ("" when it throws none or another error).
std::string data_error(const std::function<void()>& read) {
  try {
    read();
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another error: ") + e.what();
  }
  return "";
}

// A FIFO, a device or a link to one in place of a file frugal reads: refused at once by name
// (a FIFO used to hang the reader until a writer came; /dev/zero was read until memory ran out).
TEST(ReadFile, OnlyARegularFileIsReadAndAFifoNeverWaitsForAWriter) {
  test::TempDir dir;
  const std::string fifo = dir.file("state.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // If the read waited for a writer, this one ends the wait after 3 s (and the test fails on time).
  std::thread unblock([&] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = data_error([&] { read_file(fifo); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "the read waited on the FIFO";
  unblock.join();
  EXPECT_NE(e.find(fifo), std::string::npos) << e;
  EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
  EXPECT_NE(data_error([] { read_small_file("/dev/zero"); }).find("character device"), std::string::npos);
  std::filesystem::create_symlink("/dev/urandom", dir.file("manifest.json"));
  EXPECT_NE(data_error([&] { read_small_file(dir.file("manifest.json")); }).find("not a regular file"),
            std::string::npos);
  EXPECT_NE(data_error([&] { read_file(dir.path()); }).find("directory"), std::string::npos);
  // A link to a regular file is read as the file.
  write_file_atomic(dir.file("real.json"), "{}");
  std::filesystem::create_symlink(dir.file("real.json"), dir.file("link.json"));
  EXPECT_EQ(read_small_file(dir.file("link.json")), "{}");
  EXPECT_THROW(read_file(dir.file("missing")), IoError);
}

TEST(ReadFile, ASmallFileLargerThanItsLimitIsRefusedBeforeItIsRead) {
  test::TempDir dir;
  write_file_atomic(dir.file("COMPLETE"), std::string(100, 'x'));
  const std::string e = data_error([&] { read_small_file(dir.file("COMPLETE"), 10); });
  EXPECT_NE(e.find("100 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("10"), std::string::npos) << e;
  EXPECT_EQ(read_small_file(dir.file("COMPLETE"), 100).size(), 100u);
}

// A config that is no file is bad input (exit 2) named by its path, at once.
TEST(ReadFile, TrainingFromADeviceOrAFifoAsTheConfigExitsTwoNamingIt) {
  test::TempDir dir;
  auto r = test::run_frugal("train /dev/zero --quiet --set run.out_dir=" + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/dev/zero is a character device"), std::string::npos) << r.output;
  const std::string fifo = dir.file("run.toml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = test::run_frugal("train " + fifo + " --quiet --set run.out_dir=" + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("FIFO"), std::string::npos) << r.output;
}

// A directory fsync that fails for want of support (procfs answers EINVAL) is no error; one that
// fails writing back (EIO, a full disk) is: it used to be ignored, and a checkpoint whose rename
// might not survive a crash was declared complete.
TEST(FsyncDir, OnlyAFileSystemThatCannotSyncDirectoriesIsExcused) {
  for (int err : {EINVAL, EBADF, EROFS, ENOTSUP, EOPNOTSUPP, ENOSYS})
    EXPECT_TRUE(detail::directory_sync_unsupported(err)) << std::strerror(err);
  for (int err : {EIO, ENOSPC, EDQUOT, ENOMEM, 0})
    EXPECT_FALSE(detail::directory_sync_unsupported(err)) << std::strerror(err);
  test::TempDir dir;
  EXPECT_NO_THROW(fsync_dir(dir.path()));
  EXPECT_NO_THROW(fsync_dir("/proc"));
  EXPECT_THROW(fsync_dir(dir.file("missing")), IoError);
}

// The temporary file of an atomic write whose process died (a kill while the final weights were
// written) goes; a live process's stays, except this process's own (a pid from before a restart);
// what only looks like one (a directory, a name without a pid) stays.
TEST(AtomicFile, StaleTemporaryFilesOfDeadWritersAreRemoved) {
  test::TempDir dir;
  const std::string dead = dir.file("model.safetensors.tmp-4999999");  // above any Linux pid
  const std::string mine = dir.file("summary.json.tmp-" + std::to_string(::getpid()));
  const std::string live = dir.file("config.toml.tmp-1");  // init: alive
  for (const auto& f : {dead, mine, live, dir.file("notes.tmp-abc"), dir.file(".tmp-4999999")}) touch(f);
  fs::create_directories(dir.file("folder.tmp-4999999"));
  auto removed = remove_stale_temp_files(dir.path());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dead, mine}));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(dir.file("notes.tmp-abc")));
  EXPECT_TRUE(fs::exists(dir.file(".tmp-4999999")));
  EXPECT_TRUE(fs::exists(dir.file("folder.tmp-4999999")));
  EXPECT_TRUE(remove_stale_temp_files(dir.file("missing")).empty());
}

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
