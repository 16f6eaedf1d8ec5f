#!/usr/bin/env bash
# Installs every Debian package frugal needs to build, test and benchmark.
# Idempotent and quiet: when everything is present it only runs one dpkg query (well under a
# second). Run as root, or as a user with sudo.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache pkg-config
  libtorch-dev              # LibTorch 1.13 (CPU)
  libopenblas0-pthread      # without it LibTorch falls back to the reference BLAS (~25x slower fp32 matmul)
  libgloo-dev               # headers c10d's ProcessGroupGloo includes
  libtomlplusplus-dev       # TOML config files
  libcli11-dev              # command-line parsing
  nlohmann-json3-dev        # JSON (metrics, manifests, summaries)
  libfmt-dev                # formatting
  libgtest-dev googletest   # tests
  libzstd-dev libxxhash-dev # shard compression and checksums
  libarchive-dev            # tar archives: frugal archive/restore, WebDataset input
  libsentencepiece-dev      # frugal prepare --tokenizer sentencepiece (the frugal-spm helper)
  python3-torch             # the PyTorch reference loops in bench/ (runs under /usr/bin/python3)
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ "$status" == ii* ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

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
echo "install-deps: done"
