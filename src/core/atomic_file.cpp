// Atomic replace-by-rename; see atomic_file.h.
#include "frugal/core/atomic_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {
// nftw() takes a plain function: the walk's count and first error live here, one walk per thread.
thread_local uintmax_t t_removed = 0;
thread_local int t_error = 0;

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  if (::remove(path) != 0) {  // children come first (FTW_DEPTH): a directory is empty by now
    if (errno == ENOENT) return 0;  // gone meanwhile: what was wanted
    t_error = errno;
    return 1;  // stops the walk
  }
  ++t_removed;
  return 0;
}

[[noreturn]] void io_fail(const char* what, const std::string& path) {
  throw IoError(fmt::format("{} failed for {}: {}", what, path, std::strerror(errno)));
}
}  // namespace

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) io_fail("open(directory)", dir);
  ::fsync(fd);  // some file systems refuse fsync on directories; the rename is still atomic
  ::close(fd);
}

void write_file_atomic(const std::string& path, std::string_view data) {
  fs::path target(path);
  fs::path dir = target.parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create directory {}: {}", dir.string(), ec.message()));
  std::string tmp = path + fmt::format(".tmp-{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("open", tmp);
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      io_fail("write", tmp);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    io_fail("fsync", tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    io_fail("rename", path);
  }
  fsync_dir(dir.string());
}

uintmax_t remove_tree(const std::string& path, std::error_code& ec) noexcept {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = std::error_code(errno, std::system_category());
    return 0;
  }
  t_removed = 0;
  t_error = 0;
  // FTW_PHYS: a symbolic link is removed, not followed; FTW_DEPTH: a directory after its entries.
  if (::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0)
    ec = std::error_code(t_error != 0 ? t_error : errno, std::system_category());
  return t_removed;
}

uintmax_t remove_tree(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = remove_tree(path, ec);
  if (ec) throw IoError(fmt::format("cannot remove {}: {}", path, ec.message()));
  return n;
}

bool remove_tree_hidden_first(const std::string& dir, std::error_code& ec) {
  static std::atomic<int> counter{0};
  ec.clear();
  const fs::path d = fs::path(dir).lexically_normal();
  const fs::path target = d.has_filename() ? d : d.parent_path();  // "a/b/" names b
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path trash =
      parent / fmt::format(".trash-{}-{}-{}", target.filename().string(), ::getpid(), counter++);
  if (::rename(target.c_str(), trash.c_str()) != 0) {
    ec = std::error_code(errno, std::system_category());
    return false;
  }
  try {
    fsync_dir(parent.string());  // the rename is durable before anything is deleted
  } catch (const IoError&) {
  }
  std::error_code ignored;
  remove_tree(trash.string(), ignored);
  return true;
}

void remove_tree_hidden_first(const std::string& dir) {
  std::error_code ec;
  if (!remove_tree_hidden_first(dir, ec))
    throw IoError(fmt::format("cannot move {} aside for removal: {}", dir, ec.message()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace frugal
