// Reading and writing checkpoint archives (.tar.zst through libarchive), shared by `frugal
// archive` (archive.cpp) and `frugal restore` (restore.cpp): RAII handles, member names checked
// for safety, and every member streamed with its xxh3-64.
#pragma once

#include "frugal_build_config.h"  // FRUGAL_HAVE_LIBARCHIVE
#if FRUGAL_HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>
#define XXH_INLINE_ALL  // xxHash header-only (third_party/xxhash)
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "frugal/core/errors.h"

namespace frugal::archive_io {

constexpr const char* kMetaName = "frugal-archive.json";  // the archive's own description
constexpr size_t kChunk = 1 << 20;

inline std::string hex64(uint64_t h) { return fmt::format("{:016x}", h); }

struct ArchiveReader {
  struct archive* a = archive_read_new();
  ~ArchiveReader() { archive_read_free(a); }
};
struct ArchiveWriter {
  struct archive* a = archive_write_new();
  ~ArchiveWriter() { archive_write_free(a); }
};
struct EntryPtr {
  struct archive_entry* e = archive_entry_new();
  ~EntryPtr() { archive_entry_free(e); }
};

[[noreturn]] inline void fail(const std::string& what, struct archive* a) {
  // archive_errno carries the system's errno where a read or write failed (ENOSPC: a full disk).
  throw IoError(fmt::format("{}: {}", what, a ? archive_error_string(a) : "libarchive error"),
                a ? archive_errno(a) : 0);
}

inline void fsync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw IoError(fmt::format("cannot fsync {}: {}", path, std::strerror(err)), err);
  }
  ::close(fd);
}

// An archive member's name as frugal writes it: a repack by plain `tar -C DIR -cf - .` prefixes
// "./" and lists directories with a trailing "/"; both are accepted.
inline std::string normal_member(std::string name) {
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  while (!name.empty() && name.back() == '/') name.pop_back();
  return name;
}

// xxh3-64 of a file, streamed.
inline std::string file_xxh3(const std::string& path, uint64_t* size) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw IoError(fmt::format("cannot read {}", path));
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> h(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(h.get());
  std::vector<char> buf(kChunk);
  *size = 0;
  for (size_t n = 0; (n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) {
    XXH3_64bits_update(h.get(), buf.data(), n);
    *size += n;
  }
  return hex64(XXH3_64bits_digest(h.get()));
}

// Names inside an archive: one relative path without "." / ".." components.
inline bool safe_member(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  for (const auto& part : std::filesystem::path(name))
    if (part == ".." || part == ".") return false;
  return true;
}

// Reads every member of `archive`: calls on_member(name, size, xxh3) after streaming its bytes
// into sink(name, data, n) (which may be empty).
template <typename Sink, typename OnMember>
inline void read_members(const std::string& archive, Sink sink, OnMember on_member) {
  ArchiveReader r;
  archive_read_support_filter_all(r.a);
  archive_read_support_format_tar(r.a);
  if (archive_read_open_filename(r.a, archive.c_str(), kChunk) != ARCHIVE_OK)
    throw CheckpointError(
        fmt::format("archive {} cannot be read (damaged or not a .tar.zst): {}", archive, archive_error_string(r.a)));
  struct archive_entry* e = nullptr;
  // A checkpoint archive holds its meta file and a checkpoint's few files (and, repacked by plain
  // tar, their folders): anything much larger is not one, and is not unpacked entry by entry.
  constexpr int kMaxMembers = 64;
  constexpr size_t kMaxName = 255;
  for (int members = 1;; ++members) {
    int rc = archive_read_next_header(r.a, &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK)
      throw CheckpointError(fmt::format("archive {} is damaged: {}", archive, archive_error_string(r.a)));
    if (members > kMaxMembers)
      throw CheckpointError(
          fmt::format("archive {} holds more than {} members; a checkpoint archive holds a "
                      "checkpoint's few files: not one written by `frugal archive`",
                      archive, kMaxMembers));
    const char* raw = archive_entry_pathname(e);
    if (raw == nullptr || std::strlen(raw) > kMaxName)
      throw CheckpointError(
          fmt::format("archive {} holds a member name of {} bytes; a checkpoint archive's are "
                      "step-NNNNNNNN/<file>, at most {} bytes",
                      archive, raw ? std::strlen(raw) : 0, kMaxName));
    const std::string name = normal_member(raw);
    if (archive_entry_filetype(e) == AE_IFDIR) continue;  // directories are implied by file names
    if (archive_entry_filetype(e) != AE_IFREG)
      throw CheckpointError(
          fmt::format("archive {} holds \"{}\", which is not a regular file (a link or a "
                      "device); a checkpoint archive holds only files",
                      archive, name));
    if (!safe_member(name))
      throw CheckpointError(
          fmt::format("archive {} holds an unsafe member name \"{}\" (absolute or "
                      "with \"..\"); refusing to extract it",
                      archive, name));
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    uint64_t size = 0;
    const void* buf = nullptr;
    size_t len = 0;
    la_int64_t off = 0;
    while ((rc = archive_read_data_block(r.a, &buf, &len, &off)) == ARCHIVE_OK) {
      XXH3_64bits_update(h, buf, len);
      sink(name, static_cast<const char*>(buf), len);
      size += len;
    }
    const uint64_t digest = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (rc != ARCHIVE_EOF)
      throw CheckpointError(
          fmt::format("archive {} is damaged in member {}: {}", archive, name, archive_error_string(r.a)));
    on_member(name, size, hex64(digest));
  }
}

// The folders above member `name` in the staging directory; a name no checkpoint has (a file and a
// folder of one name, a component too long) is a damaged archive, said as such.
inline void make_member_dirs(const std::filesystem::path& p, const std::string& archive, const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec)
    throw CheckpointError(
        fmt::format("archive {} holds member \"{}\", which cannot be extracted ({}); a checkpoint "
                    "archive holds step-NNNNNNNN/<file> members only",
                    archive, name, ec.message()));
}

}  // namespace frugal::archive_io
#endif  // FRUGAL_HAVE_LIBARCHIVE
