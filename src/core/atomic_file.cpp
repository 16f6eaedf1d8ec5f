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

#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {
// nftw() takes a plain function: the walk's count and first error live here, one walk per thread.
thread_local uintmax_t t_removed = 0;
thread_local int t_error = 0;

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  if (::remove(path) != 0) {        // children come first (FTW_DEPTH): a directory is empty by now
    if (errno == ENOENT) return 0;  // gone meanwhile: what was wanted
    t_error = errno;
    return 1;  // stops the walk
  }
  ++t_removed;
  return 0;
}

[[noreturn]] void io_fail(const char* what, const std::string& path) {
  const int err = errno;
  throw IoError(fmt::format("{} failed for {}: {}", what, path, std::strerror(err)), err);
}
}  // namespace

namespace detail {
bool directory_sync_unsupported(int err) {
  // EINVAL: Linux's answer where a file system has no fsync for directories (some FUSE and network
  // file systems); EBADF: systems that fsync only what was opened for writing, which a directory
  // cannot be; EROFS: a read-only mount, where nothing is left to write back; ENOTSUP/EOPNOTSUPP
  // and ENOSYS: file systems that say so plainly. PostgreSQL's fsync_fname and SQLite's directory
  // sync excuse the same.
  return err == EINVAL || err == EBADF || err == EROFS || err == ENOTSUP || err == EOPNOTSUPP || err == ENOSYS;
}
}  // namespace detail

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_fail("open(directory)", dir);
  int rc = 0;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  // A file system that does not sync directories still renames atomically: no error. Any other
  // failure (EIO) means a rename there may not survive a crash, so what it published is not
  // declared durable.
  if (rc != 0 && !detail::directory_sync_unsupported(err))
    throw IoError(fmt::format("fsync of the directory {} failed: {}; what was just renamed into it may not "
                              "survive a crash: check the disk (dmesg) and run the command again",
                              dir.empty() ? "." : dir, std::strerror(err)),
                  err);
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp-");
    if (at == std::string::npos || at == 0) continue;
    const std::string pid = name.substr(at + 5);
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code kind_ec;
    if (!e.is_regular_file(kind_ec) || e.is_symlink(kind_ec)) continue;
    const int64_t writer = std::stoll(pid);
    if (writer != ::getpid() && process_alive(writer)) continue;  // a write in progress
    if (::unlink(e.path().c_str()) == 0) removed.push_back(e.path().string());
  }
  return removed;
}

void write_file_atomic(const std::string& path, std::string_view data) {
  fs::path target(path);
  fs::path dir = target.parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create directory {}: {}", dir.string(), ec.message()), ec.value());
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
  const fs::path trash = parent / fmt::format(".trash-{}-{}-{}", target.filename().string(), ::getpid(), counter++);
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

namespace {
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO (named pipe)";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  return "special file";
}

// Reads the regular file `path` whole; with max_bytes >= 0, refuses one larger than that first.
std::string read_regular_file(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw IoError(fmt::format("cannot stat {}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw DataError(
        fmt::format("{} is a {}, not a regular file: frugal reads its inputs from files; point it at "
                    "one",
                    path, file_kind(st.st_mode)));
  if (max_bytes >= 0 && st.st_size > max_bytes)
    throw DataError(
        fmt::format("{} holds {} bytes, more than the {} such a file may have: it is not the file "
                    "frugal wrote (a link to the wrong file?)",
                    path, st.st_size, max_bytes));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    out.append(buf, static_cast<size_t>(n));
    if (max_bytes >= 0 && static_cast<int64_t>(out.size()) > max_bytes)  // grew while read
      throw DataError(fmt::format("{} grew past {} bytes while it was read", path, max_bytes));
  }
  return out;
}
}  // namespace

std::string read_file(const std::string& path) { return read_regular_file(path, -1); }

std::string read_small_file(const std::string& path, int64_t max_bytes) { return read_regular_file(path, max_bytes); }

}  // namespace frugal
