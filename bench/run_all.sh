#!/usr/bin/env bash
# `make bench`: every benchmark, JSON under bench/out/ and a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target optimizer_bench >/dev/null
/usr/bin/python3 bench/compute_levers.py "$@"
