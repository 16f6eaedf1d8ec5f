// `frugal tune [CONFIG] [--out TUNED.toml] [--json] [--json-out REPORT.json] [--set ...]`: measures candidate
// settings for a few steps each (tune/tuner.h), prints the table and writes the tuned config.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/train/preemption.h"
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

void check_output_file(const std::string& flag, const std::string& path, const std::string& example) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec) || !p.has_filename())
    throw ConfigError(fmt::format("{} {} is a folder; name a file (for example {})", flag, path,
                                  (p / example).lexically_normal().string()));
  // The first folder above it that exists: the file's folders are made from there.
  for (fs::path a = fs::absolute(p, ec).parent_path();; a = a.parent_path()) {
    const fs::file_status st = fs::status(a, ec);
    if (st.type() == fs::file_type::not_found && a.has_relative_path()) continue;
    if (fs::exists(st) && !fs::is_directory(st))
      throw ConfigError(
          fmt::format("{} {}: {} is a file, not a folder; give a path inside a folder", flag, path, a.string()));
    if (fs::is_directory(st) && ::access(a.c_str(), W_OK | X_OK) != 0)
      throw ConfigError(fmt::format("{} {}: cannot write in {} ({}); give a path in a folder you can write to", flag,
                                    path, a.string(), std::strerror(errno)));
    return;
  }
}

std::unique_ptr<SignalHandlers> stop_signals_for(const std::string& command) {
  clear_preemption();
  set_interrupt_line(
      fmt::format("frugal: a second Ctrl-C (SIGINT): {0} stopped at once; nothing written (the next {0} removes its "
                  "temporary folder)",
                  command));
  return std::make_unique<SignalHandlers>();
}

namespace {
// How to train the tuned config: `frugal train OUT`, with a run.name of its own where the config's
// run directory already holds a run (trained once, then tuned: train would refuse it), so that
// the earlier run is kept and the command runs as printed.
std::string train_hint(const Config& c, const std::string& out) {
  const std::string cmd = "train with: frugal train " + shell_word(out);
  if (!RunDir::of(c).holds_run()) return cmd;
  Config named = c;
  for (int n = 1; n < 1000; ++n) {
    named.run.name = c.run.name + (n == 1 ? "-tuned" : fmt::format("-tuned-{}", n));
    if (!RunDir::of(named).holds_run()) break;
  }
  return fmt::format("{} holds the earlier run, so the tuned one gets a name of its own; {} --set run.name={}",
                     RunDir::of(c).root(), cmd, shell_word(named.run.name));
}
}  // namespace

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
      // Where the results go is checked before anything is measured.
      const std::string out = args->out.size() ? args->out : RunDir::of(rc.config).tuned_config();
      check_output_file(args->out.size() ? "--out" : "the tuned config's default path (--out)", out, "tuned.toml");
      check_output_file("--json-out", args->json_out, "tune.json");
      // A stop signal ends the probes at their step's end; run_tune then throws Interrupted (exit 75)
      // and its temporary folder goes as it unwinds.
      const auto signals = stop_signals_for("frugal tune");
      TuneReport report = run_tune(args->config, args->sets, env, console_tune_progress());
      auto& con = Console::get();
      con.finish_status();
      con.line(report.table());
      if (args->json_out.size()) write_file_atomic(args->json_out, report.to_json().dump(2) + "\n");
      if (args->json) fmt::print("{}\n", report.to_json().dump());
      if (const std::string why = too_short_to_tune(report, rc.config, args->config); !why.empty())
        throw ConfigError(why);
      if (report.best < 0) {
        con.line("no candidate qualified; no tuned config written");
        return 1;
      }
      write_file_atomic(out, tuned_config_toml(args->config, args->sets, env, report));
      con.line(fmt::format("wrote {} ({}); {}", out, report.candidates[static_cast<size_t>(report.best)].label,
                           train_hint(rc.config, out)));
      return 0;
    };
  });
}

}  // namespace frugal::cli
