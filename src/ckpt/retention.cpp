// Checkpoint retention; see retention.h.
#include "frugal/ckpt/retention.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {
bool better(double a, double b, MetricMode m) { return m == MetricMode::kMin ? a < b : a > b; }

// Sound checkpoints with a metric, best first (ties: the newer first).
std::vector<const CheckpointInfo*> ranked(const std::vector<CheckpointInfo>& listing, MetricMode mode) {
  std::vector<const CheckpointInfo*> r;
  for (const auto& c : listing)
    if (c.complete && !c.corrupt && !c.unverified && c.metric && !std::isnan(*c.metric)) r.push_back(&c);
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

std::vector<std::string> plan_retention(const std::vector<CheckpointInfo>& listing, const RetentionPolicy& policy,
                                        const std::string& pinned) {
  std::vector<const CheckpointInfo*> sound;
  for (const auto& c : listing)
    if (c.complete && !c.corrupt && !c.unverified) sound.push_back(&c);
  std::sort(sound.begin(), sound.end(),
            [](const CheckpointInfo* a, const CheckpointInfo* b) { return a->step > b->step; });
  const int64_t newest_sound = sound.empty() ? -1 : sound.front()->step;

  std::set<std::string> keep;
  if (!pinned.empty()) keep.insert(pinned);
  const int64_t keep_last = std::max<int64_t>(policy.keep_last, 1);  // rule 1 holds even for 0
  for (size_t i = 0; i < sound.size() && static_cast<int64_t>(i) < keep_last; ++i) keep.insert(sound[i]->path);
  auto best = ranked(listing, policy.mode);
  for (size_t i = 0; i < best.size() && static_cast<int64_t>(i) < policy.keep_best; ++i) keep.insert(best[i]->path);

  std::vector<std::string> remove;
  for (const auto& c : listing) {
    if (keep.count(c.path)) continue;
    if (c.unverified) continue;                          // unreadable now, maybe sound: never deleted
    if (c.corrupt && sound.empty()) continue;            // nothing better to keep instead
    if (!c.complete && c.step > newest_sound) continue;  // maybe in flight
    remove.push_back(c.path);
  }
  return remove;
}

std::vector<std::string> remove_checkpoints_after(const std::string& root, int64_t step) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& c : list_checkpoints(root)) {
    if (c.step <= step) continue;
    remove_tree_hidden_first(c.path, ec);
    removed.push_back(c.path);
  }
  return removed;
}

namespace {
// Verification results of this process, by checkpoint path and marker text (a rewritten
// checkpoint has a new marker): each checkpoint's files are hashed once, not at every save.
// Only definite verdicts are cached: an I/O error may pass.
std::mutex verified_mu;
std::map<std::string, std::pair<std::string, bool>> verified_cache;

// Sets c.corrupt or c.unverified from a full check (cached); returns whether c is sound.
bool verify(CheckpointInfo& c) {
  std::string marker;
  try {
    marker = read_small_file((fs::path(c.path) / "COMPLETE").string());
  } catch (const std::exception&) {
    c.unverified = true;  // listed as complete a moment ago: unreadable, not known to be bad
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(verified_mu);
    auto it = verified_cache.find(c.path);
    if (it != verified_cache.end() && it->second.first == marker) {
      c.corrupt = !it->second.second;
      return it->second.second;
    }
  }
  const CheckpointCheck check = check_checkpoint(c.path);
  if (!check.problem.empty() && !check.definite) {
    c.unverified = true;
    return false;
  }
  c.corrupt = !check.problem.empty();
  std::lock_guard<std::mutex> lock(verified_mu);
  verified_cache[c.path] = {marker, !c.corrupt};
  return !c.corrupt;
}

}  // namespace

void note_written(const std::string& path) {
  try {
    const std::string marker = read_small_file((fs::path(path) / "COMPLETE").string());
    std::lock_guard<std::mutex> lock(verified_mu);
    verified_cache[path] = {marker, true};
  } catch (const std::exception&) {
    // Not cached: the next retention pass verifies it.
  }
}

namespace {
// The pid in a debris name: ".tmp-step-00000020-<pid>-<n>" or ".trash-step-00000020-<pid>[-<n>]";
// -1 when there is none.
int64_t debris_pid(const std::string& name) {
  const size_t step = name.find("step-");
  if (step == std::string::npos) return -1;
  const size_t dash = name.find('-', step + 5);
  if (dash == std::string::npos) return -1;
  const size_t end = name.find('-', dash + 1);
  const std::string digits = name.substr(dash + 1, end == std::string::npos ? std::string::npos : end - dash - 1);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}
}  // namespace

std::vector<std::string> remove_stale_debris(const std::string& root, bool all) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-", 0) != 0 && n.rfind(".trash-", 0) != 0) continue;
    if (!all && process_alive(debris_pid(n))) continue;  // a write or removal still in progress
    remove_tree(e.path(), ec);
    if (!ec) removed.push_back(e.path().string());
  }
  return removed;
}

std::vector<std::string> apply_retention(const std::string& root, const RetentionPolicy& policy,
                                         const std::string& pinned, std::vector<std::string>* not_removed) {
  std::vector<CheckpointInfo> listing = list_checkpoints(root);  // newest first
  // `pinned` as the listing spells it (a resume may have named it another way).
  std::string kept;
  std::error_code same_ec;
  for (const auto& c : listing)
    if (!pinned.empty() && kept.empty() && fs::equivalent(c.path, pinned, same_ec)) kept = c.path;
  // Verify the newest complete ones until keep_last sound ones are known, then the keep_best
  // candidates: only those can be kept, so only those need their files read.
  int64_t sound = 0;
  for (auto& c : listing) {
    if (!c.complete || sound >= std::max<int64_t>(policy.keep_last, 1)) continue;
    if (verify(c)) ++sound;
  }
  int64_t best_sound = 0;
  for (const CheckpointInfo* b : ranked(listing, policy.mode)) {
    if (best_sound >= policy.keep_best) break;
    CheckpointInfo& c = listing[static_cast<size_t>(b - listing.data())];
    if (verify(c)) ++best_sound;
  }
  std::vector<std::string> removed;
  std::error_code ec;
  for (auto& p : plan_retention(listing, policy, kept)) {
    if (remove_tree_hidden_first(p, ec))
      removed.push_back(std::move(p));
    else if (not_removed)
      not_removed->push_back(fmt::format("{}: {}", p, ec.message()));
  }
  for (auto& p : remove_stale_debris(root)) removed.push_back(std::move(p));
  return removed;
}

}  // namespace frugal
