// The local Hugging Face hub cache; see hf_hub.h.
#include "frugal/core/hf_hub.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "frugal/core/atomic_file.h"

namespace frugal {

std::string hf_hub_cache() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  namespace fs = std::filesystem;
  if (const std::string c = env("HF_HUB_CACHE"); !c.empty()) return c;
  if (const std::string h = env("HF_HOME"); !h.empty()) return (fs::path(h) / "hub").string();
  if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) return (fs::path(x) / "huggingface" / "hub").string();
  const std::string home = env("HOME");
  return (fs::path(home.empty() ? "." : home) / ".cache" / "huggingface" / "hub").string();
}

bool is_hf_hub_id(const std::string& name) {
  return !name.empty() && name.front() != '/' && name.front() != '.' && std::count(name.begin(), name.end(), '/') <= 1;
}

std::string hf_hub_repo_folder(const std::string& repo_id) {
  std::string folder = "models--";  // huggingface_hub's layout: "org/name" -> models--org--name
  for (char ch : repo_id) folder += ch == '/' ? std::string("--") : std::string(1, ch);
  return (std::filesystem::path(hf_hub_cache()) / folder).string();
}

std::string hf_cached_snapshot(const std::string& repo_id, const std::string& file) {
  namespace fs = std::filesystem;
  if (!is_hf_hub_id(repo_id)) return "";  // a path is not looked up
  const fs::path root = hf_hub_repo_folder(repo_id);
  std::error_code ec;
  std::string rev;
  if (fs::is_regular_file(root / "refs" / "main", ec)) {
    rev = read_small_file((root / "refs" / "main").string());
    while (!rev.empty() && std::isspace(static_cast<unsigned char>(rev.back()))) rev.pop_back();
  }
  const fs::path snap = root / "snapshots" / rev;
  if (!rev.empty() && fs::is_regular_file(snap / file, ec)) return snap.string();
  return "";
}

std::string hf_resolve_dir(const std::string& x, const std::string& file) {
  std::error_code ec;
  if (std::filesystem::is_directory(x, ec)) return x;
  const std::string cached = hf_cached_snapshot(x, file);
  return cached.empty() ? x : cached;
}

}  // namespace frugal
