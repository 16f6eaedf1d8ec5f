// Checkpoint retention; see retention.h.
#include "frugal/ckpt/retention.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

namespace frugal {
namespace fs = std::filesystem;

namespace {
bool better(double a, double b, MetricMode m) { return m == MetricMode::kMin ? a < b : a > b; }

// Complete checkpoints with a metric, best first (ties: the newer first).
std::vector<const CheckpointInfo*> ranked(const std::vector<CheckpointInfo>& listing, MetricMode mode) {
  std::vector<const CheckpointInfo*> r;
  for (const auto& c : listing)
    if (c.complete && c.metric && !std::isnan(*c.metric)) r.push_back(&c);
  std::sort(r.begin(), r.end(), [mode](const CheckpointInfo* a, const CheckpointInfo* b) {
    if (*a->metric != *b->metric) return better(*a->metric, *b->metric, mode);
    return a->step > b->step;
  });
  return r;
}
}  // namespace

std::string best_checkpoint(const std::vector<CheckpointInfo>& listing, MetricMode mode) {
  auto r = ranked(listing, mode);
  return r.empty() ? "" : r.front()->path;
}

std::vector<std::string> plan_retention(const std::vector<CheckpointInfo>& listing,
                                        const RetentionPolicy& policy) {
  std::vector<const CheckpointInfo*> complete;
  for (const auto& c : listing)
    if (c.complete) complete.push_back(&c);
  std::sort(complete.begin(), complete.end(),
            [](const CheckpointInfo* a, const CheckpointInfo* b) { return a->step > b->step; });
  const int64_t newest_complete = complete.empty() ? -1 : complete.front()->step;

  std::set<std::string> keep;
  const int64_t keep_last = std::max<int64_t>(policy.keep_last, 1);  // rule 1 holds even for 0
  for (size_t i = 0; i < complete.size() && static_cast<int64_t>(i) < keep_last; ++i)
    keep.insert(complete[i]->path);
  auto best = ranked(listing, policy.mode);
  for (size_t i = 0; i < best.size() && static_cast<int64_t>(i) < policy.keep_best; ++i)
    keep.insert(best[i]->path);

  std::vector<std::string> remove;
  for (const auto& c : listing) {
    if (keep.count(c.path)) continue;
    if (!c.complete && c.step > newest_complete) continue;  // maybe in flight
    remove.push_back(c.path);
  }
  return remove;
}

namespace {
void remove_hidden_first(const std::string& root, const std::string& p) {
  // Hide first, then delete: a crash mid-delete leaves only a hidden directory.
  std::error_code ec;
  fs::path trash = fs::path(root) / fmt::format(".trash-{}-{}", fs::path(p).filename().string(), ::getpid());
  fs::remove_all(trash, ec);
  fs::rename(p, trash, ec);
  if (!ec) fs::remove_all(trash, ec);
}
}  // namespace

std::vector<std::string> remove_checkpoints_after(const std::string& root, int64_t step) {
  std::vector<std::string> removed;
  for (const auto& c : list_checkpoints(root)) {
    if (c.step <= step) continue;
    remove_hidden_first(root, c.path);
    removed.push_back(c.path);
  }
  return removed;
}

std::vector<std::string> apply_retention(const std::string& root, const RetentionPolicy& policy) {
  std::vector<std::string> removed = plan_retention(list_checkpoints(root), policy);
  std::error_code ec;
  for (const auto& p : removed) remove_hidden_first(root, p);
  // Debris of writes that crashed (another process id) or trash a crash left behind.
  const std::string mine = fmt::format("-{}-", ::getpid());
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    const bool tmp = n.rfind(".tmp-", 0) == 0, trash = n.rfind(".trash-", 0) == 0;
    if (trash || (tmp && n.find(mine) == std::string::npos)) {
      fs::remove_all(e.path(), ec);
      removed.push_back(e.path().string());
    }
  }
  return removed;
}

}  // namespace frugal
