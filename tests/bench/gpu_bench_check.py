"""The GPU benchmark's own machinery, on the CPU (bench/gpu_bench.py --smoke, a tiny shape): every
row's JSON is written after each run, so a bench killed after its first run keeps that run; the fp8
and Llama rows run, the Llama one with its own shape and FLOPs; a --budget-s too short for any run
skips them all and says so; each row records its sides' final losses against frugal's ATen side and
flags one beyond tolerance; rounds rotate their sides.

  python tests/bench/gpu_bench_check.py FRUGAL_BINARY"""
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
from gpu_bench import loss_parity, round_order, round_plan  # noqa: E402

FRUGAL = sys.argv[1]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def bench(out, *extra):
    return [sys.executable, os.path.join(BENCH, "gpu_bench.py"), "--smoke", "--frugal", FRUGAL, "--out", out,
            "--only", "bf16", "--no-compile", *extra]


def load(path):
    with open(path) as f:
        return json.load(f)


# Loss parity: frugal's sides within 2% of its ATen side, PyTorch's within 5%.
group = {k: {"runs": [{"final_train_loss": v}]} for k, v in
         (("frugal", 10.0), ("frugal_kernels", 10.3), ("eager", 10.4), ("compile", 9.4))}
lp = loss_parity(group)
check(lp["sides"]["frugal"]["ok"] and lp["sides"]["eager"]["ok"], f"sides within tolerance flagged: {lp}")
check(not lp["sides"]["frugal_kernels"]["ok"], f"frugal_kernels 3% off passed: {lp}")
check(not lp["sides"]["compile"]["ok"] and not lp["ok"], f"compile 6% off passed: {lp}")
group["frugal_kernels"]["runs"][0]["final_train_loss"] = float("nan")
check(not loss_parity(group)["sides"]["frugal_kernels"]["ok"], "a NaN loss passed")
check(loss_parity({"eager": group["eager"]}) is None, "parity without the reference side")

# Rotation: each side leads one round.
sides = ["a", "b", "c"]
check([round_order(sides, r)[0] for r in range(3)] == ["a", "b", "c"], "rounds do not rotate their sides")
check(round_order([], 2) == [], "an empty row")
# Under a deadline the eager sides go last in the round, rows otherwise in order.
rows = (("bf16", [("frugal", 0, 0), ("eager", 0, 0), ("compile", 0, 0)]),
        ("llama", [("frugal", 0, 0), ("eager", 0, 0)]))
order = [(label, side[0]) for label, _, side in round_plan(rows, 0, deadline=1)]
check(order == [("bf16", "frugal"), ("bf16", "compile"), ("llama", "frugal"), ("bf16", "eager"), ("llama", "eager")],
      f"the plan under a deadline: {order}")
check([s[0] for _, _, s in round_plan(rows, 1, deadline=0)] == ["eager", "compile", "frugal", "eager", "frugal"],
      "without a deadline the rows' rotated orders are kept")

with tempfile.TemporaryDirectory() as tmp:
    # A whole smoke bench with the fp8 and Llama rows: every side, their losses (fp8's within 2% of
    # bf16's), complete.
    out = os.path.join(tmp, "whole")
    p = subprocess.run(bench(out, "--only", "bf16,fp8,llama"), capture_output=True, text=True)
    check(p.returncode == 0, f"the smoke bench exited {p.returncode}: {p.stderr[-2000:]}")
    bf = load(os.path.join(out, "gpu_bf16.json"))
    check(set(bf["sides"]) == {"frugal", "eager", "frugal_fp8"}, f"sides {sorted(bf['sides'])}")
    check(bf["loss_parity"] and set(bf["loss_parity"]["sides"]) == {"frugal", "eager", "frugal_fp8"},
          f"parity {bf['loss_parity']}")
    check(bf["loss_parity"]["sides"]["frugal_fp8"]["ok"] and "frugal_fp8_over_frugal" in bf, f"fp8 side {bf}")
    ll = load(os.path.join(out, "gpu_llama.json"))
    check(set(ll["sides"]) == {"frugal", "eager", "frugal_fp8"} and ll["loss_parity"]["ok"], f"llama row {ll}")
    check(ll["shape"]["kv_heads"] == 1 and ll["flops_per_token"] != bf["flops_per_token"],
          f"the llama row's shape and FLOPs: {ll['shape']}, {ll['flops_per_token']}")
    check(load(os.path.join(out, "gpu_machine.json"))["complete"] is True, "a finished bench is not complete")
    check(not any(".tmp" in f for f in os.listdir(out)), f"temporary files left: {os.listdir(out)}")

    # Killed right after its first run: that run's figures are on disk.
    out = os.path.join(tmp, "cut")
    proc = subprocess.Popen(bench(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    for line in proc.stderr:
        if "round 1/1 bf16 " in line and "tokens/s" in line:
            first = line
            break
    check(first is not None, "no run finished")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    side = first.split("round 1/1 bf16 ")[1].split(":")[0]
    bf = load(os.path.join(out, "gpu_bf16.json"))
    check(side in bf["sides"], f"the first run ({side}) is not in gpu_bf16.json after the kill: {sorted(bf['sides'])}")
    check(load(os.path.join(out, "gpu_machine.json"))["complete"] is False, "a killed bench says complete")

    # A budget no run fits: every run skipped, listed, nothing measured, exit 0.
    out = os.path.join(tmp, "budget")
    p = subprocess.run(bench(out, "--budget-s", "1"), capture_output=True, text=True)
    check(p.returncode == 0, f"the budget bench exited {p.returncode}: {p.stderr[-2000:]}")
    m = load(os.path.join(out, "gpu_machine.json"))
    check([x["side"] for x in m["skipped"]] == ["frugal", "eager"], f"skipped {m['skipped']}")
    check(not os.path.exists(os.path.join(out, "gpu_bf16.json")), "a row written without a run")
    check("skipped" in p.stdout, f"the skipped runs are not reported: {p.stdout[-800:]}")
print("gpu_bench_check: ok")
