#!/usr/bin/env bash
# A GPT on a text file with SentencePiece, end to end with the `frugal` tool:
#   1. frugal prepare TEXT --tokenizer sentencepiece --vocab 512   (tokenise once into shards)
#   2. frugal train gpt_text.toml --set data.source=shards:DIR     (train from the shards)
#
#   examples/gpt_text/run.sh [FRUGAL [TEXT [--set key=value]...]]
# FRUGAL defaults to build/frugal, TEXT to /usr/share/common-licenses/GPL-3 (on every Debian
# system). Outputs go under $FRUGAL_EXAMPLE_DIR (default runs/examples).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
frugal=${1:-build/frugal}
text=${2:-/usr/share/common-licenses/GPL-3}
shift $(($# < 2 ? $# : 2))
work=${FRUGAL_EXAMPLE_DIR:-runs/examples}

"$frugal" prepare "$text" --out "$work/gpt_text_data" --tokenizer sentencepiece --vocab 512 --quiet
"$frugal" train "$here/gpt_text.toml" --overwrite --set run.out_dir="$work" \
  --set data.source="shards:$work/gpt_text_data" "$@"
