// `frugal report RUN_DIR` and `frugal compare RUN_A RUN_B`.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "frugal/monitor/report.h"

namespace frugal::cli {

void add_report_commands(CLI::App& app, Run* run) {
  auto dir = std::make_shared<std::string>();
  auto* report = app.add_subcommand(
      "report",
      "Regenerate RUN_DIR/report.html from the run's metrics.jsonl and summary.json: a "
      "self-contained page with loss, throughput, step-time breakdown, memory and cost charts.");
  report->add_option("run_dir", *dir, "run directory, e.g. runs/demo")->required()->check(CLI::ExistingDirectory);
  report->callback([dir, run] {
    *run = [dir] {
      fmt::print("wrote {}\n", write_report(*dir));
      return 0;
    };
  });

  auto dirs = std::make_shared<std::pair<std::string, std::string>>();
  auto* compare = app.add_subcommand(
      "compare", "Print two runs side by side: tokens/s, wall time, cost, carbon, losses, and the speed-up.");
  compare->add_option("run_a", dirs->first, "baseline run directory")->required()->check(CLI::ExistingDirectory);
  compare->add_option("run_b", dirs->second, "run compared with it")->required()->check(CLI::ExistingDirectory);
  compare->callback([dirs, run] {
    *run = [dirs] {
      fmt::print("{}", compare_runs(dirs->first, dirs->second));
      return 0;
    };
  });
}

}  // namespace frugal::cli
