#!/usr/bin/env bash
# The GPU check: one call on a bare GPU node with PyTorch installed (no internet needed). It builds
# frugal against that node's PyTorch, runs frugal's kernel tests, the kernel microbenchmark, the
# GPU benchmark's rows, the other CUDA tests and compute-sanitizer's memcheck, in that order, within
# a time budget it enforces itself, and leaves the logs and JSON in one folder as it goes.
#
#   bash scripts/gpu-check.sh [--out DIR] [--budget S] [--build-dir DIR] [--no-bench] [--smoke]
#                             [--repeats N] [--steps N] [--test-timeout S] [--profile] [--no-compile]
#                             [--cuda-arch LIST] [--max-autotune] [--no-sanitizer] [--bench-rows LIST]
#                             [--node-tests]
#
#   --out DIR        where the logs and the benchmark JSON go (default bench/results/<date>-gpu;
#                    with --smoke, bench/out/gpu_smoke: a smoke pass never lands among the results)
#   --budget S       seconds for the whole check, build included (default 480, 8 minutes; 0 = no
#                    limit). Each step starts only if time is left for it; the benchmark gets the
#                    budget's end less a reserve for the CUDA tests and memcheck (bench/gpu_bench.py
#                    --deadline) and writes its JSON after every run, so a cut check keeps every
#                    figure it measured. OUT/gpu_check.json lists each step, its status and seconds.
#   --build-dir DIR  the CMake build folder (default build-gpu)
#   --no-bench       build and test only
#   --repeats N      the benchmark's alternating rounds (bench/gpu_bench.py --repeats; default 2)
#   --steps N        the benchmark's timed steps per run (default 20)
#   --test-timeout S a CUDA test running longer than S seconds fails (default 300)
#   --profile        after the benchmark, bench/gpu_profile.py: frugal's, PyTorch eager's and
#                    torch.compile's device time per step by kernel kind, from profiled steps
#                    (OUT/gpu_profile.json)
#   --no-compile     leave torch.compile out of the benchmark and the profile
#   --smoke          the benchmark at a tiny shape (bench/gpu_bench.py --smoke): proves the steps
#                    on a machine without a GPU, where the CUDA tests report every case as skipped
#   --cuda-arch LIST the CUDA architectures frugal's kernels are built for (FRUGAL_CUDA_ARCHITECTURES;
#                    default the node's own GPU's, from nvidia-smi, e.g. 90-real on an H100/H200
#                    and 80-real on an A100: machine code for this card only, the quickest build)
#   --max-autotune   torch.compile mode "max-autotune" in every benchmark round (minutes of
#                    autotuning); without it, it runs once at the end when the budget leaves time
#   --no-sanitizer   skip compute-sanitizer memcheck over the kernel tests
#   --bench-rows LIST the benchmark's rows, comma-separated (bf16, fp8, llama, head, fp16, sync,
#                    ckpt, stall, muon, offload; default bf16,fp8,llama: frugal on ATen and its kernels,
#                    PyTorch eager and torch.compile, frugal's fp8 linears on both paths, then the
#                    Llama shape against PyTorch, as far as the budget goes); `muon` for Muon's step
#                    against fused AdamW's
#   --node-tests     also build the whole test suite and run the CPU tests of checkpoints,
#                    directory removal and the crash report on this node (about a minute more)
#
# Steps, each timed and logged to OUT/gpu-check.log: 1. facts (nvidia-smi, python3's torch, cmake,
# ninja, nvcc); 2. configure and build frugal, frugal_gpu_tests and kernel_bench with Ninja against
# python3's torch (FRUGAL_PYTHON); 3. `frugal doctor --json` and the C++ runtime the build linked
# (toolchain.txt); 4. with --node-tests, the CPU tests above; 5. frugal's kernel tests (a line
# each) and build/kernel_bench against ATen (gpu_kernel_bench.json); 6. bench/gpu_bench.py; 7. the
# other CUDA tests (ctest -L cuda); 8. compute-sanitizer memcheck over the kernel tests, with
# PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1: an access past a tensor inside
# a cached block shows); 9. with --profile, bench/gpu_profile.py. Exit status: 0 when every step
# that ran passed, 1 when a step failed (the log says which), 2 when the node lacks what the check
# needs (the message names it). A step the budget leaves out is listed as "skipped", not failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
START=$(date +%s)

OUT=""
BUILD=build-gpu
BENCH=1
PROFILE=0
SMOKE=0
BENCH_ARGS=()
BENCH_ROWS=bf16,fp8,llama
NO_COMPILE=()
TEST_TIMEOUT=300
CUDA_ARCH=""
SANITIZER=1
BUDGET=480
NODE_TESTS=0
ROWS_RE='^(bf16|fp8|llama|head|fp16|sync|ckpt|stall|muon|offload)(,(bf16|fp8|llama|head|fp16|sync|ckpt|stall|muon|offload))*$'
ALL_OPTIONS="--out DIR, --budget S, --build-dir DIR, --no-bench, --profile, --no-compile, --smoke, --repeats N, --steps N, --test-timeout S, --cuda-arch LIST, --max-autotune, --no-sanitizer, --bench-rows LIST, --node-tests, --help"
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
    --node-tests) NODE_TESTS=1; shift ;;
    --bench-rows) [[ ${2:-} =~ $ROWS_RE ]] || { echo "gpu-check: --bench-rows takes a comma-separated list of bf16, fp8, llama, head, fp16, sync, ckpt, stall, muon, offload, not '${2:-}'" >&2; exit 2; }
                  BENCH_ROWS=$2; shift 2 ;;
    --cuda-arch) arch_re='^[0-9a-z;-]+$'
                 [[ ${2:-} =~ $arch_re ]] || { echo "gpu-check: --cuda-arch takes CMake CUDA architectures such as 90-real or '80-real;90-real', not '${2:-}'" >&2; exit 2; }
                 CUDA_ARCH=$2; shift 2 ;;
    --repeats|--steps) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: $1 takes a positive whole number, not '${2:-}'" >&2; exit 2; }
                       BENCH_ARGS+=("$1" "$2"); shift 2 ;;
    --test-timeout) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --test-timeout takes seconds (a positive whole number), not '${2:-}'" >&2; exit 2; }
                    TEST_TIMEOUT=$2; shift 2 ;;
    --budget) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget takes seconds (a whole number, 0 = no limit), not '${2:-}'" >&2; exit 2; }
              BUDGET=$2; shift 2 ;;
    -h|--help) sed -n '2,50p' "$0" | sed -n '/^set -uo/q;p' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (allowed: $ALL_OPTIONS)" >&2; exit 2 ;;
  esac
done
[[ " ${BENCH_ARGS[*]} " == *" --steps "* ]] || BENCH_ARGS+=(--steps 20)
if [[ -z $OUT ]]; then
  if [[ $SMOKE -eq 1 ]]; then OUT=bench/out/gpu_smoke; else OUT="bench/results/$(date +%F)-gpu"; fi
fi
mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
STEPS="$OUT/gpu_check.jsonl"
: >"$LOG"
: >"$STEPS"
say() { echo "gpu-check [$(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
need() { command -v "$1" >/dev/null || { say "missing: $1 ($2)"; exit 2; }; }
# Seconds left in the budget (a large number without one).
left() { if [[ $BUDGET -eq 0 ]]; then echo 1000000; else echo $(( START + BUDGET - $(date +%s) )); fi; }
# The same, at least 1: a bound for `timeout` (whose 0 means no bound at all).
bound() { local l; l=$(left); [[ $l -ge 1 ]] && echo "$l" || echo 1; }
# step NAME STATUS SECONDS [DETAIL]: one line of OUT/gpu_check.jsonl (status passed, failed or
# skipped), written when the step ends, so a check cut off still lists what it finished.
step() {
  "$PY" -c 'import json,sys; print(json.dumps({"step": sys.argv[1], "status": sys.argv[2], "seconds": int(sys.argv[3]), "detail": sys.argv[4], "at_s": int(sys.argv[5])}))' \
    "$1" "$2" "$3" "${4:-}" "$(( $(date +%s) - START ))" >>"$STEPS"
}
# fits NAME SECONDS: whether a step expected to take SECONDS fits in the budget; else it is logged
# and listed as skipped.
fits() {
  if [[ $(left) -ge $2 ]]; then return 0; fi
  say "$1: skipped, about $2 s needed and $(left) s left of the --budget $BUDGET s"
  step "$1" skipped 0 "about $2 s needed, $(left) s left"
  return 1
}

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
say "budget: $([[ $BUDGET -eq 0 ]] && echo none || echo "$BUDGET s")"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | tee -a "$LOG" | sed 's/^/gpu-check: GPU /'
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [[ -z $CUDA_ARCH && $cap =~ ^[0-9]+$ ]] && CUDA_ARCH="${cap}-real"
else
  say "no nvidia-smi on this machine: the CUDA tests will report themselves skipped"
fi
[[ -n $CUDA_ARCH ]] || CUDA_ARCH=90-real
command -v nvcc >/dev/null && say "nvcc: $(nvcc --version | tail -1)"
"$PY" -c 'import torch,sys; sys.exit(0 if torch.version.cuda else 1)' ||
  say "warning: $PY's torch has no CUDA; frugal will build CPU-only"
status=0

# 2. Build: frugal, the CUDA tests' own binary and kernel_bench (the whole suite with --node-tests).
if [[ ${#GEN[@]} -gt 0 ]]; then generator=Ninja
elif [[ -f $BUILD/CMakeCache.txt ]]; then generator=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
else generator="Unix Makefiles"; fi
say "configure: $BUILD ($generator) against $PY"
t=$(date +%s)
if ! cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_PYTHON="$PY" \
    "-DFRUGAL_CUDA_ARCHITECTURES=$CUDA_ARCH" >>"$LOG" 2>&1; then
  say "configure failed (the end of $LOG says why: a missing library names its package)"; tail -15 "$LOG" >&2
  step configure failed $(( $(date +%s) - t )); exit 1
fi
KERNELS=0
grep -q 'FRUGAL_HAVE_KERNELS 1' "$BUILD/generated/frugal_build_config.h" 2>/dev/null && KERNELS=1
targets=(frugal frugal_gpu_tests)
[[ $KERNELS -eq 1 ]] && targets+=(kernel_bench)
[[ $NODE_TESTS -eq 1 ]] && targets+=(frugal_tests)
say "build: ${targets[*]} (CUDA kernels: $KERNELS, architectures $CUDA_ARCH)"
if ! cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" >>"$LOG" 2>&1; then
  say "build failed"; grep -m5 -E "error" "$LOG" >&2; step build failed $(( $(date +%s) - t )); exit 1
fi
step build passed $(( $(date +%s) - t )) "${targets[*]}; architectures $CUDA_ARCH"

# 3. What the build and the node offer.
"$BUILD/frugal" doctor --json >"$OUT/doctor.json" 2>>"$LOG" || { say "frugal doctor failed"; exit 1; }
say "doctor: $("$PY" -c 'import json,sys; f=json.load(open(sys.argv[1])); print("cuda_compiled", f["cuda_compiled"], "| kernels for", f.get("cuda_kernel_architectures") or "none", "| gpus", [g["name"] for g in f["gpus"]], "| std::filesystem from", f.get("std_filesystem_library"))' "$OUT/doctor.json")"

# The C++ runtime the build linked: which libstdc++ files the compiler finds, and the program's
# first shared libraries (libstdc++.so.6 should lead: see CMakeLists.txt on -l:libstdc++.so.6).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
{
  echo "compiler: $cxx ($("$cxx" --version 2>/dev/null | head -1))"
  for f in libstdc++.so libstdc++.so.6 libstdc++.a; do echo "$f: $("$cxx" -print-file-name=$f 2>/dev/null)"; done
  if command -v readelf >/dev/null; then echo "frugal's first libraries:"; readelf -d "$BUILD/frugal" | grep -m4 NEEDED; fi
} >"$OUT/toolchain.txt" 2>&1
say "toolchain: $(sed -n 's/^compiler: //p' "$OUT/toolchain.txt"); frugal's first libraries: $(grep -o 'library: \[[^]]*\]' "$OUT/toolchain.txt" | sed 's/library: //' | tr '\n' ' ')"

# ctest_step NAME LOG ARGS...: ctest in the build folder, bounded by the budget left.
ctest_step() {
  local name=$1 log=$2 t rc; shift 2
  t=$(date +%s)
  (cd "$BUILD" && timeout "$(bound)" ctest "$@" --output-on-failure --timeout "$TEST_TIMEOUT") >"$log" 2>&1
  rc=$?
  grep -E 'Test +#' "$log" | grep -E '(Passed|Failed|Skipped|Not Run|\*\*\*)' | tee -a "$LOG"
  tail -n 3 "$log" | tee -a "$LOG"
  if [[ $rc -eq 124 ]]; then say "$name: cut off by the budget"; step "$name" failed $(( $(date +%s) - t )) "cut off by the budget"; status=1
  elif [[ $rc -ne 0 ]]; then step "$name" failed $(( $(date +%s) - t )) "$(grep -m1 -E 'tests passed|tests failed' "$log")"; status=1
  else step "$name" passed $(( $(date +%s) - t )) "$(grep -m1 -E 'tests passed' "$log")"; fi
}

# 4. The node's own toolchain and libraries on the CPU paths the CUDA tests rely on: checkpoint
# writes, directory removal, which std::filesystem the program binds, the crash report.
if [[ $NODE_TESTS -eq 1 ]] && fits node-tests 20; then
  say "ctest -R 'RemoveTree|Checkpoint|CrashReport' -LE cuda (CPU, on this node)"
  ctest_step node-tests "$OUT/ctest-cpu-node.log" -R 'RemoveTree|Checkpoint|CrashReport' -LE cuda -j "$(nproc)"
fi

# 5. frugal's CUDA kernels first (a kernel that fails here explains every failure after it): their
# tests, one line each, and the microbenchmark.
KERNEL_TESTS='Cuda\.(BiasGeluKernels|FusedClassifier|FusedCrossEntropy|LayerNormKernels|TrainingOnFrugalKernels|GradientWrittenOver|KernelsRunOn|LlamaKernels|LlamaTrainingOnFrugalKernels)|CudaFp8\.TheCastKernel'
if [[ $KERNELS -eq 1 ]]; then
  if fits kernel-tests 20; then
    say "ctest -R '$KERNEL_TESTS'"
    ctest_step kernel-tests "$OUT/ctest-kernels.log" -R "$KERNEL_TESTS"
  fi
  if fits kernel-bench 20; then
    say "build/kernel_bench (frugal's kernels against ATen, GPT-2 124M shape)"
    t=$(date +%s)
    timeout "$(bound)" "$BUILD/kernel_bench" --json "$OUT/gpu_kernel_bench.json" 2>&1 | tee "$OUT/kernel_bench.log" | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    # Exit 2: no CUDA device the kernels run on (expected in a --smoke pass on a CPU machine).
    if [[ $rc -eq 0 || ($rc -eq 2 && $SMOKE -eq 1) ]]; then step kernel-bench passed $(( $(date +%s) - t )) "exit $rc"
    else say "kernel_bench exited $rc"; status=1; step kernel-bench failed $(( $(date +%s) - t )) "exit $rc"; fi
  fi
else
  say "this build has no CUDA kernels (FRUGAL_KERNELS): their tests report themselves skipped"
fi

# 6. The GPU benchmark, up to the budget's end less a reserve for the CUDA tests and memcheck.
RESERVE=100
if [[ $BENCH -eq 1 ]] && fits bench 60; then
  args=(--frugal "$BUILD/frugal" --out "$OUT" --only "$BENCH_ROWS" "${BENCH_ARGS[@]}" "${NO_COMPILE[@]}")
  [[ $SMOKE -eq 1 ]] && args=(--frugal "$BUILD/frugal" --out "$OUT" --smoke --only "$BENCH_ROWS" "${NO_COMPILE[@]}")
  [[ $BUDGET -gt 0 ]] && args+=(--deadline "$(( START + BUDGET - RESERVE ))")
  say "bench/gpu_bench.py ${args[*]}"
  t=$(date +%s)
  # The deadline holds each run to what fits; `timeout` is the backstop (a run that overruns its estimate).
  PYTHONUNBUFFERED=1 timeout "$(bound)" "$PY" bench/gpu_bench.py "${args[@]}" 2>&1 | tee "$OUT/gpu-bench.log" | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then step bench passed $(( $(date +%s) - t ))
  else
    say "gpu_bench.py exited $rc"
    [[ $rc -eq 2 && $SMOKE -eq 1 ]] || status=1
    step bench failed $(( $(date +%s) - t )) "exit $rc"
  fi
fi

# 7. The other CUDA tests.
if fits cuda-tests 40; then
  say "ctest -L cuda -E '$KERNEL_TESTS'"
  ctest_step cuda-tests "$OUT/ctest-cuda.log" -L cuda -E "$KERNEL_TESTS"
fi

# 8. memcheck over the kernel-level tests, last (the slowest step per figure it gives).
if [[ $KERNELS -eq 1 && $SANITIZER -eq 1 ]]; then
  SAN=$(command -v compute-sanitizer || true)
  [[ -z $SAN && -x /usr/local/cuda/bin/compute-sanitizer ]] && SAN=/usr/local/cuda/bin/compute-sanitizer
  if [[ -z $SAN ]]; then
    say "no compute-sanitizer on this node: memcheck not run"; step memcheck skipped 0 "no compute-sanitizer"
  elif fits memcheck 30; then
    say "compute-sanitizer --tool memcheck over the kernel-level tests (caching allocator off)"
    t=$(date +%s)
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$(bound)" "$SAN" --tool memcheck --error-exitcode 9 \
      "$BUILD/tests/frugal_gpu_tests" --gtest_filter='Cuda.BiasGeluKernels*:Cuda.FusedClassifier*:Cuda.LayerNormKernels*:Cuda.LlamaKernels*:CudaFp8.TheCastKernel*' >"$OUT/memcheck.log" 2>&1
    rc=$?
    if [[ $rc -eq 0 ]] && grep -q 'ERROR SUMMARY: 0 errors' "$OUT/memcheck.log"; then
      say "memcheck: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"; step memcheck passed $(( $(date +%s) - t ))
    elif grep -qi 'device not supported\|not supported on this device\|unsupported device' "$OUT/memcheck.log"; then
      say "memcheck: compute-sanitizer does not support this GPU: not run ($(grep -m1 -i 'not supported\|unsupported' "$OUT/memcheck.log"))"
      step memcheck skipped $(( $(date +%s) - t )) "compute-sanitizer does not support this GPU"
    elif [[ $rc -eq 124 ]]; then
      say "memcheck: cut off by the budget"; step memcheck skipped $(( $(date +%s) - t )) "cut off by the budget"
    else
      status=1; say "memcheck FAILED (exit $rc): $(grep -m3 -E 'ERROR SUMMARY|Invalid|out of bounds|FAILED' "$OUT/memcheck.log" | tr '\n' ' ')"
      step memcheck failed $(( $(date +%s) - t )) "exit $rc"
    fi
  fi
fi

# 9. Where the step time goes, frugal against eager (--profile).
if [[ $PROFILE -eq 1 ]] && fits profile 120; then
  pargs=(--frugal "$BUILD/frugal" --out "$OUT" "${NO_COMPILE[@]}")
  [[ $SMOKE -eq 1 ]] && pargs+=(--smoke)
  say "bench/gpu_profile.py ${pargs[*]}"
  t=$(date +%s)
  PYTHONUNBUFFERED=1 timeout "$(bound)" "$PY" bench/gpu_profile.py "${pargs[@]}" 2>&1 | tee "$OUT/gpu-profile.log" | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then step profile passed $(( $(date +%s) - t )); else say "gpu_profile.py exited $rc"; status=1; step profile failed $(( $(date +%s) - t )) "exit $rc"; fi
fi
say "done in $(( $(date +%s) - START )) s (budget $([[ $BUDGET -eq 0 ]] && echo none || echo "$BUDGET s")); logs and JSON in $OUT"
exit $status
