// Atomic replace-by-rename; see atomic_file.h.
#include "frugal/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace frugal
