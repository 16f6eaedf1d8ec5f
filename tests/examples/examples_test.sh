#!/usr/bin/env bash
# The examples under examples/ run end to end with short settings (CTest label "examples").
#
#   examples_test.sh gpt_text FRUGAL SOURCE_DIR
set -euo pipefail
name=$1
frugal=$2
src=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/frugal-example.XXXXXX")
trap 'rm -rf "$work"' EXIT

# summary.json's value of a numeric key.
value() { sed -n "s/^  \"$2\": \\([-0-9.e+]*\\),\$/\\1/p" "$1"; }

case $name in
  gpt_text)
    FRUGAL_EXAMPLE_DIR=$work bash "$src/examples/gpt_text/run.sh" "$frugal" /usr/share/common-licenses/GPL-3 \
      --set train.steps=30 --set train.warmup_steps=5 --set train.eval_every=15 --set train.eval_batches=2 \
      --set train.log_every=5 --set run.threads=1 --quiet
    summary=$work/gpt_text/summary.json
    grep -q '"stop_kind": "completed"' "$summary" || { echo "FAIL: run did not complete"; cat "$summary"; exit 1; }
    grep -q '"name": "sentencepiece' "$work/gpt_text_data/manifest.json" ||
      { echo "FAIL: the dataset was not tokenised with SentencePiece"; exit 1; }
    # 30 steps must take the loss well under uniform guessing over 512 pieces (ln 512 = 6.24).
    val=$(value "$summary" final_val_loss)
    awk -v v="$val" 'BEGIN { exit !(v < 5.5) }' || { echo "FAIL: final_val_loss $val is not below 5.5"; exit 1; }
    echo "gpt_text: final_val_loss $val"
    ;;
  *)
    echo "unknown example $name"; exit 2 ;;
esac
