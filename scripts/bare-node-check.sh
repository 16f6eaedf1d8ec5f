#!/usr/bin/env bash
# Proves here what scripts/gpu-check.sh needs on a bare GPU node: runs it (--smoke) with the
# headers and pkg-config files of every Debian development package frugal can use hidden, in a
# private mount namespace (nothing outside it changes). The header-only libraries must then come
# from third_party/, and the optional features (zstd, libarchive, images, sentencepiece) must
# switch off and say so. Then runs the whole CTest suite of that build: the tests of the absent
# features are listed as skipped. Needs root (unshare) and a Debian machine with the packages
# of scripts/install-deps.sh installed (it hides them, it does not need them).
#
#   sudo bash scripts/bare-node-check.sh [--out DIR] [--build-dir DIR] [--no-ctest]
#
# Defaults: --out bench/results/<date>-bare, --build-dir build-bare. Exit status: gpu-check.sh's,
# else 1 when a CPU test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="bench/results/$(date +%F)-bare"
BUILD=build-bare
CTEST=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --no-ctest) CTEST=0; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bare-node-check: unknown option '$1' (allowed: --out DIR, --build-dir DIR, --no-ctest, --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[[ $(id -u) -eq 0 ]] || { echo "bare-node-check: needs root (a private mount namespace)" >&2; exit 2; }
command -v unshare >/dev/null || { echo "bare-node-check: needs unshare (util-linux)" >&2; exit 2; }

# The development packages a bare node lacks: the optional features' and those whose code is now
# in third_party/ (installed or not: dpkg lists only what is there).
HIDE=(libzstd-dev libarchive-dev libsentencepiece-dev libjpeg62-turbo-dev libjpeg-dev libpng-dev libavro-dev
      libgloo-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libgtest-dev googletest
      libxxhash-dev libcpp-httplib-dev libfmt-dev)
STAGE=$(mktemp -d /tmp/frugal-bare.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
dpkg -L "${HIDE[@]}" 2>/dev/null | sort -u >"$STAGE/files" || true
# A copy of /usr/include without those packages' headers, and pkg-config folders without their .pc files.
cp -a /usr/include "$STAGE/include"
grep '^/usr/include/' "$STAGE/files" | while read -r f; do
  [[ -f $f || -L $f ]] && rm -f "$STAGE/include/${f#/usr/include/}"
done
PC_DIRS=()
for d in /usr/lib/x86_64-linux-gnu/pkgconfig /usr/lib/pkgconfig /usr/share/pkgconfig; do
  [[ -d $d ]] || continue
  mkdir -p "$STAGE/pc$d"
  cp -a "$d/." "$STAGE/pc$d/"
  PC_DIRS+=("$STAGE/pc$d")
done
grep '\.pc$' "$STAGE/files" | while read -r f; do rm -f "$STAGE/pc$f"; done
mkdir -p "$STAGE/empty"
hidden=$(grep -c -E '^/usr/include/.+\.(h|hpp|hh|inl)$' "$STAGE/files" || true)
echo "bare-node-check: hiding $hidden headers and the pkg-config files of: ${HIDE[*]}"

PCPATH=$(IFS=:; echo "${PC_DIRS[*]}")
status=0
unshare --mount --propagation private bash -c '
  set -e
  mount --bind "$1/include" /usr/include
  [[ -d /usr/src/googletest ]] && mount --bind "$1/empty" /usr/src/googletest
  export PKG_CONFIG_LIBDIR="$2" PKG_CONFIG_PATH=
  for h in zstd.h archive.h jpeglib.h png.h sentencepiece_processor.h nlohmann/json.hpp toml++/toml.h CLI/CLI.hpp \
           httplib.h xxhash.h gtest/gtest.h gloo/context.h; do
    [[ ! -e /usr/include/$h ]] || { echo "bare-node-check: /usr/include/$h is still visible" >&2; exit 1; }
  done
  bash scripts/gpu-check.sh --smoke --build-dir "$3" --out "$4"
  if [[ $5 -eq 1 ]]; then  # the rest of the build (examples, tools) for the CPU suite, still bare
    echo "bare-node-check: building the remaining targets"
    cmake --build "$3" -j "$(nproc)" >>"$4/gpu-check.log" 2>&1
  fi
' _ "$STAGE" "$PCPATH" "$BUILD" "$OUT" "$CTEST" || status=$?
[[ $status -eq 0 ]] || { echo "bare-node-check: gpu-check.sh failed ($status); see $OUT/gpu-check.log" >&2; exit $status; }
grep -E "features|not found: .* switched off" "$OUT/gpu-check.log" | sed 's/^/bare-node-check: /' || true

if [[ $CTEST -eq 1 ]]; then
  echo "bare-node-check: the CPU suite of this build (ctest -j2 -LE 'cuda|browser')"
  if ! (cd "$BUILD" && ctest -j2 -LE 'cuda|browser' --timeout 900 >"$OUT/ctest-cpu.log" 2>&1); then status=1; fi
  tail -n 4 "$OUT/ctest-cpu.log" | sed 's/^/bare-node-check: /'
  grep -c -P '^\s+[0-9]+ - .*\(Skipped\)' "$OUT/ctest-cpu.log" | sed 's/^/bare-node-check: skipped tests: /'
fi
exit $status
