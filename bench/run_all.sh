#!/usr/bin/env bash
# `make bench`: every benchmark the docs quote, one after another, each writing its raw JSON into
# bench/results/<date>/ (and a table on stdout), then bench/render_tables.py, which regenerates the
# figures of docs/levers.md, docs/tuning.md and README.md from that JSON. Where PyTorch sees a CUDA
# device, the GPU benchmark (bench/gpu_bench.py) runs too, into the same folder.
#
#   bench/run_all.sh [--quick] [--only NAME,NAME] [--lock FILE] [--list]
#
#   --quick        every benchmark's short pass (fewer steps and rounds), to check that they run:
#                  results go to bench/out/quick/<date>/ and the docs rendered from them to
#                  bench/out/quick/<date>/docs/; the docs and bench/results/ are left alone
#   --only LIST    run only these benchmarks (names from --list); the docs are still rendered
#   --lock FILE    hold FILE (flock) around each benchmark and the build, not around the whole
#                  run, so that other CPU-heavy jobs on a shared machine run between benchmarks
#                  but never during a measurement (also: BENCH_LOCK=FILE)
#   --list         the benchmarks, in the order they run (and gpu, where CUDA is visible)
# Python: the project's venv (.venv/bin/python, the PyTorch wheel frugal is built against),
# else python3 from PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[[ -x $PY ]] || PY=python3

# name|command (run from the repository root; $PY and $QUICK expanded at run time)
BENCHES=(
  "compute_levers|bench/compute_levers.py"
  "stacked_levers|bench/stacked_levers.py"
  "threads|bench/threads_bench.py"
  "checkpoint_stall|bench/checkpoint_stall.py"
  "dist|bench/dist_bench.py"
  "dynamic_batching|bench/dynamic_batching.py"
  "loader|bench/loader_bench.py"
  "tune_demo|bench/tune_demo.py"
  "search|bench/search_bench.py"
  "demo_run|bench/demo_run.py"
  "plan_accuracy|bench/plan_accuracy.py"
  "muon_step|bench/muon_step.py"
  "lora|bench/lora_bench.py"
)
TARGETS=(frugal optimizer_bench loader_bench dynamic_batching_bench)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
QUICK=() ONLY="" LOCK=${BENCH_LOCK:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --quick) QUICK=(--quick) ;;
    --only) [[ $# -ge 2 ]] || { echo "run_all: --only needs a list" >&2; exit 2; }; ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --lock) [[ $# -ge 2 ]] || { echo "run_all: --lock needs a file" >&2; exit 2; }; LOCK=$2; shift ;;
    --lock=*) LOCK=${1#--lock=} ;;
    --list) for b in "${BENCHES[@]}"; do echo "${b%%|*}  (${b#*|})"; done; exit 0 ;;
    *) echo "run_all: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
names=" "
for b in "${BENCHES[@]}"; do names+="${b%%|*} "; done
names+="gpu "
if [[ -n $ONLY ]]; then
  for n in ${ONLY//,/ }; do
    [[ $names == *" $n "* ]] || { echo "run_all: --only: '$n' is not a benchmark (known:$names)" >&2; exit 2; }
  done
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "run_all: $PY cannot import torch; install the PyTorch wheel into .venv (scripts/install-deps.sh)" >&2
  exit 2
fi

STAMP=$(mktemp)
trap 'rm -f "$STAMP"' EXIT
WAITED=0  # seconds spent waiting for the lock, in total
locked() {  # runs "$@" holding the lock file, when there is one, at low priority
  if [[ -z $LOCK ]]; then "$@"; return; fi
  local asked
  asked=$(date +%s)
  flock "$LOCK" bash -c 'date +%s > "$1"; shift; exec nice -n 5 "$@"' locked "$STAMP" "$@"
  WAITED=$((WAITED + $(cat "$STAMP") - asked))
}
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

start=$SECONDS
locked cmake --build build -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" >/dev/null
selected=()
for b in "${BENCHES[@]}"; do
  n=${b%%|*}
  if [[ -z $ONLY || ",$ONLY," == *",$n,"* ]]; then selected+=("$b"); fi
done
if [[ -z $ONLY || ",$ONLY," == *",gpu,"* ]] &&
   "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  selected+=("gpu|bench/gpu_bench.py")
fi
i=0
for b in "${selected[@]}"; do
  i=$((i + 1))
  n=${b%%|*} script=${b#*|}
  echo "== [$i/${#selected[@]}] $n ($script ${QUICK[*]})"
  t=$SECONDS w=$WAITED
  if [[ $n == gpu && ${#QUICK[@]} -gt 0 ]]; then
    locked "$PY" "$script" --smoke
  else
    locked "$PY" "$script" "${QUICK[@]}"
  fi
  waited=$((WAITED - w))
  echo "== [$i/${#selected[@]}] $n done in $(elapsed $((SECONDS - t - waited)))$(
    [[ -n $LOCK ]] && echo " after $(elapsed $waited) waiting for the lock") (total $(elapsed $((SECONDS - start))))"
done
if [[ ${#QUICK[@]} -gt 0 ]]; then
  dir=bench/out/quick/$(date +%Y-%m-%d)
  "$PY" bench/render_tables.py --results "$dir" --allow-quick --write-to "$dir/docs"
else
  "$PY" bench/render_tables.py
fi
echo "== make bench: $(elapsed $((SECONDS - start - WAITED)))$(
  [[ -n $LOCK ]] && echo " of benchmarks and build, $(elapsed $WAITED) waiting for the lock")"
