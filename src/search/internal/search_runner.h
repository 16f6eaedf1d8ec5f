// The trial-rung pool of `frugal search`: starts each trial's `frugal train` process for a rung,
// at most search.parallel at once, reads its result from its run directory, and stops everything
// on a stop signal or when a budget is reached. See tune/search.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "frugal/search/search_space.h"
#include "search/internal/search_state.h"

namespace frugal::detail {

struct SearchContext {
  SearchSpec spec;
  SearchState state;
  std::string dir;      // the search folder
  std::string trainer;  // the frugal program
  std::function<void(const std::string&)> progress;
  std::chrono::steady_clock::time_point session_start = std::chrono::steady_clock::now();
  double earlier_s = 0;  // wall time of the earlier sessions
  int64_t planned_trial_rungs = 0;

  std::string state_path() const { return dir + "/search_state.json"; }
  std::string trial_dir(const TrialState& t) const { return dir + "/trials/" + t.id; }
  double elapsed_s() const;  // the search's wall time over all its sessions
  double spent_usd() const;  // the trials' spend so far (finished sessions)
  void save();               // the state file, with the elapsed time
  void say(const std::string& line) const {
    if (progress) progress(line);
  }
};

enum class RungStop { kNone, kBudget, kInterrupted };
struct RungRun {
  RungStop stop = RungStop::kNone;
  std::string reason;
};

// Runs rung k for every active trial that has not finished it. Returns when they all have, or on a
// stop (the running trials are sent SIGTERM, checkpoint and are waited for).
RungRun run_rung(SearchContext& ctx, int64_t k);

}  // namespace frugal::detail
