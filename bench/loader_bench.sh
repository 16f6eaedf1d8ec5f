#!/usr/bin/env bash
# Loader and prepare benchmark: builds bench/loader_bench, runs it and the PyTorch DataLoader
# baseline on the same records, then the demo GPT on prepared token shards (200 steps, fp32 and
# bf16) for data_wait as a fraction of step time; prints one JSON object. Run as root for the
# cold-cache rounds (they drop the page cache).
# Usage: bench/loader_bench.sh [BUILD_DIR [loader_bench options: --records N --rounds R --images M --no-text]]
set -euo pipefail
# Python: the project venv (the PyTorch wheel frugal builds against), else python3.
PY="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
[[ -x $PY ]] || PY=python3
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[[ $# -gt 0 ]] && shift
cmake --build "$BUILD" --target loader_bench frugal-spm frugal >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BUILD/loader_bench" "$WORK" "$@" > "$WORK/cpp.json"
"$PY" bench/torch_loader_baseline.py "$WORK" > "$WORK/torch.json"
# The demo on token shards: two licence texts, byte tokens.
"$BUILD/frugal" prepare /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 \
  --out "$WORK/text_shards" --quiet >/dev/null
for p in fp32 bf16; do
  "$BUILD/frugal" train examples/demo.toml --set data.source=shards:"$WORK/text_shards" \
    --set train.steps=200 --set run.out_dir="$WORK/runs" --set run.name=$p --set precision.mode=$p \
    --quiet >/dev/null
done
"$PY" - "$WORK/cpp.json" "$WORK/torch.json" "$WORK/runs" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
out.update(json.load(open(sys.argv[2])))
out["shard_vs_torch_dataloader"] = out["shard_samples_per_s"] / out["torch_dataloader_small_files_samples_per_s"]
for p in ("fp32", "bf16"):
    s = json.load(open(f"{sys.argv[3]}/{p}/summary.json"))
    out[f"demo_on_shards_{p}_data_wait_fraction"] = s["data_wait_fraction"]
    out[f"demo_on_shards_{p}_tokens_per_s"] = s["tokens_per_s"]
print(json.dumps(out, indent=2))
PY
