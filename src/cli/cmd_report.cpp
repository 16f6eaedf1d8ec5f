// `frugal report RUN_DIR` and `frugal compare RUN_A RUN_B`.
#include <fmt/format.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "frugal/monitor/report.h"

namespace frugal::cli {

void add_report_commands(CLI::App& app, Run* run) {
  auto dir = std::make_shared<std::string>();
  auto* report =
      app.add_subcommand("report",
                         "Regenerate RUN_DIR/report.html from the run's metrics.jsonl and summary.json: a "
                         "self-contained page with loss, throughput, step-time breakdown, memory and cost charts.");
  report->add_option("run_dir", *dir, "run directory, e.g. runs/demo")->required()->check(CLI::ExistingDirectory);
  report->callback([dir, run] {
    *run = [dir] {
      std::string note;
      fmt::print("wrote {}\n", write_report(*dir, &note));
      if (!note.empty()) fmt::print(stderr, "frugal report: note: {}\n", note);
      return 0;
    };
  });

  struct CompareArgs {
    std::string a, b;
    bool json = false;
  };
  auto dirs = std::make_shared<CompareArgs>();
  auto* compare = app.add_subcommand(
      "compare", "Print two runs side by side: tokens/s, wall time, cost, carbon, losses, and the speed-up.");
  compare->add_option("run_a", dirs->a, "baseline run directory")->required()->check(CLI::ExistingDirectory);
  compare->add_option("run_b", dirs->b, "run compared with it")->required()->check(CLI::ExistingDirectory);
  compare->add_flag("--json", dirs->json,
                    "print one JSON object instead: each figure of A and B with B / A, and the config differences");
  compare->callback([dirs, run] {
    *run = [dirs] {
      if (dirs->json)
        fmt::print("{}\n", compare_runs_json(dirs->a, dirs->b).dump());
      else
        fmt::print("{}", compare_runs(dirs->a, dirs->b));
      return 0;
    };
  });
}

}  // namespace frugal::cli
