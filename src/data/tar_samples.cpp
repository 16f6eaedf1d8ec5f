// WebDataset-style tar reading; see tar_samples.h.
#include "frugal/data/tar_samples.h"

#include <fmt/format.h>

#include "frugal_build_config.h"  // FRUGAL_HAVE_LIBARCHIVE
#if FRUGAL_HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include <memory>
#include <unordered_map>

#include "frugal/core/errors.h"
#include "frugal/core/features.h"

namespace frugal {

std::pair<std::string, std::string> split_member_name(const std::string& name, const std::string& archive) {
  auto refuse = [&](const char* why) {
    throw DataError(
        fmt::format("tar member '{}' in '{}' {}; frugal refuses unsafe member names; "
                    "rebuild the archive with relative names",
                    name, archive, why));
  };
  if (name.empty()) refuse("has an empty name");
  if (name[0] == '/') refuse("is an absolute path");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) refuse("has a '..' component");
    start = end + 1;
  }
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

std::vector<TarSample> read_tar_samples(const std::string& path) {
  require_feature("libarchive", fmt::format("reading the tar archive '{}'", path));
#if FRUGAL_HAVE_LIBARCHIVE
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  auto fail = [&](const std::string& what) {
    throw DataError(fmt::format("cannot read tar archive '{}': {}: {}", path, what,
                                archive_error_string(a.get()) ? archive_error_string(a.get()) : "unknown error"));
  };
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK) fail("open");
  std::vector<TarSample> samples;
  std::unordered_map<std::string, size_t> index;
  archive_entry* e = nullptr;
  for (;;) {
    const int rc = archive_read_next_header(a.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK) fail("reading a member header");
    const char* cname = archive_entry_pathname(e);
    const std::string name = cname ? cname : "";
    const auto [key, ext] = split_member_name(name, path);
    const auto type = archive_entry_filetype(e);
    if (type == AE_IFDIR) continue;
    if (type != AE_IFREG || archive_entry_hardlink(e) != nullptr)
      throw DataError(
          fmt::format("tar member '{}' in '{}' is not a regular file (a link or a device); "
                      "only regular files are read",
                      name, path));
    auto [it, fresh] = index.emplace(key, samples.size());
    if (fresh) samples.push_back({key, {}});
    TarSample& s = samples[it->second];
    std::string data;
    if (archive_entry_size_is_set(e)) data.reserve(static_cast<size_t>(archive_entry_size(e)));
    char buf[1 << 16];
    for (;;) {
      const la_ssize_t n = archive_read_data(a.get(), buf, sizeof buf);
      if (n < 0) fail(fmt::format("reading member '{}'", name));
      if (n == 0) break;
      data.append(buf, static_cast<size_t>(n));
    }
    if (!s.members.emplace(ext, std::move(data)).second)
      throw DataError(
          fmt::format("tar archive '{}': sample '{}' has two '.{}' members (the second is '{}'); "
                      "each key may carry each extension once",
                      path, key, ext, name));
  }
  return samples;
#else
  return {};
#endif
}

}  // namespace frugal
