// Crash-safe file writes: write to a temporary file beside the target, fsync it, rename it over
// the target, fsync the directory. A crash at any point leaves either the old file or the new
// one, never a torn mix. Throws IoError naming the path and the failing call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace frugal {

// Replaces `path` with `data` atomically (see above). Creates parent directories.
void write_file_atomic(const std::string& path, std::string_view data);

// Reads a whole file; throws IoError if it cannot. Only a regular file is read (a symbolic link
// to one counts): a FIFO, a device (/dev/zero, /dev/urandom), a socket or a directory throws
// DataError naming the path and what it is, at once (a FIFO is opened without waiting for a
// writer, so it cannot hang the caller).
std::string read_file(const std::string& path);

// The same for files frugal itself writes small (state.json, COMPLETE, manifest.json, a config,
// a cache): a file larger than `max_bytes` throws DataError naming it, its size and the limit,
// before anything is read (a link to a huge file costs no memory).
constexpr int64_t kSmallFileMaxBytes = int64_t{64} << 20;
std::string read_small_file(const std::string& path, int64_t max_bytes = kSmallFileMaxBytes);

// fsyncs a directory so that a rename inside it is durable. A file system that does not sync
// directories (detail::directory_sync_unsupported) is no error: its renames are atomic all the
// same. Any other failure (EIO) throws IoError naming the directory: a rename there may not
// survive a crash, so nothing it published may be declared complete.
void fsync_dir(const std::string& dir);

// Removes the temporary files that write_file_atomic left directly in `dir` when its process died
// mid-write ("<name>.tmp-<pid>", a regular file) and returns their paths. One whose pid runs is a
// write in progress and stays, unless the pid is this process's own: call it before this process
// writes atomic files into `dir` (a pid from before a restart may be this process's now).
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

// Removes `path` and, for a directory, everything under it (symbolic links are removed, never
// followed); returns how many entries it removed; a path that does not exist removes nothing and
// is no error. Like std::filesystem::remove_all(path, ec), without it: the official LibTorch
// wheel exports its own build of std::filesystem's internals, and a remove_all that starts in one
// libstdc++ build and continues in another faults (pytorch/pytorch#133437). This walks the tree
// with POSIX nftw() from the C library instead. `ec` is set to the first error (the walk stops).
uintmax_t remove_tree(const std::string& path, std::error_code& ec) noexcept;
// The same, throwing IoError naming the path and the error.
uintmax_t remove_tree(const std::string& path);

// Removes directory `dir` hidden first: renames it to the sibling ".trash-<name>-<pid>-<n>"
// (fsyncing the parent), then removes that tree. A crash or an error midway leaves only the
// hidden name, which the checkpoint folder's debris sweep clears once this process is gone
// (remove_stale_debris, retention.h), never a half-removed directory under its own name.
// Returns false, with `ec` set, when `dir` could not be moved aside (it stays as it was); an
// error while removing the hidden tree is left to the sweep.
bool remove_tree_hidden_first(const std::string& dir, std::error_code& ec);
// The same, throwing IoError naming `dir` when it cannot be moved aside.
void remove_tree_hidden_first(const std::string& dir);

namespace detail {
// Whether `err`, an errno from fsync() of a directory, only says that the file system does not
// sync directories (EINVAL, EBADF, EROFS, ENOTSUP, EOPNOTSUPP, ENOSYS) rather than that a
// write-back failed.
bool directory_sync_unsupported(int err);
}  // namespace detail

}  // namespace frugal
