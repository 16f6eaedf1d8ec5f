// Cluster job files for a data-parallel run; see launcher.h.
#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/dist/launcher.h"

namespace frugal::dist {
namespace {

void check(const EmitOptions& o) {
  if (o.config.empty()) throw ConfigError("frugal launch --emit: name the CONFIG the job trains");
  if (o.nodes < 1 || o.procs_per_node < 1)
    throw ConfigError(fmt::format("frugal launch --emit: --nodes and -n must be >= 1 (got {} and {})", o.nodes,
                                  o.procs_per_node));
}

// Single-quoted for sh.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string train_args(const EmitOptions& o, const std::string& extra) {
  std::string a = "train " + quote(o.config) + " --resume auto";
  for (const auto& s : o.sets) a += " --set " + quote(s);
  return a + extra;
}

}  // namespace

std::string emit_skypilot(const EmitOptions& o) {
  check(o);
  std::string y;
  y += "# SkyPilot task for a frugal data-parallel run, written by `frugal launch --emit skypilot`.\n";
  y += "# Start it as a managed job so that spot preemptions are recovered automatically:\n";
  y += fmt::format("#   sky jobs launch -n {} this.yaml\n", o.name);
  y += "# After a preemption SkyPilot starts the task again and `--resume auto` continues from the\n";
  y += "# newest complete checkpoint";
  y += o.bucket.empty() ? " (keep runs/ on storage that survives the machine: --bucket).\n"
                        : fmt::format(" under /ckpt (the bucket {}).\n", o.bucket);
  y += fmt::format("name: {}\n", o.name);
  y += fmt::format("num_nodes: {}\n", o.nodes);
  y += "resources:\n  use_spot: true\n";
  if (!o.accelerators.empty()) y += fmt::format("  accelerators: {}\n", o.accelerators);
  y += "workdir: .\n";
  if (!o.bucket.empty())
    y += fmt::format("file_mounts:\n  /ckpt:\n    name: {}\n    mode: MOUNT\n", o.bucket);
  y += "setup: |\n  bash scripts/install-deps.sh\n"
       "  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release\n"
       "  cmake --build build -j --target frugal\n";
  const std::string out_dir = o.bucket.empty() ? "" : " --set run.out_dir=/ckpt/runs";
  y += "run: |\n";
  y += "  MASTER_ADDR=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)\n";
  y += fmt::format(
      "  build/frugal launch -n {} --nodes \"$SKYPILOT_NUM_NODES\" --node-rank \"$SKYPILOT_NODE_RANK\" "
      "--master-addr \"$MASTER_ADDR\" --port {} -- {}\n",
      o.procs_per_node, o.port, train_args(o, out_dir));
  return y;
}

std::string emit_slurm(const EmitOptions& o) {
  check(o);
  std::string s;
  s += "#!/bin/bash\n";
  s += "# Slurm batch script for a frugal data-parallel run, written by `frugal launch --emit slurm`.\n";
  s += "# Submit with: sbatch this.sbatch. srun starts one task per process; each reads its rank from\n";
  s += "# SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID. Slurm sends SIGTERM 120 s before the time limit\n";
  s += "# (or on preemption): every rank checkpoints and exits 75, and the job requeues itself and\n";
  s += "# continues from that checkpoint (--resume auto).\n";
  s += fmt::format("#SBATCH --job-name={}\n", o.name);
  s += fmt::format("#SBATCH --nodes={}\n", o.nodes);
  s += fmt::format("#SBATCH --ntasks-per-node={}\n", o.procs_per_node);
  if (!o.accelerators.empty()) s += fmt::format("#SBATCH --gpus-per-node={}\n", o.procs_per_node);
  s += fmt::format("#SBATCH --time={}\n", o.time);
  s += "#SBATCH --requeue\n";
  s += "#SBATCH --signal=TERM@120\n";
  s += "#SBATCH --open-mode=append\n";
  s += fmt::format("#SBATCH --output={}-%j.log\n\n", o.name);
  s += "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n";
  s += fmt::format("export MASTER_PORT={}\n\n", o.port);
  s += fmt::format("srun --kill-on-bad-exit=1 build/frugal {}\n", train_args(o, ""));
  s += "code=$?\n";
  s += "if [ \"$code\" -eq 75 ]; then scontrol requeue \"$SLURM_JOB_ID\"; fi\n";
  s += "exit \"$code\"\n";
  return s;
}

}  // namespace frugal::dist
