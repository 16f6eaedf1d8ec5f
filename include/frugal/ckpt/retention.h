// Which checkpoints to delete. A pure function, plan_retention(), decides from a listing; the
// caller deletes. Rules, in order of precedence:
//   1. the newest complete checkpoint is never deleted;
//   2. the keep_best complete checkpoints with the best metric (min or max) are kept;
//   3. the keep_last newest complete checkpoints are kept;
//   4. an incomplete directory newer than the newest complete one is kept (a write may be in
//      flight); older incomplete ones are debris of a crash and are deleted.
// Rotation runs only after a new checkpoint is complete (the writer calls it after COMPLETE), so
// a crash during a save can never leave fewer complete checkpoints than before.
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

// Returns the paths of `listing` (any order) to delete.
std::vector<std::string> plan_retention(const std::vector<CheckpointInfo>& listing,
                                        const RetentionPolicy& policy);

// Lists root, plans and deletes; also removes stale hidden temp directories (".tmp-*" and
// ".trash-*") not belonging to a write in progress in this process. Returns what was deleted.
std::vector<std::string> apply_retention(const std::string& root, const RetentionPolicy& policy);

// Deletes every step-* directory under root with a step above `step` (a divergence rollback:
// they hold the diverged trajectory, and resume must never pick them). Returns what was deleted.
std::vector<std::string> remove_checkpoints_after(const std::string& root, int64_t step);

// The best complete checkpoint by metric, or "" when none records a metric.
std::string best_checkpoint(const std::vector<CheckpointInfo>& listing, MetricMode mode);

}  // namespace frugal
