#!/usr/bin/env bash
# Dynamic batching benchmark: naive padding vs length bucketing vs sequence packing (padding
# fraction and target tokens/s of GPT training). Prints one JSON object.
# Usage: bench/dynamic_batching.sh [BUILD_DIR] [-- bench args, e.g. --jsonl FILE --field text]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
cmake --build "$BUILD" --target dynamic_batching_bench >/dev/null
"$BUILD/dynamic_batching_bench" "$@"
