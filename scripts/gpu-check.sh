#!/usr/bin/env bash
# The GPU check: on a GPU node with PyTorch installed (no internet needed), build frugal against
# that node's PyTorch, run the CUDA tests (ctest -L cuda) and the GPU benchmark, and leave the
# logs and JSON in one folder.
#
#   bash scripts/gpu-check.sh [--out DIR] [--build-dir DIR] [--no-bench] [--smoke]
#                             [--repeats N] [--steps N] [--test-timeout S] [--profile] [--no-compile]
#                             [--cuda-arch LIST] [--max-autotune] [--no-sanitizer] [--bench-rows LIST]
#
#   --out DIR        where the logs and the benchmark JSON go (default bench/results/<date>-gpu;
#                    with --smoke, bench/out/gpu_smoke: a smoke pass never lands among the results)
#   --build-dir DIR  the CMake build folder (default build-gpu)
#   --no-bench       build and test only
#   --repeats N      the benchmark's alternating rounds (bench/gpu_bench.py --repeats; default 2)
#   --steps N        the benchmark's timed steps per run (default 30)
#   --test-timeout S a CUDA test running longer than S seconds fails (default 600)
#   --profile        after the benchmark, bench/gpu_profile.py: frugal's, PyTorch eager's and
#                    torch.compile's device time per step by kernel kind, from profiled steps
#                    (OUT/gpu_profile.json)
#   --no-compile     leave torch.compile out of the benchmark and the profile (saves about two
#                    minutes on an H100/H200: for a short lease)
#   --smoke          the benchmark at a tiny shape (bench/gpu_bench.py --smoke): proves the steps
#                    on a machine without a GPU, where ctest -L cuda reports every case as skipped
#   --cuda-arch LIST the CUDA architectures frugal's kernels are built for (FRUGAL_CUDA_ARCHITECTURES;
#                    default 90-real: H100/H200 machine code only, the quickest build)
#   --max-autotune   the benchmark also runs torch.compile mode "max-autotune" (minutes of autotuning)
#   --no-sanitizer   skip compute-sanitizer memcheck over the kernel tests
#   --bench-rows LIST the benchmark's rows, comma-separated (bf16, fp16, sync, ckpt, stall, muon;
#                    default all): `--bench-rows bf16` for frugal on ATen and on its kernels against
#                    eager and torch.compile only; `muon` for Muon's step against fused AdamW's
#
# Steps, each timed and logged to OUT/gpu-check.log: 1. facts (nvidia-smi, python3's torch, cmake,
# ninja, nvcc); 2. configure and build with Ninja against python3's torch (FRUGAL_PYTHON); 3.
# `frugal doctor --json` and the C++ runtime the build linked (toolchain.txt); 4. the CPU tests
# of checkpoints, directory removal and the crash report on this node; 5. frugal's CUDA kernels:
# their tests (a line each), compute-sanitizer memcheck over them, build/kernel_bench against
# ATen (gpu_kernel_bench.json); 6. `ctest -L cuda`; 7. bench/gpu_bench.py; 8. with --profile,
# bench/gpu_profile.py. Exit status: 0 when every step
# passed, 1 when a step failed (the log says which), 2 when the node lacks what the check needs
# (the message names it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

OUT=""
BUILD=build-gpu
BENCH=1
PROFILE=0
SMOKE=0
BENCH_ARGS=()
NO_COMPILE=()
TEST_TIMEOUT=600
CUDA_ARCH=90-real
SANITIZER=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --no-bench) BENCH=0; shift ;;
    --profile) PROFILE=1; shift ;;
    --no-compile) NO_COMPILE=(--no-compile); shift ;;
    --smoke) SMOKE=1; shift ;;
    --max-autotune) BENCH_ARGS+=(--max-autotune); shift ;;
    --no-sanitizer) SANITIZER=0; shift ;;
    --bench-rows) rows_re='^(bf16|fp16|sync|ckpt|stall|muon)(,(bf16|fp16|sync|ckpt|stall|muon))*$'
                  [[ ${2:-} =~ $rows_re ]] || { echo "gpu-check: --bench-rows takes a comma-separated list of bf16, fp16, sync, ckpt, stall, muon, not '${2:-}'" >&2; exit 2; }
                  BENCH_ARGS+=(--only "$2"); shift 2 ;;
    --cuda-arch) arch_re='^[0-9a-z;-]+$'
                 [[ ${2:-} =~ $arch_re ]] || { echo "gpu-check: --cuda-arch takes CMake CUDA architectures such as 90-real or '80-real;90-real', not '${2:-}'" >&2; exit 2; }
                 CUDA_ARCH=$2; shift 2 ;;
    --repeats|--steps) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: $1 takes a positive whole number, not '${2:-}'" >&2; exit 2; }
                       BENCH_ARGS+=("$1" "$2"); shift 2 ;;
    --test-timeout) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --test-timeout takes seconds (a positive whole number), not '${2:-}'" >&2; exit 2; }
                    TEST_TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (allowed: --out DIR, --build-dir DIR, --no-bench, --profile, --no-compile, --smoke, --repeats N, --steps N, --test-timeout S, --cuda-arch LIST, --max-autotune, --no-sanitizer, --bench-rows LIST, --help)" >&2; exit 2 ;;
  esac
done
if [[ -z $OUT ]]; then
  if [[ $SMOKE -eq 1 ]]; then OUT=bench/out/gpu_smoke; else OUT="bench/results/$(date +%F)-gpu"; fi
fi
mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
: >"$LOG"
START=$(date +%s)
say() { echo "gpu-check [$(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
need() { command -v "$1" >/dev/null || { say "missing: $1 ($2)"; exit 2; }; }

# 1. The node.
PY=${FRUGAL_PYTHON:-}
if [[ -z $PY ]]; then
  if [[ -x .venv/bin/python ]]; then PY=$ROOT/.venv/bin/python; else PY=$(command -v python3 || true); fi
fi
[[ -n $PY ]] || { say "missing: python3 with torch (set FRUGAL_PYTHON)"; exit 2; }
need cmake "CMake 3.18 or newer"
GEN=()
# Ninja for a new build folder; an existing one keeps the generator it was made with.
if command -v ninja >/dev/null && [[ ! -f $BUILD/CMakeCache.txt ]]; then GEN=(-G Ninja); fi
if ! "$PY" -c 'import torch' 2>/dev/null; then say "missing: $PY cannot import torch (set FRUGAL_PYTHON)"; exit 2; fi
say "python: $PY, $("$PY" -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>/dev/null)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$LOG" | sed 's/^/gpu-check: GPU /'
else
  say "no nvidia-smi on this machine: the CUDA tests will report themselves skipped"
fi
command -v nvcc >/dev/null && say "nvcc: $(nvcc --version | tail -1)"
"$PY" -c 'import torch,sys; sys.exit(0 if torch.version.cuda else 1)' ||
  say "warning: $PY's torch has no CUDA; frugal will build CPU-only"

# 2. Build.
if [[ ${#GEN[@]} -gt 0 ]]; then generator=Ninja
elif [[ -f $BUILD/CMakeCache.txt ]]; then generator=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
else generator="Unix Makefiles"; fi
say "configure: $BUILD ($generator) against $PY"
if ! cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_PYTHON="$PY" \
    "-DFRUGAL_CUDA_ARCHITECTURES=$CUDA_ARCH" >>"$LOG" 2>&1; then
  say "configure failed (the end of $LOG says why: a missing library names its package)"; tail -15 "$LOG" >&2; exit 1
fi
KERNELS=0
grep -q 'FRUGAL_HAVE_KERNELS 1' "$BUILD/generated/frugal_build_config.h" 2>/dev/null && KERNELS=1
targets=(frugal frugal_tests)
[[ $KERNELS -eq 1 ]] && targets+=(kernel_bench)
say "build: ${targets[*]} (CUDA kernels: $KERNELS, architectures $CUDA_ARCH)"
if ! cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" >>"$LOG" 2>&1; then
  say "build failed"; grep -m5 -E "error" "$LOG" >&2; exit 1
fi

# 3. What the build and the node offer.
"$BUILD/frugal" doctor --json >"$OUT/doctor.json" 2>>"$LOG" || { say "frugal doctor failed"; exit 1; }
say "doctor: $("$PY" -c 'import json,sys; f=json.load(open(sys.argv[1])); print("cuda_compiled", f["cuda_compiled"], "| gpus", [g["name"] for g in f["gpus"]], "| std::filesystem from", f.get("std_filesystem_library"))' "$OUT/doctor.json")"

# The C++ runtime the build linked: which libstdc++ files the compiler finds, and the program's
# first shared libraries (libstdc++.so.6 should lead: see CMakeLists.txt on -l:libstdc++.so.6).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
{
  echo "compiler: $cxx ($("$cxx" --version 2>/dev/null | head -1))"
  for f in libstdc++.so libstdc++.so.6 libstdc++.a; do echo "$f: $("$cxx" -print-file-name=$f 2>/dev/null)"; done
  if command -v readelf >/dev/null; then echo "frugal's first libraries:"; readelf -d "$BUILD/frugal" | grep -m4 NEEDED; fi
} >"$OUT/toolchain.txt" 2>&1
say "toolchain: $(sed -n 's/^compiler: //p' "$OUT/toolchain.txt"); frugal's first libraries: $(grep -o 'library: \[[^]]*\]' "$OUT/toolchain.txt" | sed 's/library: //' | tr '\n' ' ')"

# 4. The node's own toolchain and libraries on the CPU paths the CUDA tests rely on: checkpoint
# writes, directory removal, which std::filesystem the program binds, the crash report. A failure
# here is the node's, not the GPU's.
status=0
say "ctest -R 'RemoveTree|Checkpoint|CrashReport' -LE cuda (CPU, on this node)"
(cd "$BUILD" && ctest -R 'RemoveTree|Checkpoint|CrashReport' -LE cuda -j "$(nproc)" --output-on-failure --timeout "$TEST_TIMEOUT") >"$OUT/ctest-cpu-node.log" 2>&1 || status=1
tail -n 6 "$OUT/ctest-cpu-node.log" | tee -a "$LOG"

# 5. frugal's CUDA kernels first (a kernel that fails here explains every failure after it): their
# tests, one line each; compute-sanitizer memcheck over the kernel-level ones; the microbenchmark.
KERNEL_TESTS='Cuda\.(FusedClassifier|FusedCrossEntropy|LayerNormKernels|TrainingOnFrugalKernels)'
if [[ $KERNELS -eq 1 ]]; then
  say "ctest -R '$KERNEL_TESTS'"
  (cd "$BUILD" && ctest -R "$KERNEL_TESTS" --output-on-failure --timeout "$TEST_TIMEOUT") >"$OUT/ctest-kernels.log" 2>&1 || status=1
  grep -E '(Passed|Failed|Skipped|Not Run|\*\*\*)' "$OUT/ctest-kernels.log" | grep -E 'Test +#' | tee -a "$LOG"
  SAN=$(command -v compute-sanitizer || true)
  [[ -z $SAN && -x /usr/local/cuda/bin/compute-sanitizer ]] && SAN=/usr/local/cuda/bin/compute-sanitizer
  if [[ $SANITIZER -eq 1 && -n $SAN ]]; then
    say "compute-sanitizer --tool memcheck over Cuda.FusedClassifier* and Cuda.LayerNormKernels*"
    if timeout 300 "$SAN" --tool memcheck --error-exitcode 9 "$BUILD/tests/frugal_tests" \
        --gtest_filter='Cuda.FusedClassifier*:Cuda.LayerNormKernels*' >"$OUT/memcheck.log" 2>&1; then
      say "memcheck: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log" || echo 'no summary line')"
    else
      status=1; say "memcheck FAILED (exit $?): $(grep -m3 -E 'ERROR SUMMARY|Invalid|out of bounds' "$OUT/memcheck.log" | tr '\n' ' ')"
    fi
  elif [[ $SANITIZER -eq 1 ]]; then
    say "no compute-sanitizer on this node: memcheck not run"
  fi
  say "build/kernel_bench (frugal's kernels against ATen, GPT-2 124M shape)"
  "$BUILD/kernel_bench" --json "$OUT/gpu_kernel_bench.json" 2>&1 | tee "$OUT/kernel_bench.log" | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  # Exit 2: no CUDA device the kernels run on (expected in a --smoke pass on a CPU machine).
  [[ $rc -eq 0 || ($rc -eq 2 && $SMOKE -eq 1) ]] || { say "kernel_bench exited $rc"; status=1; }
else
  say "this build has no CUDA kernels (FRUGAL_KERNELS): their tests report themselves skipped"
fi

# 6. The CUDA tests.
say "ctest -L cuda"
(cd "$BUILD" && ctest -L cuda --output-on-failure --timeout "$TEST_TIMEOUT") >"$OUT/ctest-cuda.log" 2>&1 || status=1
tail -n 25 "$OUT/ctest-cuda.log" | tee -a "$LOG"

# 7. The GPU benchmark.
if [[ $BENCH -eq 1 ]]; then
  args=(--frugal "$BUILD/frugal" --out "$OUT" "${BENCH_ARGS[@]}" "${NO_COMPILE[@]}")
  [[ $SMOKE -eq 1 ]] && args=(--frugal "$BUILD/frugal" --out "$OUT" --smoke "${NO_COMPILE[@]}")
  say "bench/gpu_bench.py ${args[*]}"
  PYTHONUNBUFFERED=1 "$PY" bench/gpu_bench.py "${args[@]}" 2>&1 | tee "$OUT/gpu-bench.log" | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { say "gpu_bench.py exited $rc"; [[ $rc -eq 2 && $SMOKE -eq 0 ]] || status=1; }
fi
# 8. Where the step time goes, frugal against eager (--profile).
if [[ $PROFILE -eq 1 ]]; then
  pargs=(--frugal "$BUILD/frugal" --out "$OUT" "${NO_COMPILE[@]}")
  [[ $SMOKE -eq 1 ]] && pargs+=(--smoke)
  say "bench/gpu_profile.py ${pargs[*]}"
  PYTHONUNBUFFERED=1 "$PY" bench/gpu_profile.py "${pargs[@]}" 2>&1 | tee "$OUT/gpu-profile.log" | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { say "gpu_profile.py exited $rc"; status=1; }
fi
say "done in $(( $(date +%s) - START )) s; logs and JSON in $OUT"
exit $status
