// A temporary folder for the run directories of the Trainers that tune and plan run as probes;
// removed, with everything in it, when the object dies.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal::detail {

class TempRoot {
 public:
  explicit TempRoot(const std::string& prefix) {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!mkdtemp(tmpl.data()))
      throw IoError("cannot create a temporary directory under " + fs::temp_directory_path().string() +
                    "; check that TMPDIR is writable");
    path_ = tmpl;
  }
  ~TempRoot() {
    std::error_code ec;
    remove_tree(path_, ec);
  }
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace frugal::detail
