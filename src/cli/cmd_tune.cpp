// `frugal tune [CONFIG] [--out TUNED.toml] [--json] [--json-out REPORT.json] [--set ...]`: measures candidate
// settings for a few steps each (tune/tuner.h), prints the table and writes the tuned config.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "cli/commands.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/tune/tuner.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {

TuneProgress console_tune_progress() {
  return [](const std::string& text, bool permanent) {
    auto& con = Console::get();
    if (permanent) {
      con.line(text);
    } else {
      con.status(text);  // TTY only: a status line redrawn in place (steps, finder probes)
    }
  };
}

void add_tune_command(CLI::App& app, Run* run) {
  struct Args {
    std::string config;
    std::vector<std::string> sets;
    std::string out;
    bool json = false;
    std::string json_out;
  };
  auto args = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("tune",
                         "Measure a few training steps per candidate setting on this machine (precision, activation "
                         "checkpointing, the batch-size finder's micro-batch when memory.limit_mb or a cgroup limit "
                         "sets a budget, loader workers for shard data), print tokens/s, peak memory, projected run "
                         "time, $ and kg CO2, and the probe loss of each, and write a complete config with the fastest "
                         "setting that fits memory.limit_mb and whose loss is within tune.loss_tolerance of fp32's.\n"
                         "Bounded by tune.max_fraction of the configured run's projected time; tune.probe_steps sets "
                         "the steps per candidate. See docs/tuning.md.");
  cmd->add_option("config", args->config, "TOML config file (default: the built-in demo)")->check(CLI::ExistingFile);
  add_set_option(cmd, args->sets, "tune.probe_steps=3");
  cmd->add_option("--out", args->out,
                  "where to write the tuned config (default: runs/<run.name>/tuned.toml); written "
                  "atomically, every key with its origin")
      ->type_name("TUNED.toml");
  cmd->add_flag("--json", args->json, "print the table as one JSON object on stdout; human lines go to stderr");
  cmd->add_option("--json-out", args->json_out, "also write the table as JSON here")->type_name("REPORT.json");
  cmd->callback([args, run] {
    *run = [args] {
      Console::get().set_json_mode(args->json);  // stdout carries only the JSON object
      const auto env = process_environment();
      const ResolvedConfig rc = resolve_run_config(args->config, args->sets, env);
      TuneReport report = run_tune(args->config, args->sets, env, console_tune_progress());
      auto& con = Console::get();
      con.finish_status();
      con.line(report.table());
      if (args->json_out.size()) write_file_atomic(args->json_out, report.to_json().dump(2) + "\n");
      if (args->json) fmt::print("{}\n", report.to_json().dump());
      if (report.best < 0 && report.bound_skipped > 0 && report.projected_run_s > 0)
        throw ConfigError(fmt::format(
            "{}: no candidate qualified, and tune.max_fraction = {} (of the configured run's projected {:.1f} s "
            "at train.steps = {}: a bound of {:.1f} s) skipped {} of the {} candidates; the run is too short to "
            "tune: raise train.steps or tune.max_fraction (e.g. --set tune.max_fraction=1), or train it as "
            "configured",
            args->config, rc.config.tune.max_fraction, report.projected_run_s, rc.config.train.steps, report.bound_s,
            report.bound_skipped, report.candidates.size()));
      if (report.best < 0) {
        con.line("no candidate qualified; no tuned config written");
        return 1;
      }
      const std::string out = args->out.size() ? args->out : RunDir::of(rc.config).tuned_config();
      write_file_atomic(out, tuned_config_toml(args->config, args->sets, env, report));
      con.line(fmt::format("wrote {} ({}); train with: frugal train {}", out,
                           report.candidates[static_cast<size_t>(report.best)].label, shell_word(out)));
      return 0;
    };
  });
}

}  // namespace frugal::cli
