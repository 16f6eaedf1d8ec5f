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
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "ckpt/internal/archive_io.h"

namespace frugal {
namespace fs = std::filesystem;

std::string restore_checkpoint(const std::string& archive, const std::string& runs_dir) {
  require_feature("libarchive", "frugal restore (a checkpoint archive is a .tar.zst)");
#if FRUGAL_HAVE_LIBARCHIVE
  using namespace archive_io;
  if (!fs::is_regular_file(archive)) throw ConfigError(fmt::format("archive {} does not exist", archive));
  fs::create_directories(runs_dir);
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
    if (fs::exists(dest))
      throw ConfigError(
          fmt::format("{} already exists; restoring {} would overwrite it (move or remove that "
                      "checkpoint first, or restore into another --runs directory)",
                      dest.string(), archive));
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
