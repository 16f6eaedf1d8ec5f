#!/usr/bin/env bash
# A model written in Python, trained by frugal:
#   1. make_model.py writes the scripted module (torch.jit.script(...).save(FILE))
#   2. frugal train torchscript_lm.toml --set model.source=torchscript:FILE --set data.source=text:TEXT
#
#   examples/torchscript_lm/run.sh [FRUGAL [TEXT [--set key=value]...]]
# FRUGAL defaults to build/frugal, TEXT to /usr/share/common-licenses/GPL-3 (on every Debian
# system). The Python with torch is $PYTHON, else the project's .venv/bin/python, else python3.
# Outputs go under $FRUGAL_EXAMPLE_DIR (default runs/examples).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
frugal=${1:-build/frugal}
text=${2:-/usr/share/common-licenses/GPL-3}
shift $(($# < 2 ? $# : 2))
work=${FRUGAL_EXAMPLE_DIR:-runs/examples}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$here/../../.venv/bin/python" ]; then py=$here/../../.venv/bin/python; else py=python3; fi
fi
mkdir -p "$work"
"$py" "$here/make_model.py" "$work/char_gru.pt"
"$frugal" train "$here/torchscript_lm.toml" --overwrite --set run.out_dir="$work" \
  --set model.source="torchscript:$work/char_gru.pt" --set data.source="text:$text" "$@"
