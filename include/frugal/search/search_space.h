// The search file of `frugal search` (docs/search.md): what to search over, from which
// configuration, how long, and by which metric. One TOML file:
//
//   [search]                       how the search runs (every key optional)
//   base = "demo.toml"             the config every trial starts from, relative to this file
//   max_trials = 8                 trials sampled; rungs = 3; eta = 2; metric = "val_loss"; ...
//   [space]                        one entry per config key searched over
//   "train.lr" = { log_range = [1e-4, 1e-2] }
//   "model.layers" = [2, 4]        a list = choices
//   [train]                        ordinary config sections: fixed for every trial
//   steps = 600
//
// load_search_spec() checks everything a trial does not need to run to find: unknown keys (with
// the closest known one), empty ranges and choice lists, values a key rejects on its own, and the
// base configuration itself; each ConfigError names the file, the line, the key and what is
// allowed. A combination that only fails together (model.heads not dividing model.embd) is found
// per trial, when it is sampled, and skipped (the search counts it).
//
// Sampling: draw d of a search is a pure function of (search.seed, d): a std::mt19937_64 seeded
// with derive_seed(seed, d, kSearchStream) (data/rng.h) takes one 53-bit uniform per key, the keys
// in alphabetical order. Float values are rounded to 4 significant digits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config_loader.h"

namespace frugal {

struct SearchParam {
  enum class Kind { kChoices, kRange, kLogRange };
  std::string key;  // a config key, "train.lr"
  Kind kind = Kind::kChoices;
  std::vector<std::string> choices;  // kChoices: values as --set reads them
  double low = 0, high = 0;          // kRange, kLogRange: inclusive bounds
  bool integer = false;              // an integer key: ranges draw integers
  std::string where;                 // "space.toml:12"
};

// Whether a summary.json metric is what reaching train.target_loss took ("usd_to_target", ...).
inline bool is_to_target_metric(const std::string& metric) {
  return metric.size() > 10 && metric.compare(metric.size() - 10, 10, "_to_target") == 0;
}

struct SearchSpec {
  std::string file;                 // the search file as given
  std::string base;                 // search.base resolved against the file's folder; "" = built-in defaults
  std::vector<std::string> fixed;   // KEY=VALUE for every trial: the file's config sections, then --set
  std::vector<SearchParam> params;  // alphabetical by key
  uint64_t seed = 1;
  int64_t max_trials = 8;
  double eta = 2;
  std::vector<int64_t> rung_steps;  // increasing; the last is train.steps
  std::string metric = "val_loss";  // a numeric key of summary.json; "val_loss" = final_val_loss
  MetricMode mode = MetricMode::kMin;
  int64_t parallel = 1;        // trials trained at once
  double max_usd = 0;          // stop once the trials' spend reaches this; 0 = no limit
  double max_hours = 0;        // stop once the search's wall time reaches this; 0 = no limit
  std::string out;             // the search folder
  Config base_config;          // base + fixed, resolved (train.steps, the price, ...)
  bool threads_given = false;  // run.threads was set (base, fixed or environment)

  // The summary.json key the metric reads.
  std::string metric_key() const { return metric == "val_loss" ? "final_val_loss" : metric; }
  // A metric of what reaching train.target_loss took ("usd_to_target", ...): a trial without it
  // has not reached the target yet, which ranks it after those that have (not a failure).
  bool metric_is_to_target() const { return is_to_target_metric(metric); }
  // What must not change when a search resumes (a JSON object; budgets and parallel may change).
  nlohmann::json identity() const;
};

// [search]'s keys and what each does, in the order docs/search.md lists them (`frugal search
// --help` prints them; an unknown key's error names them).
const std::vector<std::pair<std::string, std::string>>& search_keys();

// Reads and checks the search file. `sets` (KEY=VALUE, from the command line) apply to every trial
// after the file's own config sections. Throws ConfigError.
SearchSpec load_search_spec(const std::string& path, const std::vector<std::string>& sets,
                            const std::map<std::string, std::string>& env);

// The values of draw `draw` (see the top of this file): (key, value as --set reads it), by key.
std::vector<std::pair<std::string, std::string>> sample_point(const SearchSpec& spec, int64_t draw);

// Why a trial with these values cannot run ("" when it can): the configuration check's message
// (model.heads must divide model.embd, ...). `resolved` receives the trial's configuration.
std::string trial_problem(const SearchSpec& spec, const std::vector<std::pair<std::string, std::string>>& values,
                          const std::map<std::string, std::string>& env, Config* resolved = nullptr);

}  // namespace frugal
