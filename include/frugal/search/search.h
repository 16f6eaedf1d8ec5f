// `frugal search`: architecture and hyper-parameter search by successive halving, ranked by the
// metric and by what each trial costs (docs/search.md).
//
// The search file (tune/search_space.h) names a base configuration, the keys to search over and
// the rungs. run_search() samples search.max_trials valid trials (seeded; combinations the config
// rejects are skipped and counted), then runs the rungs of tune/halving.h: each trial-rung is an
// ordinary `frugal train` process (`trainer`) with its own run directory under
// <out>/trials/<id>/, trained with `--resume auto --stop-at-step <rung step>` so that a promoted
// trial resumes from its checkpoint and follows the full-length run's schedule exactly.
// search.parallel trials train at once (the machine's cores split between them).
//
// State: <out>/search_state.json, rewritten atomically after every trial-rung and decision. A
// search resumed with `resume = "auto"` after any stop (a kill included) repeats no finished
// trial-rung; a trial stopped mid-rung resumes from its newest checkpoint.
//
// Budget: search.max_usd (the trials' spend, from their cost meters; a running one's as of its
// newest logged step) and search.max_hours (the search's wall time over all its sessions). Reaching
// one stops the running trials (each checkpoints), ranks what is known and writes the outputs.
//
// Outputs in <out>/: search.json (trials, rungs, decisions, figures, skipped draws, Pareto
// fronts), search.html (a table and the Pareto charts, self-contained like report.html), best.toml
// (the best trial's resolved configuration, for `frugal train best.toml`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace frugal {

struct SearchOptions {
  std::string file;                                  // the search file
  std::vector<std::string> sets;                     // KEY=VALUE for every trial (after the file's own sections)
  std::string out;                                   // the search folder; "" = search.out
  int64_t parallel = 0;                              // trials at once; 0 = search.parallel
  double max_usd = -1, max_hours = -1;               // < 0: the file's (search.max_usd, search.max_hours)
  std::string resume;                                // "auto": continue the search in the folder (or start one)
  bool overwrite = false;                            // replace a search already in the folder
  std::string trainer;                               // the `frugal` program that trains a trial
  std::function<void(const std::string&)> progress;  // one line per event (nullptr: silent)
};

enum class SearchEnd {
  kCompleted,    // every rung ran
  kBudget,       // search.max_usd or search.max_hours was reached (the CLI exits 3)
  kInterrupted,  // a stop signal, or a trial was preempted (the CLI exits 75; resume with auto)
};

struct SearchOutcome {
  SearchEnd end = SearchEnd::kCompleted;
  std::string reason;     // why it ended, one line
  std::string dir;        // the search folder
  std::string best;       // the best trial's id ("" when no trial measured anything)
  std::string best_toml;  // <dir>/best.toml, "" when not written
  std::string table;      // the ranking, for the console
};

// Runs (or resumes) a search. Throws ConfigError for a bad search file, a folder that already holds
// a search (without resume or overwrite) or a resumed search whose file changed in what it
// searches; IoError for disk trouble.
SearchOutcome run_search(const SearchOptions& options);

// search.html from search.json's object (src/search/search_report.cpp).
std::string render_search_html(const nlohmann::json& search);
// The ranking as a text table from search.json's object.
std::string search_table(const nlohmann::json& search);

}  // namespace frugal
