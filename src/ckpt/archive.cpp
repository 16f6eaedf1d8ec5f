// Checkpoint archives; see archive.h. The tar/zstd work is libarchive's; this file decides what
// to archive and makes every step of the move safe to interrupt.
#include "frugal/ckpt/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL  // xxHash header-only (third_party/xxhash)
#include <xxhash.h>

#include "frugal_build_config.h"  // FRUGAL_HAVE_LIBARCHIVE
#if FRUGAL_HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/retention.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "ckpt/internal/archive_io.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

// Seconds since `path` was last modified, by the wall clock.
double age_seconds(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return now - static_cast<double>(st.st_mtim.tv_sec) - 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
}

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

// "" when no live process holds the run directory's lock, else why its checkpoints stay: a
// training run's retention removes checkpoints while it runs. Only a run frugal trained has a
// lock file; none is made here (planning only reads).
std::string training_note(const fs::path& run) {
  return locked_by_another_process(run.string()) ? "training (a live process holds the run directory's lock)" : "";
}

// Temporary archives of `frugal archive` processes that died before renaming them into place
// (.tmp-<checkpoint>-<pid>.tar.zst with a pid no longer alive): removed, so reruns leave nothing.
[[maybe_unused]] void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const std::string suffix = ".tar.zst";
    if (n.rfind(".tmp-", 0) != 0 || n.size() <= suffix.size() ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string stem = n.substr(0, n.size() - suffix.size());
    const size_t dash = stem.rfind('-');
    if (dash == std::string::npos || dash + 1 >= stem.size() ||
        stem.find_first_not_of("0123456789", dash + 1) != std::string::npos)
      continue;
    if (!process_alive(std::stoll(stem.substr(dash + 1)))) fs::remove(e.path(), ec);
  }
}

std::string human_age(double s) {
  if (s >= 86400) return fmt::format("{:.1f}d", s / 86400);
  if (s >= 3600) return fmt::format("{:.1f}h", s / 3600);
  return fmt::format("{:.0f}s", s);
}

// The run's checkpoint.best_mode, from the newest complete checkpoint's state.json, which records
// every key as the TOML literal the run's config.toml shows ('max' or "max"); nullopt when it
// cannot be read there (no such key, an unreadable file, another value).
std::optional<MetricMode> best_mode_of(const std::string& checkpoint) {
  try {
    const auto st = nlohmann::json::parse(read_small_file(checkpoint + "/state.json"));
    std::string v = st.at("config_values").at("checkpoint.best_mode").get<std::string>();
    if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    if (v == "min") return MetricMode::kMin;
    if (v == "max") return MetricMode::kMax;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The run's best checkpoints, which archive never takes: the best by the run's best_mode, or, when
// that cannot be read, the best by either mode.
std::vector<std::string> best_checkpoints(const std::vector<CheckpointInfo>& listing, const std::string& newest) {
  std::vector<std::string> best;
  if (newest.empty()) return best;
  const std::optional<MetricMode> mode = best_mode_of(newest);
  for (MetricMode m : {MetricMode::kMin, MetricMode::kMax})
    if (!mode || *mode == m) best.push_back(best_checkpoint(listing, m));
  return best;
}

#if FRUGAL_HAVE_LIBARCHIVE
// Whether `archive` holds every file of the checkpoint directory `dir` (named `name` inside the
// archive) with the same size and xxh3-64.
bool archive_holds(const std::string& archive, const std::string& name, const std::string& dir) {
  std::map<std::string, std::pair<uint64_t, std::string>> seen;
  try {
    archive_io::read_members(
        archive, [](const std::string&, const char*, size_t) {},
        [&](const std::string& n, uint64_t size, const std::string& h) {
          seen[n] = {size, h};
        });
  } catch (const CheckpointError&) {
    return false;  // damaged: not the archive of this checkpoint
  }
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    uint64_t size = 0;
    const std::string h = archive_io::file_xxh3(e.path().string(), &size);
    auto it = seen.find(name + "/" + e.path().filename().string());
    if (it == seen.end() || it->second != std::make_pair(size, h)) return false;
  }
  return true;
}

#endif  // FRUGAL_HAVE_LIBARCHIVE

}  // namespace

int64_t parse_duration_seconds(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const std::string unit = text.substr(i);
  static const std::map<std::string, int64_t> kUnits = {
      {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 7 * 86400}};
  if (i == 0 || i > 12 || !kUnits.count(unit))
    throw ConfigError(
        fmt::format("--older-than \"{}\" is not a duration; write a whole number and a "
                    "unit: s, m, h, d or w (e.g. 90d, 12h)",
                    text));
  return std::stoll(text.substr(0, i)) * kUnits.at(unit);
}

std::vector<std::string> remove_dead_checkpoint_debris(const std::string& runs_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(runs_dir, ec)) {
    const RunDir run(e.path().string());
    if (!e.is_directory(ec) || !fs::is_directory(run.checkpoints(), ec)) continue;
    if (!training_note(e.path()).empty()) continue;  // its own trainer clears what it leaves
    for (auto& p : remove_stale_debris(run.checkpoints())) removed.push_back(std::move(p));
  }
  return removed;
}

std::vector<ArchiveCandidate> plan_archive(const std::string& runs_dir, int64_t older_than_s) {
  if (!fs::is_directory(runs_dir)) throw ConfigError(fmt::format("runs directory {} does not exist", runs_dir));
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(runs_dir))
    if (e.is_directory() && fs::is_directory(RunDir(e.path().string()).checkpoints())) runs.push_back(e.path());
  std::sort(runs.begin(), runs.end());

  std::vector<ArchiveCandidate> out;
  for (const auto& run : runs) {
    const auto listing = list_checkpoints(RunDir(run.string()).checkpoints());  // newest first
    std::string newest;
    for (const auto& ck : listing)
      if (ck.complete) {
        newest = ck.path;
        break;
      }
    const std::vector<std::string> best = best_checkpoints(listing, newest);
    const std::string training = training_note(run);
    for (const auto& ck : listing) {
      ArchiveCandidate c;
      c.run = run.filename().string();
      c.path = ck.path;
      c.step = ck.step;
      c.bytes = dir_bytes(ck.path);
      c.age_s = age_seconds(ck.path + "/COMPLETE");
      if (!ck.complete)
        c.reason = "incomplete";
      else if (!training.empty())
        c.reason = training;
      else if (ck.path == newest)
        c.reason = "newest";
      else if (std::find(best.begin(), best.end(), ck.path) != best.end())
        c.reason = "best";
      else if (c.age_s < static_cast<double>(older_than_s))
        c.reason = "younger (" + human_age(c.age_s) + ")";
      else
        c.archive = true;
      out.push_back(c);
    }
  }
  return out;
}

#if FRUGAL_HAVE_LIBARCHIVE
namespace {
// The archive of a checkpoint that is there when this starts (archive_checkpoint below).
std::string archive_present_checkpoint(const ArchiveCandidate& c, const fs::path& out_dir);
}  // namespace
#endif

std::string archive_checkpoint(const ArchiveCandidate& c, const std::string& to_dir) {
  require_feature("libarchive", "frugal archive (a checkpoint archive is a .tar.zst)");
#if FRUGAL_HAVE_LIBARCHIVE
  if (!c.archive) throw CheckpointError(fmt::format("{} is not to be archived ({})", c.path, c.reason));
  const fs::path out_dir = fs::path(to_dir) / c.run;
  fs::create_directories(out_dir);
  remove_stale_temporaries(out_dir);
  // A checkpoint that a run's retention removed after the plan was made is no error: there is
  // nothing left to archive (and nothing was lost: the run removed it on purpose).
  std::error_code ec;
  if (!fs::exists(c.path, ec)) return "";
  try {
    return archive_present_checkpoint(c, out_dir);
  } catch (const std::exception&) {
    if (!fs::exists(c.path, ec)) return "";
    throw;
  }
#else
  (void)to_dir;
  return {};
#endif
}

#if FRUGAL_HAVE_LIBARCHIVE
namespace {
// Throws CheckpointError unless `archive` holds every member `files` lists ({"bytes", "xxh3"}
// each) with that size and hash; `checkpoint` is named as left in place.
void check_read_back(const std::string& archive, const nlohmann::json& files, const std::string& checkpoint) {
  std::map<std::string, std::pair<uint64_t, std::string>> seen;
  archive_io::read_members(
      archive, [](const std::string&, const char*, size_t) {},
      [&](const std::string& n, uint64_t size, const std::string& h) {
        seen[n] = {size, h};
      });
  for (const auto& [member, want] : files.items()) {
    auto it = seen.find(member);
    if (it == seen.end() || it->second.first != want["bytes"].get<uint64_t>() ||
        it->second.second != want["xxh3"].get<std::string>())
      throw CheckpointError(
          fmt::format("archive {} does not read back member {} intact; the "
                      "checkpoint {} is left in place",
                      archive, member, checkpoint));
  }
}

std::string archive_present_checkpoint(const ArchiveCandidate& c, const fs::path& out_dir) {
  const std::string name = fs::path(c.path).filename().string();
  const std::string target = (out_dir / (name + ".tar.zst")).string();
  if (fs::exists(target)) {
    // A run killed after its archive was renamed into place but before the checkpoint left: if the
    // archive holds exactly the checkpoint's files, finish the move; anything else is refused.
    if (!archive_holds(target, name, c.path))
      throw ConfigError(
          fmt::format("{} already exists and does not hold the files of {}; remove it or "
                      "archive to another --to directory (the checkpoint is left in place)",
                      target, c.path));
    remove_tree_hidden_first(c.path);
    return target;
  }
  const std::string tmp = (out_dir / fmt::format(".tmp-{}-{}.tar.zst", name, ::getpid())).string();

  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(c.path))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());

  nlohmann::json meta = {
      {"format", "frugal-checkpoint-archive"}, {"version", 1}, {"run", c.run}, {"checkpoint", name}, {"step", c.step},
      {"files", nlohmann::json::object()}};
  try {
    archive_io::ArchiveWriter w;
    archive_write_set_format_pax_restricted(w.a);
    if (archive_write_add_filter_zstd(w.a) != ARCHIVE_OK) archive_io::fail("zstd filter unavailable", w.a);
    if (archive_write_open_filename(w.a, tmp.c_str()) != ARCHIVE_OK)
      archive_io::fail(fmt::format("cannot create {}", tmp), w.a);
    auto add = [&](const std::string& member, const std::string& src, const std::string* bytes) {
      archive_io::EntryPtr e;
      archive_entry_set_pathname(e.e, member.c_str());
      archive_entry_set_filetype(e.e, AE_IFREG);
      archive_entry_set_perm(e.e, 0644);
      const uint64_t size = bytes ? bytes->size() : fs::file_size(src);
      archive_entry_set_size(e.e, static_cast<la_int64_t>(size));
      if (archive_write_header(w.a, e.e) != ARCHIVE_OK) archive_io::fail(fmt::format("writing {}", tmp), w.a);
      if (bytes) {
        if (archive_write_data(w.a, bytes->data(), bytes->size()) < 0)
          archive_io::fail(fmt::format("writing {}", tmp), w.a);
        return;
      }
      std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(src.c_str(), "rb"), &std::fclose);
      if (!f) throw IoError(fmt::format("cannot read {}", src));
      XXH3_state_t* h = XXH3_createState();
      XXH3_64bits_reset(h);
      std::vector<char> buf(archive_io::kChunk);
      uint64_t done = 0;
      size_t n = 0;
      while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
        XXH3_64bits_update(h, buf.data(), n);
        if (archive_write_data(w.a, buf.data(), n) < 0) {
          XXH3_freeState(h);
          archive_io::fail(fmt::format("writing {}", tmp), w.a);
        }
        done += n;
      }
      const uint64_t digest = XXH3_64bits_digest(h);
      XXH3_freeState(h);
      if (done != size) throw IoError(fmt::format("{} changed size while being archived", src));
      meta["files"][member] = {{"bytes", size}, {"xxh3", archive_io::hex64(digest)}};
    };
    for (const auto& f : files) add(name + "/" + f.filename().string(), f.string(), nullptr);
    const std::string m = meta.dump(2) + "\n";
    add(archive_io::kMetaName, "", &m);
    if (archive_write_close(w.a) != ARCHIVE_OK) archive_io::fail(fmt::format("finishing {}", tmp), w.a);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  archive_io::fsync_file(tmp);

  // Read back before anything is deleted: every file present, same size, same hash.
  try {
    check_read_back(tmp, meta["files"], c.path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, target);
  fsync_dir(out_dir.string());
  remove_tree_hidden_first(c.path);  // only now does the checkpoint leave
  return target;
}
}  // namespace
#endif

}  // namespace frugal
