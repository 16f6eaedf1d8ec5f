// Cluster job files for a data-parallel run; see launcher.h.
#include <fmt/format.h>

#include <filesystem>

#include "frugal/core/errors.h"
#include "frugal/dist/launcher.h"

namespace frugal::dist {
namespace fs = std::filesystem;
namespace {

// Single-quoted for sh.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// As it is where the shell reads it as one word (a path of letters, digits and ./_-), else quoted.
std::string word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                       "./_-+=:,@") == std::string::npos;
  return plain ? s : quote(s);
}

// A YAML scalar: plain where it is one word, else single-quoted ('' for a quote inside).
std::string yaml_scalar(const std::string& s) {
  if (word(s) == s) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Slurm's time formats (sbatch --time): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, and
// UNLIMITED / INFINITE.
bool slurm_time(const std::string& t) {
  if (t == "UNLIMITED" || t == "unlimited" || t == "INFINITE" || t == "infinite") return true;
  auto numbers = [](const std::string& part, size_t most) {
    size_t n = 0, start = 0;
    for (;;) {
      const size_t colon = part.find(':', start);
      const std::string num = part.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos) return false;
      ++n;
      if (colon == std::string::npos) return n <= most;
      start = colon + 1;
    }
  };
  const size_t dash = t.find('-');
  if (dash == std::string::npos) return numbers(t, 3);
  return numbers(t.substr(0, dash), 1) && numbers(t.substr(dash + 1), 3);
}

// GPUs per node named by --accelerators ("H100:8" -> 8, "H100" -> 1); 0 without accelerators.
int64_t gpus_per_node(const EmitOptions& o) {
  if (o.accelerators.empty()) return 0;
  const auto colon = o.accelerators.rfind(':');
  if (colon == std::string::npos) return 1;
  const std::string n = o.accelerators.substr(colon + 1);
  if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || std::stoll(n) < 1)
    throw ConfigError(
        fmt::format("frugal launch --accelerators {}: the count after ':' must be a whole number "
                    ">= 1, as in H100:8",
                    o.accelerators));
  return std::stoll(n);
}

bool sets_key(const EmitOptions& o, const std::string& key) {
  for (const auto& s : o.sets)
    if (s.rfind(key + "=", 0) == 0) return true;
  return false;
}

std::string train_args(const EmitOptions& o, const std::string& extra) {
  std::string a = "train " + quote(o.config) + " --resume auto";
  // With GPUs the job trains on them (each process takes cuda:<local rank>), unless the
  // overrides say otherwise.
  if (gpus_per_node(o) > 0 && !sets_key(o, "run.device")) a += " --set run.device=cuda";
  for (const auto& s : o.sets) a += " --set " + quote(s);
  return a + extra;
}

// SkyPilot storage: a bucket URI (s3://, gs://, r2://, cos://, https:// for Azure) is mounted as
// the `source`; a bare name is a bucket SkyPilot creates or reuses by `name` (and keeps:
// persistent). Bare names follow the common bucket rules: 3-63 lowercase letters, digits, '-'
// and '.', starting and ending with a letter or digit.
std::string storage_block(const std::string& bucket) {
  if (bucket.find("://") != std::string::npos)
    return fmt::format("file_mounts:\n  /ckpt:\n    source: {}\n    mode: MOUNT\n", bucket);
  auto ok_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'; };
  auto ok_end = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  bool ok = bucket.size() >= 3 && bucket.size() <= 63 && ok_end(bucket.front()) && ok_end(bucket.back());
  for (char c : bucket) ok = ok && ok_char(c);
  if (!ok)
    throw ConfigError(
        fmt::format("frugal launch --bucket '{}': a bucket name has 3-63 lowercase letters, digits, "
                    "'-' and '.', and starts and ends with a letter or digit; or give a URI "
                    "such as s3://my-bucket or gs://my-bucket",
                    bucket));
  return fmt::format("file_mounts:\n  /ckpt:\n    name: {}\n    persistent: true\n    mode: MOUNT\n", bucket);
}

void check(const EmitOptions& o) {
  if (o.config.empty()) throw ConfigError("frugal launch --emit: name the CONFIG the job trains");
  if (o.nodes < 1 || o.procs_per_node < 1)
    throw ConfigError(
        fmt::format("frugal launch --emit: --nodes and -n must be >= 1 (got {} and {})", o.nodes, o.procs_per_node));
  const int64_t gpus = gpus_per_node(o);
  if (gpus > 0 && o.procs_per_node != gpus)
    throw ConfigError(
        fmt::format("frugal launch --emit: --accelerators {} gives {} GPU(s) per node but -n is {}; "
                    "each process drives one GPU, so pass -n {}",
                    o.accelerators, gpus, o.procs_per_node, gpus));
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
  y += fmt::format("workdir: {}\n", o.workdir.empty() ? "." : yaml_scalar(o.workdir));
  if (!o.bucket.empty()) y += storage_block(o.bucket);
  // scripts/job-setup.sh: install-deps.sh (the Debian packages and the pinned CUDA wheel of
  // PyTorch in .venv/), then build/frugal against that wheel's LibTorch (CUDA compiled in). CI runs
  // the same script first in a fresh clone, and this setup text verbatim at its end.
  y += "# setup: scripts/install-deps.sh (Debian packages, the CUDA wheel of PyTorch in .venv/), then\n"
       "# build/frugal built against it.\n";
  y += "setup: |\n  set -e\n  bash scripts/job-setup.sh\n";
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
  if (!slurm_time(o.time))
    throw ConfigError(
        fmt::format("frugal launch --time '{}': Slurm takes minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
                    "(e.g. --time 24:00:00 or --time 2-00:00:00)",
                    o.time));
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
  if (gpus_per_node(o) > 0) s += fmt::format("#SBATCH --gpus-per-node={}\n", gpus_per_node(o));
  s += fmt::format("#SBATCH --time={}\n", o.time);
  s += "#SBATCH --requeue\n";
  s += "#SBATCH --signal=TERM@120\n";
  s += "#SBATCH --open-mode=append\n";
  s += fmt::format("#SBATCH --output={}-%j.log\n\n", o.name);
  s += "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n";
  s += fmt::format("export MASTER_PORT={}\n\n", o.port);
  if (!o.workdir.empty()) {
    s += "# The folder `frugal launch --emit` ran in: CONFIG and runs/ are found here as there.\n";
    s += fmt::format("cd {} || exit 2\n", word(o.workdir));
  }
  s += "# frugal was built beforehand on storage the nodes share (bash scripts/job-setup.sh: against the\n";
  s += "# CUDA wheel's LibTorch in .venv/ beside it).\n";
  s += fmt::format("test -x {} || {{ echo {} >&2; exit 2; }}\n", word(o.frugal),
                   quote(o.frugal + " is missing: build it with bash scripts/job-setup.sh on storage the nodes share"));
  s += fmt::format("srun --kill-on-bad-exit=1 {} {}\n", word(o.frugal), train_args(o, ""));
  s += "code=$?\n";
  // 143 (128 + SIGTERM) too: a SIGTERM in a process's first milliseconds, while the dynamic loader
  // maps LibTorch and before frugal holds the stop signals, ends it with the default action.
  s += "# 75: checkpointed and stopped; 143: stopped by SIGTERM before frugal had started (nothing lost).\n";
  s += "if [ \"$code\" -eq 75 ] || [ \"$code\" -eq 143 ]; then scontrol requeue \"$SLURM_JOB_ID\"; fi\n";
  s += "exit \"$code\"\n";
  return s;
}

void locate_job(EmitOptions& o, bool skypilot, const std::string& exe, const std::string& cwd) {
  if (!skypilot) {
    o.frugal = exe;
    o.workdir = cwd;
    return;
  }
  // The folder synced to the nodes must be a frugal checkout: the setup builds frugal in it.
  auto checkout = [](const fs::path& d) { return !d.empty() && fs::exists(d / "scripts" / "job-setup.sh"); };
  fs::path root;  // the checkout this folder is in, else the one this frugal was built in (build/frugal)
  for (fs::path d = cwd; root.empty() && !d.empty(); d = d == d.parent_path() ? fs::path() : d.parent_path())
    if (checkout(d)) root = d;
  for (const fs::path& d :
       {fs::path(exe).parent_path().parent_path(), fs::path(exe).parent_path().parent_path().parent_path()})
    if (root.empty() && checkout(d)) root = d;
  if (root.empty())
    throw ConfigError(fmt::format(
        "frugal launch --emit skypilot: the task copies a frugal checkout to the nodes and builds frugal there "
        "(scripts/job-setup.sh), but neither this folder ({}) nor the one this frugal was built in ({}) is in one; "
        "run --emit in the frugal checkout",
        cwd, exe));
  const fs::path config = fs::weakly_canonical(fs::path(cwd) / o.config);
  const fs::path inside = config.lexically_relative(fs::weakly_canonical(root));
  if (inside.empty() || *inside.begin() == "..")
    throw ConfigError(fmt::format(
        "frugal launch --emit skypilot: CONFIG {} is outside the folder the task copies to the nodes ({}, its "
        "workdir), so the job would not find it; copy it into that folder and name the copy, or run --emit "
        "from a checkout that holds it",
        o.config, root.string()));
  o.config = inside.string();
  o.workdir = root.string();
}

}  // namespace frugal::dist
