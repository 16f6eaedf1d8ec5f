#!/usr/bin/env bash
# The setup of a training job: the dependencies (scripts/install-deps.sh: Debian packages and the
# pinned CUDA wheel of PyTorch in .venv/), then frugal built against that wheel in build/.
# `frugal launch --emit skypilot` writes this as the task's setup, the sbatch script of
# `--emit slurm` asks for it beforehand, and CI runs it first in a fresh clone.
#
#   bash scripts/job-setup.sh        (no options; -h prints this)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -gt 0 ]]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  [[ $1 == -h || $1 == --help ]] && exit 0
  echo "job-setup: takes no arguments (got '$1')" >&2
  exit 2
fi
bash scripts/install-deps.sh --run
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build/configure.log 2>&1 ||
  { tail -20 build/configure.log >&2; echo "job-setup: cmake configure failed; the whole log is build/configure.log" >&2; exit 1; }
cmake --build build -j "$(nproc)" --target frugal
echo "job-setup: build/frugal is ready"
