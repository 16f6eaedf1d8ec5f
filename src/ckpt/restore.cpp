// Restoring an archived checkpoint; see archive.h. Extracted to a staging folder, verified, then
// renamed into the run's checkpoints/: never overwriting, nothing half-written on failure.
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/archive.h"
#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "ckpt/internal/archive_io.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

// Staging folders of restores whose process is gone (killed mid-extraction): never used again.
void remove_dead_stages(const fs::path& runs_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(runs_dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string prefix = ".tmp-restore-";
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (!process_alive(std::stoll(pid))) remove_tree(e.path().string(), ec);
  }
}

}  // namespace

std::string restore_checkpoint(const std::string& archive, const std::string& runs_dir, bool* already) {
  if (already) *already = false;
  require_feature("libarchive", "frugal restore (a checkpoint archive is a .tar.zst)");
#if FRUGAL_HAVE_LIBARCHIVE
  using namespace archive_io;
  if (!fs::is_regular_file(archive)) throw ConfigError(fmt::format("archive {} does not exist", archive));
  fs::create_directories(runs_dir);
  remove_dead_stages(runs_dir);
  const fs::path stage = fs::path(runs_dir) / fmt::format(".tmp-restore-{}", ::getpid());
  std::error_code ec;
  remove_tree(stage, ec);
  fs::create_directories(stage);
  auto cleanup = [&] { remove_tree(stage, ec); };
  try {
    std::unique_ptr<FILE, int (*)(FILE*)> out(nullptr, &std::fclose);
    std::string open_name;
    std::string meta_text;
    read_members(
        archive,
        [&](const std::string& name, const char* data, size_t n) {
          if (name == kMetaName) {
            meta_text.append(data, n);
            return;
          }
          if (name != open_name) {
            const fs::path p = stage / name;
            make_member_dirs(p, archive, name);
            out.reset(std::fopen(p.c_str(), "wb"));
            if (!out) throw IoError(fmt::format("cannot write {}", p.string()));
            open_name = name;
          }
          if (std::fwrite(data, 1, n, out.get()) != n)
            throw IoError(fmt::format("cannot write {}", (stage / name).string()));
        },
        [&](const std::string& name, uint64_t, const std::string&) {
          if (name == open_name) {
            if (std::fflush(out.get()) != 0 || ::fsync(fileno(out.get())) != 0)
              throw IoError(fmt::format("cannot fsync {}", (stage / name).string()));
            out.reset();
            open_name.clear();
          } else if (name != kMetaName) {  // an empty member: no data blocks were streamed
            const fs::path p = stage / name;
            make_member_dirs(p, archive, name);
            write_file_atomic(p.string(), "");
          }
        });
    const nlohmann::json meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
    if (!meta.is_object() || !meta.contains("format") || meta["format"] != "frugal-checkpoint-archive" ||
        !meta.contains("run") || !meta["run"].is_string() || !meta.contains("checkpoint") ||
        !meta["checkpoint"].is_string())
      throw CheckpointError(
          fmt::format("{} is not a frugal checkpoint archive (no readable {} with format "
                      "\"frugal-checkpoint-archive\", run and checkpoint)",
                      archive, kMetaName));
    if (meta.value("version", nlohmann::json()) != 1)
      throw CheckpointError(
          fmt::format("{} is a checkpoint archive of version {}; this frugal restores version 1 "
                      "(restore it with the frugal that wrote it)",
                      archive, meta.value("version", nlohmann::json()).dump()));
    const std::string run = meta["run"].get<std::string>();
    const std::string name = meta["checkpoint"].get<std::string>();
    if (!safe_member(run) || !safe_member(name) || run.find('/') != std::string::npos ||
        name.find('/') != std::string::npos)
      throw CheckpointError(fmt::format("{} names an unsafe run or checkpoint (\"{}\", \"{}\")", archive, run, name));
    const fs::path staged = stage / name;
    if (std::string bad = verify_checkpoint(staged.string()); !bad.empty())
      throw CheckpointError(fmt::format("the checkpoint restored from {} does not verify: {}", archive, bad));
    const fs::path dest_root = RunDir((fs::path(runs_dir) / run).string()).checkpoints();
    const fs::path dest = dest_root / name;
    if (fs::exists(dest)) {
      // A rerun (several archives, the first ones restored before): the same checkpoint is there.
      std::error_code same_ec;
      const bool same =
          fs::is_regular_file(dest / "COMPLETE", same_ec) &&
          read_small_file((dest / "COMPLETE").string()) == read_small_file((staged / "COMPLETE").string()) &&
          verify_checkpoint(dest.string()).empty();
      if (same) {
        cleanup();
        if (already) *already = true;
        return dest.string();
      }
      throw ConfigError(
          fmt::format("{} already exists; restoring {} would overwrite it (move or remove that "
                      "checkpoint first, or restore into another --runs directory)",
                      dest.string(), archive));
    }
    fs::create_directories(dest_root);
    fs::rename(staged, dest);
    fsync_dir(dest_root.string());
    cleanup();
    return dest.string();
  } catch (...) {
    cleanup();
    throw;
  }
#else
  return {};
#endif
}

}  // namespace frugal
