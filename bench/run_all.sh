#!/usr/bin/env bash
# `make bench`: the CPU benchmarks (frugal against PyTorch 2.x eager and torch.compile, and the
# compute levers), raw JSON into bench/results/<date>/ and a table on stdout, then the tables of
# docs/levers.md regenerated from that JSON. Where PyTorch sees a CUDA device, the GPU benchmark
# (bench/gpu_bench.py) runs too, into the same folder.
#
#   bench/run_all.sh [compute_levers.py options, e.g. --repeats 5 or --quick]
# Python: the project's venv (.venv/bin/python, the PyTorch wheel frugal is built against),
# else python3 from PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[[ -x $PY ]] || PY=python3
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  echo
  exec "$PY" bench/compute_levers.py --help
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "run_all: $PY cannot import torch; install the PyTorch wheel into .venv (scripts/install-deps.sh)" >&2
  exit 2
fi
cmake --build build --target frugal optimizer_bench >/dev/null
"$PY" bench/compute_levers.py "$@"
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  "$PY" bench/gpu_bench.py
fi
"$PY" bench/render_tables.py
