#!/usr/bin/env bash
# The installed CMake package works out of tree: `cmake --install` into a temporary prefix, then
# configure, build and run examples/mlp_csv against it with find_package(frugal) (its CSV through
# the installed `frugal prepare --format csv`), and run the
# installed `frugal` (which must find its installed SentencePiece helper, not the build tree's).
#
#   package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/frugal-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/frugal/frugal.h lib/libfrugal.a lib/cmake/frugal/frugalConfig.cmake \
         lib/cmake/frugal/frugalTargets.cmake bin/frugal libexec/frugal/frugal-spm share/frugal/prices.toml; do
  [[ -e $prefix/$f ]] || { echo "FAIL: the install lacks $f"; exit 1; }
done

# Out of tree, against the prefix only (the build tree is not on any search path).
cmake -S "$src/examples/mlp_csv" -B "$work/app" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/app" -j "${FRUGAL_PACKAGE_JOBS:-2}" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; exit 1; }

# <frugal/frugal.h> registered this installation's SentencePiece helper in the program.
grep -aq "$prefix/lib/cmake/frugal/../../../libexec/frugal/frugal-spm\|$prefix/libexec/frugal/frugal-spm" "$work/app/mlp_csv" ||
  { echo "FAIL: the program does not carry the installed frugal-spm path"; exit 1; }

cd "$work"
"$work/app/mlp_csv" generate data.csv 600
# The table goes through the installed `frugal prepare` once (FRUGAL_SPM unset: not needed here).
"$prefix/bin/frugal" prepare data.csv --format csv --val-fraction 0.2 --out data.rec --quiet
"$work/app/mlp_csv" train data.rec --set run.out_dir="$work/runs" --set train.steps=40 \
  --set train.eval_every=20 --set train.log_every=10 --set run.threads=1 | tee train.log
grep -q '"stop_kind": "completed"' "$work/runs/mlp_csv/summary.json" || { echo "FAIL: no completed summary"; exit 1; }
grep -q 'records:[^ ]*/data.rec (table \[8\], 3 classes, 480 train / 120 val records' "$work/runs/mlp_csv/summary.json" ||
  { echo "FAIL: the prepared records were not the training data"; grep '"data"' "$work/runs/mlp_csv/summary.json"; exit 1; }
# The task's summary hook ran, and 40 steps learned something (3 classes: chance is 1/3).
acc=$(sed -n 's/^  "val_accuracy": \([0-9.e+-]*\),\{0,1\}$/\1/p' "$work/runs/mlp_csv/summary.json")
awk -v v="$acc" 'BEGIN { exit !(v > 0.6) }' || { echo "FAIL: val_accuracy '$acc' is not above 0.6"; exit 1; }

# The installed CLI finds the installed helper (FRUGAL_SPM unset; the build tree hidden by name).
printf 'the cat sat on the mat.\n\nthe dog sat on the log.\n\n%.0s' {1..200} >corpus.txt
env -u FRUGAL_SPM "$prefix/bin/frugal" prepare corpus.txt --out "$work/shards" --tokenizer sentencepiece \
  --vocab 300 --quiet >prepare.log 2>&1 || { cat prepare.log; exit 1; }
[[ -f $work/shards/manifest.json ]] || { echo "FAIL: prepare wrote no manifest"; cat prepare.log; exit 1; }
echo "package test: OK"
