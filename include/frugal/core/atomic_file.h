// Crash-safe file writes: write to a temporary file beside the target, fsync it, rename it over
// the target, fsync the directory. A crash at any point leaves either the old file or the new
// one, never a torn mix. Throws IoError naming the path and the failing call.
#pragma once

#include <string>
#include <string_view>

namespace frugal {

// Replaces `path` with `data` atomically (see above). Creates parent directories.
void write_file_atomic(const std::string& path, std::string_view data);

// Reads a whole file; throws IoError if it cannot.
std::string read_file(const std::string& path);

// fsyncs a directory so that a rename inside it is durable.
void fsync_dir(const std::string& dir);

}  // namespace frugal
