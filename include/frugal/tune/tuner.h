// `frugal tune`: measures a few training steps per candidate setting on this machine, for this
// model, and picks the fastest one that fits the memory limit and learns the same.
//
// Candidates (each runs through the real Trainer, in a temporary run directory, quietly):
//   1. the configuration as given (the baseline), 2. fp32 (the loss reference), then bf16
//   (and fp16 on CUDA) x activation checkpointing off/on, the batch-size finder's micro-batch
//   when there is a memory budget (global batch kept), and for shard data 0 loader workers
//   (the loader's core given to the model's intra-op threads).
// Each runs 1 warm-up step plus tune.probe_steps measured steps, once per round (tune.rounds),
// the candidates in turn, so that a machine whose speed drifts slows all of them alike; a
// candidate's figure is the median of its rounds' step times (of an even count the slower middle
// one: with 2 rounds the slower, so one lucky round cannot win), its tokens/s and projected run
// time both that step time's (summarize_rounds). A candidate qualifies when it ran without an
// out-of-memory back-off, its peak tensor memory is within memory.limit_mb (when set) and its loss
// is within tune.loss_tolerance (relative) of the fp32 reference's. Among qualifying candidates the
// highest tokens/s (of the median step time) wins, but it replaces the configuration as given only
// when it beats it by tune.min_speedup; and before a candidate other than the fp32 reference is
// chosen, it and the reference train tune.loss_check_steps steps from the same start and their
// losses over the last quarter are compared (a few probe steps cannot tell a precision that learns
// differently).
//
// Time bound: after the baseline, candidates run only while the time spent stays within
// tune.max_fraction of the configured run's projected time (baseline step time x train.steps);
// the rest are listed as skipped. The baseline and the fp32 reference always run once, then the
// finder's micro-batch (where the configured one does not fit, the ones that can qualify); further
// rounds and the loss check run only while they fit the bound (the report says what was skipped).
//
// A stop signal (SIGINT, SIGTERM, SIGUSR1, SIGHUP, with the caller's SignalHandlers installed) ends
// the probe at its step's end and run_tune with Interrupted (exit 75): nothing is written.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config_loader.h"

namespace frugal {

struct TuneCandidate {
  std::string label;              // e.g. "bf16 recompute=blocks micro 16x2"
  std::vector<std::string> sets;  // KEY=VALUE overrides on top of the tuned config file
  bool ran = false;
  bool failed = false;  // an error or an out-of-memory back-off (the note says which)
  std::string note;     // why skipped, the error, or why it does not qualify
  bool qualifies = false;
  std::vector<double> round_tokens_per_s, round_step_s;          // one per round it ran
  double tokens_per_step = 0;                                    // tokens of one optimizer step
  double tokens_per_s = 0;                                       // tokens_per_step / step_s
  double step_s = 0;                                             // the rounds' median step time (summarize_rounds)
  double check_loss = std::numeric_limits<double>::quiet_NaN();  // loss check (tune.loss_check_steps)
  double peak_mb = -1;                                           // peak live tensor memory (CPU); -1 = not measured
  double loss = 0;                                               // mean training loss over the probe steps
  double projected_s = 0;                                        // step_s x train.steps
  double projected_usd = 0, projected_kg_co2 = 0;
  double wall_s = 0;  // time this candidate took, start-up included
};

struct TuneReport {
  std::vector<TuneCandidate> candidates;
  int best = -1;               // index into candidates; -1 = none qualified
  double seconds = 0;          // the whole tune
  double bound_s = 0;          // tune.max_fraction x the baseline's projected run time
  double projected_run_s = 0;  // the baseline's projected run time
  int64_t bound_skipped = 0;   // candidates the time bound left out of round 1
  bool cost_known = false;     // a price ([budget]) was configured
  bool energy_known = false;   // a power draw was configured
  std::string finder;          // the batch-size finder's one-line result, if it ran
  int64_t rounds = 0;          // measurement rounds that ran
  std::string loss_check;      // what the loss check did, one line ("" = not needed)

  std::string table() const;  // the printed table
  nlohmann::json to_json() const;
  // The overrides of the chosen candidate (plus train.auto_tune = false); empty if none.
  std::vector<std::string> chosen_sets() const;
};

using TuneProgress = std::function<void(const std::string& line, bool permanent)>;

// Candidate k's figure from its rounds (round_step_s, each round's mean measured step time): step_s
// is their median, of an even count the slower of the two middle ones (a candidate is as fast as
// more than half of its rounds were, so one lucky round of two never wins), and tokens_per_s is
// tokens_per_step / step_s, so tokens/s and the projected run time say the same. 0 with no rounds.
void summarize_rounds(TuneCandidate& k);

// The choice among measured candidates (candidates[0] is the configuration as given; the first
// fp32 one that ran is the loss reference): sets each one's `qualifies` and why not in `note`, and
// returns the index of the fastest qualifying one by tokens_per_s (summarize_rounds), or 0 when
// that one does not beat the configuration as given (qualifying) by min_speedup; -1 when none
// qualifies. Losses are the loss check's when both it and the reference have one, else the probe's.
struct TuneRules {
  double loss_tolerance = 0.05;
  double min_speedup = 0.05;
  double limit_mb = 0;           // peak tensor memory limit; 0 = none
  int64_t loss_check_steps = 0;  // for the notes
};
int choose_candidate(std::vector<TuneCandidate>& candidates, const TuneRules& rules);

// "" unless no candidate qualified and the time bound skipped some; then why, for `frugal tune`'s
// exit 2: the bound (tune.max_fraction, the projected run, train.steps), the skipped candidates,
// and what would change it (more train.steps; a larger tune.max_fraction while it is below 1).
std::string too_short_to_tune(const TuneReport& report, const Config& config, const std::string& file);

// Tunes the config resolved from (file, overrides, env). Throws ConfigError/DataError like
// training would, Interrupted on a stop signal.
TuneReport run_tune(const std::string& file, const std::vector<std::string>& overrides,
                    const std::map<std::string, std::string>& env, const TuneProgress& progress = nullptr);

// The complete tuned configuration as TOML (every key, with its origin), ready for `frugal train`.
std::string tuned_config_toml(const std::string& file, const std::vector<std::string>& overrides,
                              const std::map<std::string, std::string>& env, const TuneReport& report);

}  // namespace frugal
