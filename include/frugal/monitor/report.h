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
  int refresh_s = 0;        // > 0: the page updates itself in place every refresh_s seconds (live dashboard)
  std::string token_query;  // appended to the reload URL ("?token=..."); "" = none
  std::string config_toml;  // the run's resolved config.toml, shown folded; "" = none
  std::string note;         // shown under the stop reason (a metrics line left out); "" = none
};

// Round tick values covering [lo, hi]: at most max_ticks of them (at least 2), a step of 1, 2 or 5
// times a power of ten (or 2.5 for steps of 1 and up), the first at or below lo and the last at or
// above hi.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// A tick label with as many decimals as the step needs: "0.5", "0.0002", "500"; "12.5k" or "2M"
// for large values on steps of 1,000 or more; "3e-5" on steps below 1e-4.
std::string format_tick(double v, double step);
// A headline figure for people: "14,200", "1.23M", "45.6", "0.000965"; never "1.4e+04".
std::string format_figure(double x);

// Renders the page from a summary object and the metrics lines (each a step or eval object).
std::string render_report_html(const nlohmann::json& summary, const std::vector<nlohmann::json>& lines,
                               const ReportPageOptions& options = {});

// Renders the report of a run directory. Throws DataError if its files are missing or malformed,
// naming the file (and the line of metrics.jsonl). A torn last line of metrics.jsonl (no newline:
// a kill mid-write) is left out with a note on the page, also set in `note` when given ("" when
// none).
std::string render_report(const std::string& run_dir, std::string* note = nullptr);

// Renders and writes <run_dir>/report.html atomically; returns its path. `note` as render_report's.
std::string write_report(const std::string& run_dir, std::string* note = nullptr);

// A plain-text side-by-side comparison of two runs' summaries (speed-up, cost, final loss).
std::string compare_runs(const std::string& run_a, const std::string& run_b);
// The same as one JSON object (`frugal compare --json`): "a" and "b" (run directories and names),
// "figures" ({key: {"a", "b", "b_over_a"}}, null where a run lacks a figure), "labels" ({key: {"a", "b"}}),
// "config_differences" ({key: {"a", "b"}}, run.name and run.out_dir aside; each value a JSON string,
// number or boolean, not its TOML spelling), "tokenizers_differ".
nlohmann::json compare_runs_json(const std::string& run_a, const std::string& run_b);

}  // namespace frugal
