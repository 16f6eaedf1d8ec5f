// The state of a `frugal search`, kept in <out>/search_state.json and rewritten atomically after
// every trial-rung and every decision, so that `--resume auto` after a kill repeats no finished
// trial-rung (docs/search.md lists the fields).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/search/halving.h"

namespace frugal::detail {

// What a trial had reached at the end of one rung (figures are the trial's totals so far).
struct RungResult {
  int64_t rung = 0;
  int64_t steps = 0;  // the step it reached: the rung's, or fewer when it ended on its own
  double metric = 0;  // NaN when none was measured
  double tokens_per_s = 0;
  double cost_usd = 0, kg_co2 = 0, energy_kwh = 0;
  double wall_s = 0;      // training time (summary.json wall_s), all sessions
  std::string stop_kind;  // summary.json's
};

struct TrialState {
  std::string id;                                           // "t003"
  int64_t draw = 0;                                         // the draw of the space it came from
  std::vector<std::pair<std::string, std::string>> values;  // the searched keys
  std::vector<std::string> search_sets;  // what the search adds (run.threads when trials share cores)
  // "active" (runs `rung` next), "stopped" (a decision stopped it after `rung`), "done" (finished
  // the last rung, or ended on its own), "failed" (an error, divergence or a lost result)
  std::string status = "active";
  int64_t rung = 0;
  std::vector<RungResult> results;
  std::string note;      // why it failed or ended early
  int64_t sessions = 0;  // trainer processes started for it
  int64_t steps = 0;     // the step its latest summary.json reached
  // The latest summary.json's totals (cost meter), counted in the search's spend.
  double spent_usd = 0, spent_kg_co2 = 0, spent_kwh = 0, spent_s = 0;
  double usd_per_hour = 0;  // its price ([budget]); 0 = its costs are not in dollars
};

struct SkippedDraw {
  int64_t draw = 0;
  std::vector<std::pair<std::string, std::string>> values;
  std::string kind;  // "invalid" or "duplicate"
  std::string why;
  int64_t times = 1;  // draws that gave these values
};

struct SearchState {
  nlohmann::json identity;  // SearchSpec::identity() of the search that began it
  std::vector<TrialState> trials;
  std::vector<SkippedDraw> skipped;
  std::vector<RungDecision> decisions;
  int64_t rung = 0;      // the rung being run (= rungs when all are done)
  double elapsed_s = 0;  // wall time of the sessions before this one
  int64_t sessions = 0;
  int64_t max_running = 0;  // most trials that trained at once
  std::string end;          // "" while running; "completed", "budget", "interrupted"
  std::string reason;

  nlohmann::json to_json() const;
  static SearchState from_json(const nlohmann::json& j);
};

nlohmann::json values_json(const std::vector<std::pair<std::string, std::string>>& values);
nlohmann::json decision_json(const RungDecision& d);

// Reads the state file; throws CheckpointError naming it when it is damaged.
SearchState load_search_state(const std::string& path);
void save_search_state(const std::string& path, const SearchState& state);

}  // namespace frugal::detail
