#!/usr/bin/env bash
# The examples under examples/ run end to end with short settings (CTest label "examples").
#
#   examples_test.sh gpt_text FRUGAL SOURCE_DIR
#   examples_test.sh cnn_images CNN_IMAGES_BINARY SOURCE_DIR
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
  cnn_images)
    cd "$work"
    "$frugal" generate images 60
    "$frugal" train images --augment 1 --set run.out_dir="$work/runs" --set train.steps=80 \
      --set train.eval_every=40 --set train.log_every=10 --set run.threads=1 | tee train.log
    summary=$work/runs/cnn_images/summary.json
    grep -q '"stop_kind": "completed"' "$summary" || { echo "FAIL: run did not complete"; cat "$summary"; exit 1; }
    grep -q '"precision": "bf16"' "$summary" || { echo "FAIL: not trained in bf16"; exit 1; }
    # 144 training images x 2 (one augmented variant each) in the description of the data.
    grep -q 'x2 with offline augmentation) (288 training' "$summary" || { echo "FAIL: augmentation missing"; grep '"data"' "$summary"; exit 1; }
    val=$(value "$summary" final_val_loss)
    # Three classes: chance is ln 3 = 1.10 (80 steps reach 0.82 on a 2-core VM).
    awk -v v="$val" 'BEGIN { exit !(v < 1.0) }' || { echo "FAIL: final_val_loss $val is not below 1.0"; exit 1; }
    ;;
  *)
    echo "unknown example $name"; exit 2 ;;
esac
