// runs/<name>/report.html: one self-contained page (no network, no scripts) with SVG charts of
// train/validation loss, throughput, MFU, the step-time breakdown (stacked, with evaluation and
// checkpoint time), memory, cost over time and the gradient noise scale, the headline figures,
// the levers in effect, the profiler's top operators and the stop reason, all read from the run's
// own files
// (metrics.jsonl, summary.json). `frugal report RUN_DIR` regenerates it; `frugal compare A B`
// prints two runs side by side.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace frugal {

struct ReportPageOptions {
  int refresh_s = 0;        // > 0: the page reloads itself every refresh_s seconds (live dashboard)
  std::string token_query;  // appended to the reload URL ("?token=..."); "" = none
};

// Renders the page from a summary object and the metrics lines (each a step or eval object).
std::string render_report_html(const nlohmann::json& summary, const std::vector<nlohmann::json>& lines,
                               const ReportPageOptions& options = {});

// Renders the report of a run directory. Throws DataError if its files are missing or malformed.
std::string render_report(const std::string& run_dir);

// Renders and writes <run_dir>/report.html atomically; returns its path.
std::string write_report(const std::string& run_dir);

// A plain-text side-by-side comparison of two runs' summaries (speed-up, cost, final loss).
std::string compare_runs(const std::string& run_a, const std::string& run_b);

}  // namespace frugal
