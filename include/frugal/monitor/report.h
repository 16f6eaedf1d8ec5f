// runs/<name>/report.html: one self-contained page (no network, no scripts) with SVG charts of
// train/validation loss, throughput, the step-time breakdown (stacked), memory and cost over
// time, the levers in effect and the stop reason, all read from the run's own files
// (metrics.jsonl, summary.json). `frugal report RUN_DIR` regenerates it; `frugal compare A B`
// prints two runs side by side.
#pragma once

#include <string>

namespace frugal {

// Renders the report of a run directory. Throws DataError if its files are missing or malformed.
std::string render_report(const std::string& run_dir);

// Renders and writes <run_dir>/report.html atomically; returns its path.
std::string write_report(const std::string& run_dir);

// A plain-text side-by-side comparison of two runs' summaries (speed-up, cost, final loss).
std::string compare_runs(const std::string& run_a, const std::string& run_b);

}  // namespace frugal
