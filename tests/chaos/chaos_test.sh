#!/usr/bin/env bash
# Chaos test for resume determinism: train N steps uninterrupted; then train the same run again,
# killing it with SIGKILL at random steps (at least 5 times; no warning, no checkpoint on the way
# out, often in the middle of a checkpoint write) and resuming each time with --resume auto. The
# final weights (byte for byte) and metrics.jsonl (minus the timing fields) must be identical,
# in fp32, bf16, and fp32 with Muon and the WSD schedule. Then one kill after each stage of a
# checkpoint write (fp32), same check.
#
#   tests/chaos/chaos_test.sh BUILD/frugal            # CI: 300 steps, 5 kills per precision (< 60 s)
#   tests/chaos/chaos_test.sh BUILD/frugal --long     # manual: 2000 steps, 25 kills per precision
#   CHAOS_SEED=1234 tests/chaos/chaos_test.sh ...     # replay the kill points of an earlier run
#   CHAOS_LOAD=2 tests/chaos/chaos_test.sh ...        # competing busy processes (default 1; 0 = none)
#
# Resume must be bitwise whatever the machine is doing: the killed and resumed runs train beside a
# competing CPU load (busy processes started here), the uninterrupted reference without it.
set -euo pipefail

BIN=${1:?usage: chaos_test.sh FRUGAL_BINARY [--long]}
STEPS=300
KILLS=5
if [[ "${2:-}" == "--long" ]]; then STEPS=2000; KILLS=25; fi
SEED=${CHAOS_SEED:-$(( $(date +%s) % 32768 ))}
RANDOM=$SEED
WORK=$(mktemp -d)
LOAD=${CHAOS_LOAD:-1}
echo "chaos: $STEPS steps, $KILLS SIGKILLs per precision, seed $SEED (CHAOS_SEED=$SEED to replay), $LOAD busy" \
     "process(es) beside the resumed runs"
load_pids=()
start_load() { local i; for ((i = 0; i < LOAD; i++)); do ( while :; do :; done ) & load_pids+=($!); done; }
stop_load() {
  if (( ${#load_pids[@]} )); then
    kill "${load_pids[@]}" 2>/dev/null || true
    wait "${load_pids[@]}" 2>/dev/null || true
  fi
  load_pids=()
}
trap 'stop_load; rm -rf "$WORK"' EXIT

# A tiny model with dropout (exercises the RNG state) and a checkpoint every 7 steps (splits the
# log windows of 5, exercises the partial-window state and keeps a write in flight often).
COMMON=(--set run.threads=1 --set model.layers=1 --set model.heads=2 --set model.embd=32
        --set model.block=16 --set model.dropout=0.1 --set data.micro_batch=4
        --set data.arith_lines=2000 --set train.steps=$STEPS --set train.warmup_steps=10
        --set train.eval_every=25 --set train.eval_batches=2 --set train.log_every=5
        --set train.answer_samples=0 --set checkpoint.every_steps=7 --set checkpoint.every_minutes=0
        --set checkpoint.keep_last=2)

last_step() {  # the step of the last complete metrics line, 0 when none
  local f=$1/demo/metrics.jsonl
  [[ -s $f ]] || { echo 0; return; }
  tail -n 1 "$f" | grep -o '"step":[0-9]*' | head -n 1 | cut -d: -f2 || echo 0
}

strip_timing() {
  sed -E 's/,"(tokens_per_s|step_s|elapsed_s|eval_s|data_s|forward_s|backward_s|optimizer_s|data_wait_s|rss_mb|cost_usd|energy_kwh|kg_co2|samples_per_s|mfu|checkpoint_s)":[^,}]*//g' "$1"
}

for prec in fp32 bf16 muon; do
  case $prec in  # muon: Muon with the warmup-stable-decay schedule, in fp32
    muon) X=(--set precision.mode=fp32 --set train.optimizer=muon --set train.schedule=wsd) ;;
    *) X=(--set precision.mode=$prec) ;;
  esac
  ref=$WORK/ref-$prec
  run=$WORK/chaos-$prec
  "$BIN" train -q "${COMMON[@]}" "${X[@]}" --set run.out_dir="$ref" >"$WORK/ref.log" 2>&1 ||
    { cat "$WORK/ref.log"; echo "chaos: FAIL: the uninterrupted $prec run failed"; exit 1; }

  start_load
  kills=0
  at=()
  span=$(( STEPS / (KILLS + 1) ))
  while (( kills < KILLS )); do
    now=$(last_step "$run")
    target=$(( now + 1 + RANDOM % span ))
    "$BIN" train -q --resume auto "${COMMON[@]}" "${X[@]}" --set run.out_dir="$run" \
      >"$WORK/run.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && (( $(last_step "$run") < target )); do sleep 0.01; done
    if kill -9 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
      kills=$((kills + 1))
      at+=("$(last_step "$run")")
    else
      wait "$pid" || { cat "$WORK/run.log"; echo "chaos: FAIL: a resumed $prec run failed"; exit 1; }
      echo "chaos: FAIL: the $prec run finished after $kills kills (wanted $KILLS); raise STEPS"
      exit 1
    fi
  done
  "$BIN" train -q --resume auto "${COMMON[@]}" "${X[@]}" --set run.out_dir="$run" \
    >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; echo "chaos: FAIL: the final $prec resume failed"; exit 1; }
  stop_load

  if ! cmp "$ref/demo/final/model.safetensors" "$run/demo/final/model.safetensors"; then
    echo "chaos: FAIL: $prec final weights differ after kills at steps ${at[*]}"
    exit 1
  fi
  if ! diff <(strip_timing "$ref/demo/metrics.jsonl") <(strip_timing "$run/demo/metrics.jsonl") >"$WORK/diff.txt"; then
    head -n 20 "$WORK/diff.txt"
    echo "chaos: FAIL: $prec metrics.jsonl differs after kills at steps ${at[*]}"
    exit 1
  fi
  lines=$(wc -l <"$run/demo/metrics.jsonl")
  echo "chaos: $prec OK: killed at steps ${at[*]} (metrics lines seen when killed); final weights identical" \
       "(cmp), $lines metrics lines identical minus timing"
done
# Kills inside a checkpoint write, at each of its stages in turn: right after the temp directory,
# each file, state.json, the rename and the COMPLETE marker (FRUGAL_FAULT_KILL_AT=STAGE:2, the
# process's second save), alternating synchronous and asynchronous saves, each followed by
# --resume auto. The end must again equal the uninterrupted fp32 run.
run=$WORK/stages-fp32
start_load
i=0
for stage in temp_dir model master optimizer data_state state renamed marker; do
  async=false; (( i % 2 )) && async=true
  i=$((i + 1))
  rc=0
  # (a subshell, so that its shell, not this one, reports the kill, to /dev/null)
  ( FRUGAL_FAULT_KILL_AT=$stage:2 "$BIN" train -q --resume auto "${COMMON[@]}" --set precision.mode=fp32 \
    --set checkpoint.async=$async --set run.out_dir="$run" >"$WORK/run.log" 2>&1; exit $? ) 2>/dev/null || rc=$?
  if (( rc != 137 )); then
    cat "$WORK/run.log"; echo "chaos: FAIL: the run to be killed after stage $stage exited $rc, not 137 (SIGKILL)"
    exit 1
  fi
done
"$BIN" train -q --resume auto "${COMMON[@]}" --set precision.mode=fp32 --set run.out_dir="$run" \
  >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; echo "chaos: FAIL: the resume after the write kills failed"; exit 1; }
stop_load
cmp "$WORK/ref-fp32/demo/final/model.safetensors" "$run/demo/final/model.safetensors" ||
  { echo "chaos: FAIL: final weights differ after kills inside checkpoint writes"; exit 1; }
diff <(strip_timing "$WORK/ref-fp32/demo/metrics.jsonl") <(strip_timing "$run/demo/metrics.jsonl") >"$WORK/diff.txt" ||
  { head -n 20 "$WORK/diff.txt"; echo "chaos: FAIL: metrics.jsonl differs after kills inside checkpoint writes"; exit 1; }
leftover=$(find "$run/demo/checkpoints" -maxdepth 1 -name '.tmp-*' -o -maxdepth 1 -name '.trash-*' | wc -l)
(( leftover == 0 )) || { ls -a "$run/demo/checkpoints"; echo "chaos: FAIL: $leftover temp directories left"; exit 1; }
echo "chaos: fp32 OK: killed after each of the 8 stages of a checkpoint write (sync and async); final weights" \
     "and metrics identical, no temp directory left"
echo "chaos: PASS"
