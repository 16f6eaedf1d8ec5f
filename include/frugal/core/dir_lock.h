// An exclusive lock on a directory (a run directory): a second process that wants the same
// directory gets a clear error naming the holder's pid instead of deleting the first one's
// in-flight files. The lock is flock(2) on DIR/.lock, so it dies with its holder: a killed run
// never leaves a stale lock behind.
#pragma once

#include <cstdint>
#include <string>

namespace frugal {

// Whether a process with this pid runs on this machine (kill(pid, 0)). Temp files and
// directories carry their writer's pid, so clean-up can tell a live write from a dead one's
// leftovers.
bool process_alive(int64_t pid);

// Whether a live process holds DIR's lock (a run that is training now). Makes no lock file where
// there is none.
bool locked_by_another_process(const std::string& dir);

class DirLock {
 public:
  // Takes the lock (DIR must exist). Throws ConfigError naming the directory and the holder's
  // pid when another process holds it, DataError when DIR/.lock is a symbolic link (never
  // followed), IoError when the lock file cannot be opened. On a file
  // system without locks (flock fails with ENOSYS, ENOLCK, EOPNOTSUPP, EINVAL) it warns on stderr and
  // holds nothing.
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace frugal
