// `frugal launch -n N [--port P] [--nodes K --node-rank I --master-addr H] -- train CONFIG ...`
// `frugal launch --emit skypilot|slurm [-n N] [--nodes K] [...] CONFIG`
//
// Starts N local processes of a data-parallel run (dist/launcher.h), or writes the job file that
// starts one on a cluster. docs/distributed.md.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/dist/launcher.h"

namespace frugal::cli {
namespace {

// " train my.toml", shell-quoted; " train CONFIG" where no command was given.
std::string command_words(const std::vector<std::string>& command) {
  if (command.empty()) return " train CONFIG";
  std::string out;
  for (const auto& w : command) out += " " + shell_word(w);
  return out;
}

}  // namespace

void add_launch_command(CLI::App& app, Run* run) {
  struct Args {
    dist::LaunchOptions launch;
    std::string emit;
    std::string output;
    std::string accelerators;
    std::string bucket;
    std::string name;
    std::string time = "24:00:00";
    std::vector<std::string> sets;
    std::vector<std::string> command;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "launch",
      "Run data-parallel training in several processes: `frugal launch -n 2 -- train my.toml` starts 2 "
      "ranks here with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), "
      "forwards SIGINT/SIGTERM/SIGUSR1/SIGHUP to them (they checkpoint together and exit 75) and names the rank "
      "that failed. Exit code: 0, 75, 2 when a rank refused its input, else the first failed rank's code.\n"
      "`frugal launch --emit skypilot|slurm [-n N] [--nodes K] CONFIG` instead prints a SkyPilot task (spot, "
      "resumes after preemption) or an sbatch script. See docs/distributed.md.");
  cmd->add_option("-n,--nproc", a->launch.procs_per_node, "processes on this node (per node for --emit)")
      ->capture_default_str();
  cmd->add_option("--port", a->launch.master_port, "MASTER_PORT: the TCP port rank 0 listens on for the rendezvous")
      ->check(in_range(int64_t{1}, int64_t{65535}))
      ->capture_default_str();
  cmd->add_option("--nodes", a->launch.nodes, "nodes in the run (multi-node: start one launcher per node)")
      ->capture_default_str();
  cmd->add_option("--node-rank", a->launch.node_rank, "this node's index in [0, nodes)")->capture_default_str();
  cmd->add_option("--master-addr", a->launch.master_addr, "MASTER_ADDR: host of rank 0")->capture_default_str();
  cmd->add_option("--grace", a->launch.grace_s,
                  "seconds the other ranks get to stop on their own after one failed, before SIGTERM")
      ->check(in_range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--emit", a->emit, "write a job file instead of running: skypilot or slurm")
      ->check(CLI::IsMember({"skypilot", "slurm"}));
  cmd->add_option("-o,--output", a->output, "--emit: write the job file here instead of stdout");
  cmd->add_option("--accelerators", a->accelerators,
                  "--emit: accelerators per node, e.g. H100:8 (SkyPilot syntax; Slurm requests -n GPUs per node)");
  cmd->add_option("--bucket", a->bucket, "--emit skypilot: a bucket mounted at /ckpt to hold runs/ across preemptions");
  cmd->add_option("--name", a->name, "--emit: job name (default: the config file's stem)");
  cmd->add_option("--time", a->time, "--emit slurm: wall-time limit")->capture_default_str();
  add_set_option(cmd, a->sets, "train.steps=5000", "of `frugal train` in the job --emit writes")
      ->allow_extra_args(false);  // one value per --set, so CONFIG may follow
  cmd->add_option("command", a->command,
                  "after --: the frugal command every process runs (e.g. train my.toml --set ...); with --emit: "
                  "the CONFIG");
  cmd->callback([a, run] {
    *run = [a] {
      if (!a->emit.empty()) {
        if (a->command.size() != 1)
          throw ConfigError("frugal launch --emit: give exactly one CONFIG file (the job runs `frugal train CONFIG`)");
        dist::EmitOptions e;
        e.config = a->command.front();
        // The job would refuse a missing file, an unknown key or a bad value after queueing: refuse
        // them here. Without this shell's environment: the job's is the cluster's.
        resolve_config(e.config, a->sets, {});
        std::string stem = e.config.substr(e.config.find_last_of('/') + 1);
        stem = stem.substr(0, stem.find('.'));
        e.name = a->name.empty() ? "frugal-" + stem : a->name;
        e.nodes = a->launch.nodes;
        e.procs_per_node = a->launch.procs_per_node;
        e.accelerators = a->accelerators;
        e.bucket = a->bucket;
        e.time = a->time;
        e.port = a->launch.master_port;
        e.sets = a->sets;
        // The job runs this frugal, in this folder (Slurm), or builds frugal in the checkout it
        // copies to the nodes, which must hold CONFIG (SkyPilot).
        std::error_code ec;
        const std::string exe = std::filesystem::canonical("/proc/self/exe", ec).string();
        if (ec) throw IoError("frugal launch --emit: cannot find its own program (/proc/self/exe): " + ec.message());
        dist::locate_job(e, a->emit == "skypilot", exe, std::filesystem::current_path().string());
        const std::string text = a->emit == "skypilot" ? dist::emit_skypilot(e) : dist::emit_slurm(e);
        if (a->output.empty()) {
          std::fputs(text.c_str(), stdout);
        } else {
          write_file_atomic(a->output, text);
          std::fprintf(stderr, "wrote %s\n", a->output.c_str());
        }
        return 0;
      }
      if (!a->sets.empty())  // they would reach no rank: the ranks run the command after --, as it is
        throw ConfigError(
            fmt::format("frugal launch: --set before -- applies only to the job file --emit writes; put it after the "
                        "command, where the ranks read it: frugal launch -n {} --{}{}",
                        a->launch.procs_per_node, command_words(a->command), set_flags(a->sets)));
      a->launch.args = a->command;
      return dist::launch(a->launch, "/proc/self/exe");
    };
  });
}

}  // namespace frugal::cli
