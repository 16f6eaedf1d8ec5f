// `frugal tune`: measures a few training steps per candidate setting on this machine, for this
// model, and picks the fastest one that fits the memory limit and learns the same.
//
// Candidates (each runs through the real Trainer, in a temporary run directory, quietly):
//   1. the configuration as given (the baseline), 2. fp32 (the loss reference), then bf16
//   (and fp16 on CUDA) x activation checkpointing off/on, the batch-size finder's micro-batch
//   when there is a memory budget (global batch kept), and for shard data 0 loader workers
//   (the loader's core given to the model's intra-op threads).
// Each runs 1 warm-up step plus tune.probe_steps measured steps. A candidate qualifies when it ran
// without an out-of-memory back-off, its peak tensor memory is within memory.limit_mb (when set)
// and its mean probe loss is within tune.loss_tolerance (relative) of the fp32 reference's.
// Among qualifying candidates the highest tokens/s wins.
//
// Time bound: after the baseline, candidates run only while the time spent stays within
// tune.max_fraction of the configured run's projected time (baseline step time x train.steps);
// the rest are listed as skipped. The baseline and the fp32 reference always run.
#pragma once

#include <cstdint>
#include <functional>
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
  std::string note;               // why skipped, the error, or why it does not qualify
  bool qualifies = false;
  double tokens_per_s = 0;
  double step_s = 0;              // mean measured step time
  double peak_mb = -1;            // peak live tensor memory (CPU); -1 = not measured
  double loss = 0;                // mean training loss over the probe steps
  double projected_s = 0;         // step_s x train.steps
  double projected_usd = 0, projected_kg_co2 = 0;
  double wall_s = 0;              // time this candidate took, start-up included
};

struct TuneReport {
  std::vector<TuneCandidate> candidates;
  int best = -1;                  // index into candidates; -1 = none qualified
  double seconds = 0;             // the whole tune
  double bound_s = 0;             // tune.max_fraction x the baseline's projected run time
  double projected_run_s = 0;     // the baseline's projected run time
  bool cost_known = false;        // a price ([budget]) was configured
  bool energy_known = false;      // a power draw was configured
  std::string finder;             // the batch-size finder's one-line result, if it ran

  std::string table() const;      // the printed table
  nlohmann::json to_json() const;
  // The overrides of the chosen candidate (plus train.auto_tune = false); empty if none.
  std::vector<std::string> chosen_sets() const;
};

using TuneProgress = std::function<void(const std::string& line, bool permanent)>;

// Tunes the config resolved from (file, overrides, env). Throws ConfigError/DataError like
// training would.
TuneReport run_tune(const std::string& file, const std::vector<std::string>& overrides,
                    const std::map<std::string, std::string>& env, const TuneProgress& progress = nullptr);

// The complete tuned configuration as TOML (every key, with its origin), ready for `frugal train`.
std::string tuned_config_toml(const std::string& file, const std::vector<std::string>& overrides,
                              const std::map<std::string, std::string>& env, const TuneReport& report);

}  // namespace frugal
