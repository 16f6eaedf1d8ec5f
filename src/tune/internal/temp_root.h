// A temporary folder for the run directories of the Trainers that tune and plan run as probes,
// "<prefix>-<pid>-XXXXXX" in the temp directory (TMPDIR); removed, with everything in it, when
// the object dies (also as a stop signal's Interrupted unwinds). The folders of processes that
// died before their cleanup (SIGKILL, a second Ctrl-C) are removed when the next one is made.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"

namespace frugal::detail {

// Removes the folders "<prefix>-<pid>-*" directly in `tmp` whose process is gone.
inline void remove_dead_temp_roots(const std::filesystem::path& tmp, const std::string& prefix) {
  std::error_code ec;
  const std::string head = prefix + "-";
  for (std::filesystem::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(head, 0) != 0) continue;
    const std::string rest = name.substr(head.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || dash > 18 || rest.find_first_not_of("0123456789") != dash) continue;
    std::error_code gone;
    if (!process_alive(std::stoll(rest.substr(0, dash)))) remove_tree(it->path().string(), gone);
  }
}

class TempRoot {
 public:
  explicit TempRoot(const std::string& prefix) {
    namespace fs = std::filesystem;
    const fs::path tmp = fs::temp_directory_path();
    remove_dead_temp_roots(tmp, prefix);
    std::string tmpl = (tmp / fmt::format("{}-{}-XXXXXX", prefix, ::getpid())).string();
    if (!mkdtemp(tmpl.data()))
      throw IoError("cannot create a temporary directory under " + tmp.string() + "; check that TMPDIR is writable");
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
