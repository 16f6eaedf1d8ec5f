// `frugal launch`: start the processes of a data-parallel run on this node with the environment
// torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), forward
// stop signals to them, and report which rank failed; and the job files that start the same run
// on a cluster (a SkyPilot task, a Slurm batch script). docs/distributed.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal::dist {

struct LaunchOptions {
  int64_t procs_per_node = 1;
  int64_t nodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  // After the first rank fails, the others get this long to notice and exit on their own (they
  // fail their next collective at once when the peer's socket closes), then SIGTERM, then SIGKILL.
  double grace_s = 30;
  std::vector<std::string> args;  // the frugal command each process runs, e.g. {"train", "cfg.toml"}
};

// Runs args under `exe` (normally /proc/self/exe) procs_per_node times and waits for all.
// SIGINT/SIGTERM/SIGUSR1/SIGHUP sent to the launcher go to every process once (a preemption
// notice: each rank checkpoints and they exit 75 together); a SIGHUP ignored when it starts
// (`nohup`) stays ignored, in the ranks too. Returns 0 when every rank exited 0,
// 75 when they stopped resumably, 2 when a rank refused its input (the others then fail at their
// next collective, and may exit first), else the first failed rank's exit code (128 + signal when
// killed), after printing which rank failed and how. Each process gets FRUGAL_RUN_THREADS =
// cores / procs_per_node unless the variable is set already.
int launch(const LaunchOptions& options, const std::string& exe);

struct EmitOptions {
  std::string config;           // the TOML config the job trains
  std::string name = "frugal";  // job / task name
  int64_t nodes = 1;
  int64_t procs_per_node = 1;     // processes (GPUs) per node
  std::string accelerators;       // SkyPilot resources.accelerators, e.g. "H100:8"; "" = CPU
  std::string bucket;             // SkyPilot: object-store bucket mounted at /ckpt for runs/; "" = none
  std::string time = "24:00:00";  // Slurm: --time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)
  int64_t port = 29500;
  std::vector<std::string> sets;  // --set overrides passed to `frugal train`
  // Where the job runs and what it starts (locate_job fills both for the command line):
  std::string frugal = "build/frugal";  // Slurm: the frugal binary srun starts
  std::string workdir;                  // Slurm: the directory the script cds to; SkyPilot: the
                                        // folder synced to the nodes (workdir:); "" = "." for both
};

// Fills `frugal` and `workdir` of `o` for a job file written in `cwd` by the frugal binary `exe`
// (absolute paths both). Slurm: the job runs `exe` in `cwd`, where CONFIG and runs/ are found as
// here. SkyPilot: the task syncs a frugal checkout to the nodes and builds frugal there
// (scripts/job-setup.sh): the one `cwd` is in, else the one `exe` was built in; CONFIG
// becomes a path inside it, and a CONFIG outside it is refused (ConfigError), as is a frugal
// that no checkout holds.
void locate_job(EmitOptions& o, bool skypilot, const std::string& exe, const std::string& cwd);

// A SkyPilot task YAML (spot instances; the job recovers on preemption and `--resume auto`
// continues from the last checkpoint).
std::string emit_skypilot(const EmitOptions& o);
// An sbatch script (srun starts one task per process; SIGTERM 120 s before the time limit
// checkpoints, and an exit 75 requeues the job, which resumes).
std::string emit_slurm(const EmitOptions& o);

}  // namespace frugal::dist
