// Successive halving, the rule `frugal search` decides by, as pure functions (tests call them
// directly; docs/search.md explains the choice).
//
// A search of n trials has R rungs at increasing step counts s_0 < s_1 < ... < s_{R-1}, the last
// being the full-length run's train.steps. Every trial trains to s_0; at each rung the trials that
// reached it are ranked by the metric measured there, the best max(1, floor(m / eta)) of the m
// that ran it continue (resuming from their checkpoints) to the next rung, and the rest stop.
// Ties are broken by trial id, never by a timing, so the same metrics give the same decisions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

// The rung step counts for `rungs` rungs ending at max_steps: s_k = round(max_steps /
// eta^(rungs-1-k)). Throws ConfigError when the first would be 0 or two rungs would coincide.
std::vector<int64_t> rung_steps_for(int64_t max_steps, int64_t rungs, double eta);

// How many of the `ran` trials of a rung go on to the next one: max(1, floor(ran / eta)); 0 when
// none ran.
int64_t survivors(int64_t ran, double eta);

// The schedule of a search of `trials` trials when every trial that runs a rung finishes it.
struct HalvingSchedule {
  std::vector<int64_t> steps;    // per rung: the step the trials train to
  std::vector<int64_t> trials;   // per rung: how many trials run it
  int64_t trial_steps = 0;       // optimizer steps of all trials together (each rung resumes the last)
  int64_t full_trial_steps = 0;  // the same when every trial runs to the last rung's step
  int64_t trial_rungs = 0;       // trial-rungs to run (the progress count)
};
HalvingSchedule halving_schedule(int64_t trials, const std::vector<int64_t>& rung_steps, double eta);

// One trial's outcome at a rung.
// The metric of a trial that has not reached train.target_loss, for a *_to_target metric: finite
// (it is measured and may be promoted), and worse than any figure a trial that reached it has.
double not_reached_metric(MetricMode mode);
bool is_not_reached(double metric);

struct RungEntry {
  std::string id;            // trial id ("t003"): the tie-breaker
  double metric = 0;         // non-finite = failed (ranked last, never promoted)
  bool can_continue = true;  // false: it ended on its own (early stop) and has nothing left to train
};

struct RungDecision {
  int64_t rung = 0;
  std::vector<std::string> ranked;    // best first: finite metrics by mode, then the rest, ties by id
  std::vector<std::string> promoted;  // the best survivors(ranked.size()) that can continue
  std::vector<std::string> stopped;   // the others, in ranked order
};
RungDecision decide_rung(int64_t rung, std::vector<RungEntry> entries, double eta, MetricMode mode);

// A trial's standing at the end: the highest rung it reached and its metric there.
struct Standing {
  std::string id;
  int64_t rung = -1;  // -1 = reached none
  double metric = 0;  // at that rung; non-finite = failed
  double cost = 0;    // projected full-run cost (or time): ties of the metric go to the cheaper
};
// Trial ids, best first: a higher rung first (trials are compared at equal rungs), then the metric
// (mode), then the cost, then the id; failed ones last.
std::vector<std::string> rank_standings(std::vector<Standing> standings, MetricMode mode);

// Indices of the points on the Pareto front when both coordinates are better smaller: no other
// point is at least as good in both and better in one. Sorted by the first coordinate. Points with a
// non-finite coordinate are never on it.
std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& points);

}  // namespace frugal
