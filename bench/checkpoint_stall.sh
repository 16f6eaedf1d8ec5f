#!/usr/bin/env bash
# Checkpoint stall, sync vs async: how long the trainer is blocked per checkpoint save.
# Trains the same model twice with a checkpoint every EVERY steps, once with checkpoint.async =
# false and once with true, and prints one JSON object with summary.json's checkpoint figures.
#
#   bench/checkpoint_stall.sh [BUILD/frugal] [extra --set ...]
# Default model: 8 layers, embd 256 (6.4M parameters, ~77 MB per checkpoint with AdamW moments).
set -euo pipefail
# Python: the project venv (the PyTorch wheel frugal builds against), else python3.
PY="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
[[ -x $PY ]] || PY=python3
BIN=${1:-build/frugal}
shift || true
STEPS=${STEPS:-60}
EVERY=${EVERY:-10}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--set model.layers=8 --set model.embd=256 --set model.heads=8 --set model.block=64
        --set data.micro_batch=8 --set train.steps=$STEPS --set train.eval_every=0
        --set train.answer_samples=0 --set checkpoint.every_steps=$EVERY
        --set checkpoint.every_minutes=0 --set checkpoint.keep_last=2 "$@")
for mode in false true; do
  "$BIN" train -q "${COMMON[@]}" --set checkpoint.async=$mode --set run.out_dir="$WORK/$mode" >/dev/null
done
"$PY" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
out = {"bench": "checkpoint_stall"}
for mode, name in (("false", "sync"), ("true", "async")):
    s = json.load(open(f"{work}/{mode}/demo/summary.json"))
    c = s["checkpoint"]
    out[name] = {k: c[k] for k in ("saves", "stall_s_mean", "stall_s_max", "write_s_mean", "bytes")}
    out[name]["wall_s"] = s["wall_s"]
    out["params"] = s["params"]
out["stall_ratio_async_over_sync"] = out["async"]["stall_s_mean"] / out["sync"]["stall_s_mean"]
print(json.dumps(out, indent=2))
PY
