// The folder `frugal prepare` writes; see internal/dataset_folder.h.
#include "data/internal/dataset_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"

namespace frugal::detail {
namespace fs = std::filesystem;

namespace {

// Where a symbolic link at `p` leads, following a chain of links (one that dangles too: the
// dataset is then created where it points); `p` itself when it is no link.
fs::path link_target(fs::path p, const std::string& flag) {
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40)
      throw ConfigError(fmt::format("--out {}: too many levels of symbolic links (a loop?); give a folder path", flag));
    const fs::path to = fs::read_symlink(p, ec);
    fs::path next =
        ec ? fs::path() : fs::weakly_canonical(to.is_absolute() ? to : fs::absolute(p).parent_path() / to, ec);
    if (ec)
      throw ConfigError(fmt::format("--out {}: cannot follow the symbolic link {}: {}; give a folder path", flag,
                                    p.string(), ec.message()));
    p = std::move(next);
  }
  return p;
}

// Refuses an --out whose first existing ancestor is a file (the folder could never be made).
void require_folder_above(const fs::path& out, const std::string& flag) {
  for (fs::path a = fs::absolute(out).parent_path();; a = a.parent_path()) {
    std::error_code ec;
    const fs::file_status st = fs::status(a, ec);
    if (st.type() == fs::file_type::not_found && a.has_relative_path()) continue;
    if (fs::exists(st) && !fs::is_directory(st))
      throw ConfigError(
          fmt::format("--out {}: {} is a file, not a folder; give --out a path inside a folder", flag, a.string()));
    return;
  }
}

}  // namespace

std::string dataset_folder(const PrepareOptions& o) {
  // "data/out/" names the folder data/out: without the trailing separator.
  fs::path out_path = fs::path(o.out_dir).lexically_normal();
  if (!out_path.has_filename() && out_path.has_relative_path()) out_path = out_path.parent_path();
  out_path = link_target(out_path, o.out_dir);
  const std::string leaf = out_path.filename().string();
  if (leaf.empty() || leaf == "." || leaf == "..")
    throw ConfigError(
        fmt::format("--out {}: name the dataset folder itself (for example --out data/mine), not "
                    "the current, parent or root folder",
                    o.out_dir));
  const std::string out = out_path.string();
  const std::string shown = out == o.out_dir ? out : fmt::format("{} ({})", o.out_dir, out);
  std::error_code ec;
  const fs::file_status st = fs::status(out_path, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw ConfigError(
        fmt::format("--out {} is a file; give a folder path (a new folder, or an earlier dataset)", shown));
  require_folder_above(out_path, o.out_dir);
  if (fs::exists(st) && !fs::exists(out_path / "manifest.json") && !fs::is_empty(out_path))
    throw ConfigError(
        fmt::format("--out {}: the folder exists and is not a frugal dataset; choose a new "
                    "folder (prepare replaces only earlier datasets)",
                    shown));
  return out;
}

void remove_dead_temp_dirs(const std::string& out, const std::function<void(const std::string&)>& say) {
  const fs::path parent = fs::absolute(out).parent_path();
  const std::string prefix = fs::path(out).filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0) continue;
    const std::string pid = n.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (process_alive(std::stoll(pid))) continue;  // another prepare of the same OUT is running
    remove_tree(e.path(), ec);
    if (!ec) say(fmt::format("removed {} (left by a prepare that was killed)", e.path().string()));
  }
}

void publish(const std::string& tmp, const std::string& out) {
  fsync_dir(tmp);
  if (!fs::exists(out)) {
    fs::rename(tmp, out);
  } else {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0) {
      const int err = errno;
      throw IoError(fmt::format("cannot swap '{}' into place at '{}': {}", tmp, out, std::strerror(err)), err);
    }
    remove_tree(tmp);  // now the previous dataset
  }
  fsync_dir(fs::absolute(out).parent_path().string());
}

}  // namespace frugal::detail
