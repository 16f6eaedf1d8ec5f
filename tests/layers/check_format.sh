#!/usr/bin/env bash
# Holds frugal's C++ files (src/, include/, tests/, fuzz/, examples/, bench/) to .clang-format
# (Google's style, 120 columns). Listed as skipped where clang-format 14, the version the tree is
# formatted with (Debian 12's; scripts/install-deps.sh installs it), is absent: other versions
# break lines differently.
#   tests/layers/check_format.sh ROOT          # exit 0 when every file is formatted
#   tests/layers/check_format.sh --self-test   # a badly formatted file must be caught
#   fix: clang-format -i FILE...   (or the whole tree: tests/layers/check_format.sh --fix ROOT)
set -euo pipefail
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z "$cf" ]]; then echo "skipped: no clang-format (scripts/install-deps.sh installs it)"; exit 77; fi
version=$("$cf" --version | grep -o 'version [0-9]*' | cut -d' ' -f2)
if [[ "$version" != 14 ]]; then
  echo "skipped: clang-format $version breaks lines differently from 14, which the tree is formatted with"; exit 77
fi
here=$(cd "$(dirname "$0")/../.." && pwd)
if [[ "${1:-}" == "--self-test" ]]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cp "$here/.clang-format" "$tmp/"
  printf 'int  main( ){return 0;}\n' >"$tmp/bad.cpp"
  printf 'int main() { return 0; }\n' >"$tmp/good.cpp"
  if "$cf" --dry-run --Werror "$tmp/bad.cpp" 2>/dev/null; then echo "self-test: a badly formatted file passed"; exit 1; fi
  "$cf" --dry-run --Werror "$tmp/good.cpp" || { echo "self-test: a well formatted file failed"; exit 1; }
  echo "check_format self-test: catches the badly formatted file and passes the good one"; exit 0
fi
fix=""
if [[ "${1:-}" == "--fix" ]]; then fix=1; shift; fi
root=${1:-$here}
cd "$root"
mapfile -t files < <(find src include tests fuzz examples bench -type f \
                       \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
if [[ -n "$fix" ]]; then "$cf" -i "${files[@]}"; echo "check_format: formatted ${#files[@]} files"; exit 0; fi
if ! "$cf" --dry-run --Werror "${files[@]}" 2>"${TMPDIR:-/tmp}/frugal-format.$$"; then
  grep 'code should be clang-formatted' "${TMPDIR:-/tmp}/frugal-format.$$" | cut -d: -f1 | sort | uniq -c |
    awk '{print "not formatted: " $2 " (" $1 " places)"}'
  head -12 "${TMPDIR:-/tmp}/frugal-format.$$"; rm -f "${TMPDIR:-/tmp}/frugal-format.$$"
  echo "check_format: run clang-format -i on the files above (.clang-format: Google style, 120 columns)"; exit 1
fi
rm -f "${TMPDIR:-/tmp}/frugal-format.$$"
echo "check_format: ${#files[@]} files formatted as .clang-format says"
