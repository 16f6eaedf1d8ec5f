// WebDataset-style tar shards as `frugal prepare` input (read with libarchive, so plain, gzip,
// bzip2, xz and zstd compressed tars all work). A sample is the group of members that share a
// key: the member's path up to the first dot of its base name. Its extension is the rest:
//
//   train/000017.jpg, train/000017.cls   ->  key "train/000017", members {"jpg", "cls"}
//   docs/a.b.txt                         ->  key "docs/a", member "b.txt"
//
// Samples keep the order in which their first member appears. Directories are skipped; any
// other non-regular member (a link, a device) and any member whose name is absolute or has a
// `..` component is refused with a DataError naming the member and the archive, before anything
// is read from it: a name is never used as a path. A key that repeats an extension is an error.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace frugal {

struct TarSample {
  std::string key;
  std::map<std::string, std::string> members;  // extension -> contents
};

// Every sample of `archive`, in order. Throws DataError (unreadable archive, unsafe member name,
// duplicate member).
std::vector<TarSample> read_tar_samples(const std::string& archive);

// The key and extension of a member name ("a/b.c.d" -> {"a/b", "c.d"}). Throws DataError naming
// the member and `archive` when the name is absolute or has a ".." component.
std::pair<std::string, std::string> split_member_name(const std::string& name, const std::string& archive);

}  // namespace frugal
