// Directory lock; see dir_lock.h.
#include "frugal/core/dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <cerrno>
#include <cstring>
#include <string>

#include "frugal/core/errors.h"

namespace frugal {

bool process_alive(int64_t pid) {
  if (pid <= 0 || pid > 0x3fffffff) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

DirLock::DirLock(const std::string& dir) {
  const std::string path = dir + "/.lock";
  // O_NOFOLLOW: a .lock planted as a symbolic link must not make the lock truncate its target.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0 && errno == ELOOP)  // bad input (exit 2), and not the ConfigError that means "in use"
    throw DataError(
        fmt::format("the lock file {} is a symbolic link; a run directory's lock must be a file of "
                    "its own: remove the link (rm {}) and start again",
                    path, path));
  if (fd_ < 0) throw IoError(fmt::format("cannot open the lock file {}: {}", path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOSYS || err == ENOLCK || err == EOPNOTSUPP || err == EINVAL) {
      // Some network file systems cannot lock at all. Refusing to run there would cost more than
      // the protection is worth: warn and go on unlocked.
      fmt::print(stderr,
                 "warning: cannot lock {} ({}): the file system does not support locks; a second "
                 "process on the same run directory will not be stopped\n",
                 path, std::strerror(err));
      return;
    }
    char buf[64] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw IoError(fmt::format("cannot lock {}: {}", path, std::strerror(err)));
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("unknown");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    throw ConfigError(
        fmt::format("the run directory {} is in use by another frugal process (pid {}); wait for it to finish or "
                    "stop it (kill -TERM {} checkpoints and exits), or give this run another name with "
                    "--set run.name=NAME",
                    dir, holder, holder));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid in it; a second process would say "pid unknown".
  }
}

bool locked_by_another_process(const std::string& dir) {
  struct stat st {};
  if (::lstat((dir + "/.lock").c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  try {
    const DirLock probe(dir);
    return false;
  } catch (const ConfigError&) {
    return true;
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace frugal
