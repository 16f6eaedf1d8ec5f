#!/usr/bin/env bash
# Installs what frugal needs: Debian packages, and a project virtual environment (.venv/) with the
# pinned PyTorch wheel, whose LibTorch 2.x (CUDA compiled in) frugal builds against.
#
#   bash scripts/install-deps.sh          everything: build, run, every test and benchmark
#                                         (`make test`, `make bench`)
#   bash scripts/install-deps.sh --run    only what building and running frugal needs (`make demo`,
#                                         a training job's setup): no browser, no formatter, no
#                                         reference libraries, no MLflow server
#   bash scripts/install-deps.sh --fuzz   everything, and clang with libFuzzer (scripts/fuzz.sh)
#
# Idempotent and quiet: when everything is present it runs one dpkg query and compares a file per
# requirements list (well under a second); a later full run adds what --run left out. Run as root,
# or as a user with sudo. FRUGAL_PYTHON picks the Python that makes the environment (default:
# python3 on PATH, 3.9 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=all
case "${1:-}" in
  "") ;;
  --run) mode=run ;;
  --fuzz) mode=fuzz ;;
  -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown option '$1' (allowed: --run, --fuzz, --help)" >&2; exit 2 ;;
esac

# TOML, CLI, JSON, HTTP, xxHash, GoogleTest and the Gloo headers come with the tree (third_party/).
PACKAGES=(
  build-essential cmake ccache pkg-config
  python3-venv              # Debian's python3 needs it for `python3 -m venv`
  # The optional features (CMake switches each off, and says so, when its library is absent):
  libzstd-dev               # zstd-compressed shards (prepare --zstd)
  libarchive-dev            # tar archives: frugal archive/restore, WebDataset input
  libsentencepiece-dev      # frugal prepare --tokenizer sentencepiece (the frugal-spm helper)
  libjpeg62-turbo-dev libpng-dev # frugal prepare --format images|tar (JPEG and PNG decoding)
  libprotobuf-dev protobuf-compiler libboost-dev # TensorBoard event files ([track] tensorboard), TFRecord input
  libavro-dev               # Avro input (prepare --format avro)
)
if [[ $mode != run ]]; then
  PACKAGES+=(
    clang-format            # the ctest `format` (.clang-format; Debian 12's is version 14)
    chromium                # headless browser tests of report.html and the live page (ctest -L browser)
  )
fi
# --fuzz: also clang with libFuzzer, for scripts/fuzz.sh (CI runs it; GPU jobs need none of it).
[[ $mode == fuzz ]] && PACKAGES+=(clang)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ "$status" == ii* ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when an install cannot find what it needs.
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/frugal-apt.log 2>&1; then
    $SUDO apt-get update -qq >>/tmp/frugal-apt.log 2>&1
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/frugal-apt.log 2>&1 || {
      echo "install-deps: apt-get failed; see /tmp/frugal-apt.log" >&2; tail -20 /tmp/frugal-apt.log >&2; exit 1; }
  fi
fi

# A virtual environment: made once; each requirements list is installed into it when its file is
# new or has changed (a marker per list holds the hash of the file it was installed from).
#   .venv         scripts/requirements.txt: torch (LibTorch), pyarrow, tensorboard, tokenizers
#                 scripts/requirements-test.txt (not with --run): the reference libraries
#   .venv-mlflow  scripts/requirements-mlflow.txt (not with --run): an MLflow server and client for
#                 the tracker's check (its own environment: mlflow pins a pyarrow older than frugal's)
PY=${FRUGAL_PYTHON:-python3}
# uv (pinned; pip puts it into the environment first) installs the lists: torch's ~3 GB of wheels
# took 14 s with it and 53 s with pip on the same machine (docs/build.md). uv reads neither pip.conf
# nor PIP_* variables: the pip settings in force that choose where packages come from (index,
# extra index, find-links, trusted host, certificate) are passed on to it. FRUGAL_PIP=1 keeps pip,
# and so does an index that has no uv.
UV_PIN=uv==0.13.9
install_list() {  # TOOL VENV REQUIREMENTS
  if [[ $1 == pip ]]; then
    "$2/bin/python" -m pip install -q --disable-pip-version-check -r "$3"
    return
  fi
  # One uv option per source pip is configured with (`pip config list`: pip.conf files and PIP_*
  # variables, as key='value' lines), and its certificate bundle as SSL_CERT_FILE.
  local key value v options=() vars=()
  while IFS='=' read -r key value; do
    value=${value#\'}; value=${value%\'}
    case ${key##*.} in
      index-url) options+=("--index-url=$value") ;;
      extra-index-url) for v in $value; do options+=("--extra-index-url=$v"); done ;;
      find-links) for v in $value; do options+=("--find-links=$v"); done ;;
      trusted-host) for v in $value; do options+=("--allow-insecure-host=$v"); done ;;
      cert) vars=(SSL_CERT_FILE="$value") ;;
    esac
  done < <("$2/bin/python" -m pip config list 2>/dev/null)
  env "${vars[@]}" "$2/bin/uv" pip install -q --no-cache --python "$2/bin/python" "${options[@]}" -r "$3"
}
make_venv() {  # VENV REQUIREMENTS WHAT
  local venv=$1 req=$2 what=$3 marker want start
  marker=$venv/.frugal-$(basename "$req" .txt)
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ -x $venv/bin/python && -f $marker && "$(cat "$marker")" == "$want" ]]; then
    return 0
  fi
  command -v "$PY" >/dev/null || { echo "install-deps: $PY not found; set FRUGAL_PYTHON to a Python 3.9+" >&2; exit 1; }
  start=$(date +%s)
  [[ -x $venv/bin/python ]] || "$PY" -m venv "$venv"
  local try=1 log=/tmp/frugal-pip.log tool=uv
  [[ ${FRUGAL_PIP:-0} == 1 ]] && tool=pip
  : >"$log"
  # Where uv itself cannot be installed (an index or mirror without it, say), pip installs the list.
  if [[ $tool == uv ]] && ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "$UV_PIN" >>"$log" 2>&1; then
    tool=pip
  fi
  echo "install-deps: installing the Python packages of $req into $venv with $tool ($what)"
  # A registry that drops connections or answers 5xx for a while fails an install outright: three
  # tries, 15 s and 45 s apart, before giving up (each try's output is kept in the log).
  until install_list "$tool" "$venv" "$req" >>"$log" 2>&1; do
    if (( try == 3 )); then
      echo "install-deps: $tool failed 3 times installing $req; the last lines of $log:" >&2
      tail -30 "$log" >&2; exit 1
    fi
    echo "install-deps: $tool failed (try $try of 3; $(grep -m1 -iE 'error|could not' "$log" | cut -c1-160)); retrying in $(( 15 * 3 ** (try - 1) )) s" >&2
    sleep $(( 15 * 3 ** (try - 1) )); try=$(( try + 1 ))
  done
  echo "$want" >"$marker"
  echo "install-deps: $venv done ($(( $(date +%s) - start )) s)"
}
make_venv .venv scripts/requirements.txt "torch with CUDA: ~3 GB, under a minute"
[[ $mode == run ]] && exit 0
make_venv .venv scripts/requirements-test.txt "the reference libraries the tests check against: about 20 s"
make_venv .venv-mlflow scripts/requirements-mlflow.txt "mlflow: about 30 s"
