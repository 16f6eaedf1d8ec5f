#!/usr/bin/env bash
# Loader and prepare benchmark: builds bench/loader_bench, runs it and the PyTorch DataLoader
# baseline on the same records, prints one JSON object.
# Usage: bench/loader_bench.sh [BUILD_DIR [loader_bench options: --records N --rounds R --images M --no-text]]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[[ $# -gt 0 ]] && shift
cmake --build "$BUILD" --target loader_bench frugal-spm >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BUILD/loader_bench" "$WORK" "$@" > "$WORK/cpp.json"
/usr/bin/python3 bench/torch_loader_baseline.py "$WORK" > "$WORK/torch.json"
/usr/bin/python3 - "$WORK/cpp.json" "$WORK/torch.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
out.update(json.load(open(sys.argv[2])))
out["shard_vs_torch_dataloader"] = out["shard_samples_per_s"] / out["torch_dataloader_small_files_samples_per_s"]
print(json.dumps(out, indent=2))
PY
