#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (docs/fuzzing.md) with clang and AddressSanitizer, and
# runs each for a bounded time from a seed corpus of valid files the target writes itself (the
# sources compile, and the targets run, as many at a time as there are cores).
#
#   scripts/fuzz.sh [--seconds N] [--out DIR] [TARGET...]
#       (TARGET: shard manifest safetensors checkpoint archive tfrecord)
#
# Prints one JSON line per target ({"target", "runs", "seconds", "crashes"}), writes them to
# OUT/fuzz-summary.json, and exits 1 when any target found a crash (its input is kept as
# OUT/<target>-crash-*; replay with `OUT/<target>_fuzz FILE`). Needs clang (Debian's `clang`
# package, with libFuzzer) and the project's .venv (scripts/install-deps.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=30
out="$root/build-fuzz"
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(shard manifest safetensors checkpoint archive tfrecord)
bash "$root/scripts/install-deps.sh" --fuzz  # clang with libFuzzer, and the .venv
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found; apt-get install clang" >&2; exit 2; }
torch=$("$root/.venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) ||
  { echo "fuzz.sh: no .venv with torch; run scripts/install-deps.sh" >&2; exit 2; }

mkdir -p "$out/obj" "$out/generated"
zstd=0
[ -f /usr/include/zstd.h ] && zstd=1
libarchive=0
[ -f /usr/include/archive.h ] && libarchive=1
# TFRecord: tf.train.Example's schema compiled here by protoc, parsed with Debian's protobuf.
tfrecord=0
if command -v protoc >/dev/null && [ -f /usr/include/google/protobuf/message.h ] && [ -f /usr/include/boost/crc.hpp ]; then
  mkdir -p "$out/generated/new"
  protoc -I"$root/src/data/proto" --cpp_out="$out/generated/new" tf_example.proto && tfrecord=1
  for f in tf_example.pb.cc tf_example.pb.h; do  # replaced only when changed: no rebuild otherwise
    [ ! -f "$out/generated/new/$f" ] || cmp -s "$out/generated/new/$f" "$out/generated/$f" ||
      mv "$out/generated/new/$f" "$out/generated/$f"
  done
  rm -rf "$out/generated/new"
fi
if [ $tfrecord = 0 ] && [[ " ${targets[*]} " == *" tfrecord "* ]]; then
  echo "fuzz.sh: no protoc, protobuf headers or Boost: the tfrecord target is left out"
  targets=($(printf '%s\n' "${targets[@]}" | grep -vx tfrecord))
fi
cat > "$out/generated/frugal_build_config.h.new" <<CFG
#define FRUGAL_HAVE_CUDA 0
#define FRUGAL_HAVE_NCCL 0
#define FRUGAL_HAVE_ZSTD $zstd
#define FRUGAL_HAVE_LIBARCHIVE $libarchive
#define FRUGAL_HAVE_IMAGES 0
#define FRUGAL_HAVE_SENTENCEPIECE 0
#define FRUGAL_HAVE_PARQUET 0
#define FRUGAL_HAVE_TENSORBOARD 0
#define FRUGAL_HAVE_AVRO 0
#define FRUGAL_HAVE_TFRECORD $tfrecord
CFG
cmp -s "$out/generated/frugal_build_config.h.new" "$out/generated/frugal_build_config.h" ||
  mv "$out/generated/frugal_build_config.h.new" "$out/generated/frugal_build_config.h"
rm -f "$out/generated/frugal_build_config.h.new"

cxx=(clang++)
command -v ccache >/dev/null && cxx=(ccache clang++)
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer-no-link,address -D_GNU_SOURCE -DFMT_HEADER_ONLY=1
       -I"$root/include" -I"$root/src" -I"$root/fuzz" -I"$out/generated"
       -isystem "$root/third_party/nlohmann_json" -isystem "$root/third_party/xxhash"
       -isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include" -w)
torch_libs=(-L"$torch/lib" -Wl,-rpath,"$torch/lib" -ltorch -ltorch_cpu -lc10)
# tf.train.Example's code sees Debian's protobuf headers, not the copy inside the torch wheel.
protobuf_flags=(-std=c++17 -O1 -g -fsanitize=fuzzer-no-link,address -I"$root/src" -I"$out/generated" -w)
zstd_libs=()
[ "$zstd" = 1 ] && zstd_libs=(-lzstd)
[ "$libarchive" = 1 ] && zstd_libs+=(-larchive)

common=(src/core/atomic_file.cpp src/core/crash_report.cpp src/core/dir_lock.cpp src/core/errors.cpp src/core/features.cpp)
sources_of() {
  case "$1" in
    shard) echo fuzz/shard_fuzz.cpp src/data/shard.cpp src/data/file_hash.cpp "${common[@]}" ;;
    manifest) echo fuzz/manifest_fuzz.cpp src/data/token_dataset.cpp src/data/shard.cpp src/data/file_hash.cpp "${common[@]}" ;;
    safetensors) echo fuzz/safetensors_fuzz.cpp src/ckpt/safetensors.cpp src/model/weights.cpp "${common[@]}" ;;
    checkpoint) echo fuzz/checkpoint_fuzz.cpp src/ckpt/checkpoint.cpp src/ckpt/state_shards.cpp src/ckpt/safetensors.cpp \
                  src/train/internal/run_state.cpp "${common[@]}" ;;
    archive) echo fuzz/archive_fuzz.cpp src/ckpt/archive.cpp src/ckpt/restore.cpp src/ckpt/checkpoint.cpp src/ckpt/state_shards.cpp src/ckpt/safetensors.cpp \
               src/ckpt/retention.cpp src/ckpt/run_dir.cpp "${common[@]}" ;;
    tfrecord) echo fuzz/tfrecord_fuzz.cpp src/data/record_inputs.cpp src/data/internal/tf_example.cpp \
                "$out/generated/tf_example.pb.cc" "${common[@]}" ;;
    *) echo "fuzz.sh: unknown target $1 (shard, manifest, safetensors, checkpoint, archive, tfrecord)" >&2; exit 2 ;;
  esac
}

obj_of() { echo "$out/obj/$(echo "$1" | tr '/' '_').o"; }
compile() {  # one object per source, shared by the targets, rebuilt when the source is newer
  local src="$1" obj path
  obj=$(obj_of "$1")
  path="$src"
  [[ $path == /* ]] || path="$root/$src"
  if [ ! -f "$obj" ] || [ "$path" -nt "$obj" ] || [ -n "$(find "$root/include" "$root/src" "$root/fuzz" -name '*.h' -newer "$obj" -print -quit)" ]; then
    case "$src" in
      *tf_example*) "${cxx[@]}" "${protobuf_flags[@]}" -c "$path" -o "$obj" ;;
      *) "${cxx[@]}" "${flags[@]}" -c "$path" -o "$obj" ;;
    esac
  fi
}
jobs=$(nproc)
wait_for_a_core() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done; }

# Every source once, as many at a time as there are cores.
sources=$(for t in "${targets[@]}"; do sources_of "$t"; done | tr ' ' '\n' | sort -u)
pids=()
for s in $sources; do
  wait_for_a_core
  compile "$s" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { echo "fuzz.sh: a source failed to compile (above)" >&2; exit 1; }; done

fuzz_one() {  # links and runs one target; its result line goes to $out/$t.result
  local t="$1" objs=() libs=("${zstd_libs[@]}")
  for s in $(sources_of "$t"); do objs+=("$(obj_of "$s")"); done
  case "$t" in safetensors|checkpoint|archive) libs+=("${torch_libs[@]}") ;; tfrecord) libs+=(-lprotobuf) ;; esac
  local bin="$out/${t}_fuzz" seeds="$out/seeds/$t" corpus="$out/corpus/$t"
  clang++ -fsanitize=fuzzer,address "${objs[@]}" "${libs[@]}" -o "$bin"
  rm -rf "$seeds"
  rm -f "$out/$t-"crash-* "$out/$t-"leak-* "$out/$t-"oom-* "$out/$t-"timeout-*
  mkdir -p "$seeds" "$corpus"
  FRUGAL_FUZZ_SEEDS="$seeds" ASAN_OPTIONS=detect_leaks=0 "$bin" -runs=0 "$seeds" > "$out/$t.log" 2>&1
  set +e
  ( cd "$out" && ASAN_OPTIONS=detect_leaks=0 "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 \
      -malloc_limit_mb=1024 -artifact_prefix="$out/$t-" -print_final_stats=1 "$corpus" "$seeds" >> "$out/$t.log" 2>&1 )
  local rc=$?
  set -e
  local runs crashes
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$t.log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  crashes=$(ls "$out" | grep -c "^$t-\(crash\|leak\|oom\|timeout\)-" || true)
  [ "$rc" = 0 ] || [ "$crashes" -gt 0 ] || crashes=1
  echo "{\"target\": \"$t\", \"runs\": ${runs:-0}, \"seconds\": $seconds, \"crashes\": $crashes}" > "$out/$t.result"
}

# The targets side by side, one per core (each fuzzer is one process on one core).
rm -f "$out"/*.result
pids=()
for t in "${targets[@]}"; do
  wait_for_a_core
  fuzz_one "$t" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

status=0
: > "$out/fuzz-summary.json"
for t in "${targets[@]}"; do
  if [ ! -f "$out/$t.result" ]; then
    echo "fuzz.sh: $t did not build or run; see $out/$t.log" >&2
    status=1
    continue
  fi
  line=$(cat "$out/$t.result")
  echo "$line" | tee -a "$out/fuzz-summary.json"
  if ! echo "$line" | grep -q '"crashes": 0}'; then
    status=1
    echo "fuzz.sh: $t crashed; see $out/$t.log" >&2
    tail -30 "$out/$t.log" >&2
  fi
done
exit $status
