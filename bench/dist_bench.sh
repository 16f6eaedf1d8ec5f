#!/usr/bin/env bash
# Data parallel on this machine: 2 local processes vs 1, and ZeRO-1 vs plain data parallel.
# Trains the same model with the same global batch (one process with accum 2; two ranks with
# accum 1 each) and prints one JSON object: per-step time, communication time (all-reduce waits
# not hidden behind backward + the stop agreement + ZeRO-1's parameter all-gather) as a fraction
# of step time, and optimizer-state bytes per rank with and without ZeRO-1 (summary.json).
#
#   bench/dist_bench.sh [BUILD/frugal] [extra --set ...]
# Default model: 4 layers, embd 256 (3.2M parameters). PORT picks the rendezvous port.
set -euo pipefail
# Python: the project venv (the PyTorch wheel frugal builds against), else python3.
PY="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
[[ -x $PY ]] || PY=python3
BIN=${1:-build/frugal}
shift || true
STEPS=${STEPS:-40}
PORT=${PORT:-29690}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--set model.layers=4 --set model.embd=256 --set model.heads=8 --set model.block=64
        --set data.micro_batch=8 --set train.steps=$STEPS --set train.eval_every=0
        --set train.answer_samples=0 --set checkpoint.enabled=false --set precision.mode=fp32 "$@")
"$BIN" train -q "${COMMON[@]}" --set train.accum=2 --set run.out_dir="$WORK/single" >/dev/null
"$BIN" launch -n 2 --port $PORT -- train -q "${COMMON[@]}" --set train.accum=1 \
  --set run.out_dir="$WORK/dp" >/dev/null
"$BIN" launch -n 2 --port $((PORT + 1)) -- train -q "${COMMON[@]}" --set train.accum=1 --set dist.zero=1 \
  --set run.out_dir="$WORK/zero" >/dev/null
"$PY" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
out = {"bench": "dist", "processes": 2}
for name in ("single", "dp", "zero"):
    s = json.load(open(f"{work}/{name}/demo/summary.json"))
    step_ms = 1e3 * s["wall_s"] / s["steps"]
    row = {"step_ms": step_ms, "tokens_per_s": s["tokens_per_s"],
           "optimizer_state_mb_per_rank": s["optimizer_state_mb"],
           "forward_ms": s["forward_ms_per_step"], "backward_ms": s["backward_ms_per_step"],
           "optimizer_ms": s["optimizer_ms_per_step"]}
    if "dist" in s:
        d = s["dist"]
        row.update({k: d[k] for k in ("comm_fraction", "comm_ms_per_step", "allreduce_wait_ms_per_step",
                                      "zero_gather_ms_per_step", "agree_ms_per_step", "buckets")})
    out[name] = row
    out["params"] = s["params"]
out["zero1_state_ratio"] = out["zero"]["optimizer_state_mb_per_rank"] / out["dp"]["optimizer_state_mb_per_rank"]
print(json.dumps(out, indent=2))
PY
