// `frugal smoke [CONFIG] [--set ...]`: 2 tiny steps through the whole pipeline, with a checkpoint,
// a simulated kill and a resume (tune/smoke.h). Exit 0 when every stage passes, else the cause's
// code: 2 for bad input (a config key, the data), 1 for a failure.
#include <cstdio>

#include "cli/commands.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/exit_code.h"
#include "frugal/tune/smoke.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {

void add_smoke_command(CLI::App& app, Run* run) {
  struct Args {
    std::string config;
    std::vector<std::string> sets;
  };
  auto args = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("smoke",
                         "Run the real pipeline for 2 steps at a tiny batch on the CPU: data, forward, backward, "
                         "optimizer, eval, checkpoint save, a simulated kill and resume (the resumed step's loss must "
                         "equal the uninterrupted one), the model built as `frugal train` builds it ([lora] included). "
                         "Reports shapes, parameters (those that train apart), time per step and memory per sample; on "
                         "failure names the stage and the cause and exits 2 for bad input (a config key, the data), 1 "
                         "otherwise.");
  cmd->add_option("config", args->config, "TOML config file")->check(CLI::ExistingFile);
  add_set_option(cmd, args->sets, "model.layers=12");
  cmd->callback([args, run] {
    *run = [args] {
      SmokeReport r = run_smoke(resolve_run_config(args->config, args->sets, process_environment()));
      std::fputs(r.describe().c_str(), r.ok ? stdout : stderr);
      return exit_status(r.exit_code());
    };
  });
}

}  // namespace frugal::cli
