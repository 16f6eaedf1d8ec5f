// Archiving stale checkpoints: `frugal archive RUNS_DIR --older-than 90d --to DIR` moves
// checkpoints that have not been touched for a while into compressed tar archives (zstd), and
// `frugal restore ARCHIVE --runs RUNS_DIR` puts one back (docs/formats/checkpoint.md, "Archives").
//
// Never archived: the newest complete checkpoint of a run (resume --auto continues from it), the
// best one by the run's checkpoint.best_metric and best_mode (keep_best; the best by either mode
// when the newest checkpoint does not say which), and incomplete directories (a write may be in
// flight; retention removes crash debris). A checkpoint's age is the time since its
// COMPLETE marker was written.
//
// Safety: an archive is written to a temporary file, fsynced and renamed; it is then read back
// and every member compared (size and xxh3-64) with the checkpoint's files, and only then is the
// checkpoint directory removed. A failure at any point leaves the checkpoint where it was.
// Restoring extracts into a hidden temporary directory, verifies the checkpoint's checksums and
// renames it into place; it never overwrites an existing checkpoint. Member names with ".."
// components or absolute paths are rejected.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace frugal {

// "90d", "12h", "30m", "45s", "2w" (a number and one unit) as seconds. Throws ConfigError
// naming the text and the accepted units.
int64_t parse_duration_seconds(const std::string& text);

struct ArchiveCandidate {
  std::string run;   // run directory name under RUNS_DIR
  std::string path;  // the checkpoint directory
  int64_t step = 0;
  double age_s = 0;      // seconds since COMPLETE was written
  uint64_t bytes = 0;    // size of its files
  bool archive = false;  // true: will be archived; false: kept, see `reason`
  std::string reason;    // why kept: "newest", "best", "incomplete", "younger than ...", "training ..."
};

// Every checkpoint under RUNS_DIR/*/checkpoints/, with the decision for each. Pure reading. A run
// that a live process holds (its run directory's lock) keeps every checkpoint: its retention
// removes them while it trains.
// Throws ConfigError when runs_dir does not exist.
std::vector<ArchiveCandidate> plan_archive(const std::string& runs_dir, int64_t older_than_s);

// Removes, under RUNS_DIR/*/checkpoints/, the hidden debris of processes that were killed while
// they wrote or removed a checkpoint (".tmp-*", ".trash-*" naming a pid no longer alive, as
// remove_stale_debris in retention.h decides): a killed `frugal archive` leaves the checkpoint it
// was removing as ".trash-step-NNNNNNNN-<pid>-<n>", which on a finished run no trainer start
// would clear. A run that a live process holds is left to that process. Returns what was removed.
std::vector<std::string> remove_dead_checkpoint_debris(const std::string& runs_dir);

// Archives one checkpoint to DIR/<run>/step-NNNNNNNN.tar.zst (see the safety notes above) and
// returns the archive path; "" when the checkpoint is gone (its run's retention removed it since
// the plan). Throws IoError/CheckpointError; the checkpoint is untouched then. Temporary archives
// that a killed `frugal archive` left in DIR/<run>/ are removed first.
std::string archive_checkpoint(const ArchiveCandidate& c, const std::string& to_dir);

// Extracts an archive back to RUNS_DIR/<run>/checkpoints/step-NNNNNNNN (the run name is read from
// the archive) and returns that path. A checkpoint already there with the same files (a rerun) is
// left as it is and *already set; one with other files is never overwritten (ConfigError). Throws
// CheckpointError if the archive is damaged, is another version's, holds an unsafe or overlong
// member name or more members than a checkpoint has, or the restored files fail verification.
// Staging folders of restores that were killed (.tmp-restore-<pid> of a pid no longer alive)
// are removed first.
std::string restore_checkpoint(const std::string& archive, const std::string& runs_dir, bool* already = nullptr);

}  // namespace frugal
