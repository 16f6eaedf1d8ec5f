#!/usr/bin/env bash
# The examples under examples/ run end to end with short settings (CTest label "examples").
#
#   examples_test.sh gpt_text FRUGAL SOURCE_DIR
#   examples_test.sh cnn_images CNN_IMAGES_BINARY SOURCE_DIR FRUGAL
#   examples_test.sh torchscript_lm FRUGAL SOURCE_DIR PYTHON
set -euo pipefail
name=$1
frugal=$2
src=$3
cli=${4:-}
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
  torchscript_lm)
    # $4 is the Python with torch that scripts the model.
    FRUGAL_EXAMPLE_DIR=$work PYTHON=$cli bash "$src/examples/torchscript_lm/run.sh" "$frugal" \
      /usr/share/common-licenses/GPL-3 --set train.steps=60 --set train.warmup_steps=5 --set train.eval_every=30 \
      --set train.eval_batches=2 --set run.threads=1 --quiet
    summary=$work/torchscript_lm/summary.json
    grep -q '"stop_kind": "completed"' "$summary" || { echo "FAIL: run did not complete"; cat "$summary"; exit 1; }
    grep -Eq "^source = [\"']torchscript:" "$work/torchscript_lm/config.toml" ||
      { echo "FAIL: the run did not train the scripted module"; exit 1; }
    # 60 steps must take a byte model well under uniform guessing (ln 256 = 5.55).
    val=$(value "$summary" final_val_loss)
    awk -v v="$val" 'BEGIN { exit !(v < 4.0) }' || { echo "FAIL: final_val_loss $val is not below 4.0"; exit 1; }
    echo "torchscript_lm: final_val_loss $val"
    ;;
  cnn_images)
    cd "$work"
    "$frugal" generate images 60
    # The image folder goes through `frugal prepare` once: decoded, resized, 1 augmented variant.
    "$cli" prepare images --format images --size 24 --augment 1 --val-fraction 0.2 --out images.rec --quiet
    "$frugal" train images.rec --set run.out_dir="$work/runs" --set train.steps=300 \
      --set train.eval_every=100 --set train.log_every=20 --set run.threads=1 | tee train.log
    summary=$work/runs/cnn_images/summary.json
    grep -q '"stop_kind": "completed"' "$summary" || { echo "FAIL: run did not complete"; cat "$summary"; exit 1; }
    grep -q '"precision": "bf16"' "$summary" || { echo "FAIL: not trained in bf16"; exit 1; }
    # 180 images, 36 held out; 144 training images x 2 (one augmented variant each) as records.
    grep -q 'records:[^ ]*/images.rec (image \[3, 24, 24\], 3 classes, 288 train / 36 val records' "$summary" ||
      { echo "FAIL: the prepared records were not the training data"; grep '"data"' "$summary"; exit 1; }
    val=$(value "$summary" final_val_loss)
    # Three classes: chance is ln 3 = 1.10 and accuracy 1/3 (300 steps reach 0.54 and 0.75 on a 2-core VM).
    awk -v v="$val" 'BEGIN { exit !(v < 0.8) }' || { echo "FAIL: final_val_loss $val is not below 0.8"; exit 1; }
    acc=$(value "$summary" val_accuracy)
    awk -v v="$acc" 'BEGIN { exit !(v > 0.6) }' || { echo "FAIL: val_accuracy $acc is not above 0.6"; exit 1; }
    echo "cnn_images: final_val_loss $val, val_accuracy $acc"
    ;;
  *)
    echo "unknown example $name"; exit 2 ;;
esac
