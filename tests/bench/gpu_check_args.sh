#!/usr/bin/env bash
# scripts/gpu-check.sh's command line, checked without a GPU and before anything is built (the
# parser exits before the script touches a file): --help documents every option, an unknown
# option exits 2 with a message that lists every option, and a bad number exits 2 naming it.
#   bash tests/bench/gpu_check_args.sh PROJECT_ROOT
set -u
script="$1/scripts/gpu-check.sh"
options=(--out --build-dir --no-bench --profile --no-compile --smoke --repeats --steps --test-timeout --cuda-arch
         --max-autotune --no-sanitizer --bench-rows --budget --node-tests --help)
fail=0
bad() { echo "gpu_check_args: $*"; fail=1; }

help=$(bash "$script" --help 2>&1) || bad "--help exited $?"
for o in "${options[@]}"; do
  [[ $o == --help ]] && continue
  grep -q -- "$o" <<<"$help" || bad "--help does not document $o"
done

msg=$(bash "$script" --no-such-option 2>&1); rc=$?
[[ $rc -eq 2 ]] || bad "an unknown option exited $rc, not 2"
grep -q -- "--no-such-option" <<<"$msg" || bad "the unknown-option message does not name the option: $msg"
for o in "${options[@]}"; do
  grep -q -- "$o" <<<"$msg" || bad "the unknown-option message does not list $o: $msg"
done

for args in "--steps x" "--repeats 0" "--test-timeout -5" "--cuda-arch sm_90;rm" "--bench-rows bf16,gpt" "--budget 8m"; do
  # shellcheck disable=SC2086
  msg=$(bash "$script" $args 2>&1); rc=$?
  [[ $rc -eq 2 ]] || bad "'$args' exited $rc, not 2"
  grep -q -- "${args%% *}" <<<"$msg" || bad "'$args': the message does not name ${args%% *}: $msg"
done

[[ $fail -eq 0 ]] && echo "gpu_check_args: ok (${#options[@]} options)"
exit $fail
