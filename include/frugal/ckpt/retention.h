// Which checkpoints to delete. A pure function, plan_retention(), decides from a listing; the
// caller deletes. A checkpoint is "sound" when it is complete and verified (or, in a listing
// plan_retention() is given, complete and marked neither corrupt nor unverified).
// Rules, in order of precedence:
//   1. the newest sound checkpoint is never deleted;
//   2. the keep_best sound checkpoints with the best metric (min or max) are kept;
//   3. the keep_last newest sound checkpoints are kept;
//   4. an incomplete directory newer than the newest sound one is kept (a write may be in
//      flight); older incomplete ones are debris of a crash and are deleted;
//   5. a corrupt checkpoint (COMPLETE, but a file fails its checksum) is deleted once a sound one
//      exists: it can never be resumed from, and counting it as the newest would make rule 3
//      delete every sound checkpoint written after a fall-back resume;
//   6. an unverified checkpoint (complete, but a file could not be read, or another checkpoint
//      version's) is never deleted and never counted as sound.
// A `pinned` checkpoint (the one a run resumed from) is kept whatever the rules say.
// Rotation runs after a new checkpoint is complete (the writer calls it after COMPLETE), so a crash
// during a save can never leave fewer complete checkpoints than before; and once as a resumed run
// starts (its checkpoint loaded), so a lower keep_last frees space before the run's first save.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/config.h"

namespace frugal {

struct RetentionPolicy {
  int64_t keep_last = 3;  // >= 1
  int64_t keep_best = 0;
  MetricMode mode = MetricMode::kMin;
};

// Returns the paths of `listing` (any order) to delete; never `pinned` (a path of the listing, or
// "" for none).
std::vector<std::string> plan_retention(const std::vector<CheckpointInfo>& listing, const RetentionPolicy& policy,
                                        const std::string& pinned = "");

// Lists root, verifies (each checkpoint's files are read and hashed once per process: the
// newest until keep_last sound ones are found, and the keep_best candidates), plans and
// deletes; also removes stale debris (remove_stale_debris). `pinned`: a checkpoint never deleted
// (any path naming one under root; "" for none). Returns what was deleted. A checkpoint the
// rules would delete but that cannot be moved aside (no permission, an immutable directory) is
// left in place and, with `not_removed`, listed there as "PATH: reason".
std::vector<std::string> apply_retention(const std::string& root, const RetentionPolicy& policy,
                                         const std::string& pinned = "",
                                         std::vector<std::string>* not_removed = nullptr);

// Records that this process has just written the checkpoint at path (its files hashed as they
// were written), or verified it whole (load_checkpoint), so apply_retention() does not read it
// back to verify it.
void note_written(const std::string& path);

// Removes the hidden temp directories (".tmp-*") and half-deleted ones (".trash-*") under root
// whose writing process is gone (its pid, part of the name, no longer runs). A live process's
// directories, including this one's, are left alone. With `all`, every one goes: for a caller that
// holds the run directory's lock (DirLock) before its own first write, when no live writer can
// exist and a matching pid only means the pid was reused. Returns what was deleted.
std::vector<std::string> remove_stale_debris(const std::string& root, bool all = false);

// Deletes every step-* directory under root with a step above `step` (a divergence rollback:
// they hold the diverged trajectory, and resume must never pick them). Returns what was deleted.
std::vector<std::string> remove_checkpoints_after(const std::string& root, int64_t step);

// The best complete checkpoint by metric, or "" when none records a metric.
std::string best_checkpoint(const std::vector<CheckpointInfo>& listing, MetricMode mode);

}  // namespace frugal
