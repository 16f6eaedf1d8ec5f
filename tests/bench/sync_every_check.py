"""Timing over windows when the loss is read every N steps (the GPU benchmark's sync-every row):
bench/gpu_bench.py's window_step_times turns frugal's log lines into per-step times, and
bench/peer_gpt.py --sync-every N reads the loss (waits for the device) only at each window's end
and times the windows that start after the warm-up. Synthetic log lines, and the peer on the CPU
at a tiny shape: no GPU needed."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
from gpu_bench import window_step_times  # noqa: E402


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def close(a, b):
    return abs(a - b) < 1e-12


# log_every = 1: each step after the warm-up, at its own time (step s took s ms).
elapsed, t = {}, 0.0
for s in range(1, 9):
    t += s / 1000
    elapsed[s] = t
step_s, ends, means = window_step_times(elapsed, 3)
check(ends == [4, 5, 6, 7, 8], f"log_every 1: timed steps {ends}, expected 4..8")
check(all(close(x, s / 1000) for x, s in zip(step_s, ends)), f"log_every 1: step times {step_s}")

# log_every = 10 over 23 steps (3 warm-up): log lines at 10, 20, 23; the window 10 -> 20 counts
# 10 steps at its mean, 20 -> 23 three at its own; nothing before step 10 is timed.
elapsed = {10: 5.0, 20: 6.0, 23: 6.6}
step_s, ends, means = window_step_times(elapsed, 3)
check(ends == [20, 23], f"log_every 10: windows end at {ends}, expected [20, 23]")
check(len(step_s) == 13, f"log_every 10: {len(step_s)} timed steps, expected 13")
check(all(close(x, 0.1) for x in step_s[:10]) and all(close(x, 0.2) for x in step_s[10:]),
      f"log_every 10: per-step times {step_s}")
check(len(means) == 2 and close(means[0], 0.1) and close(means[1], 0.2), f"log_every 10: window means {means}")

# The peer on the CPU: 3 warm-up steps and 8 timed with --sync-every 4 make windows [0, 4), [4, 8),
# [8, 11); the two that start after the warm-up are timed: 7 steps, the first four at one mean.
with tempfile.TemporaryDirectory() as d:
    text = os.path.join(d, "t.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog\n" * 400)
    args = [sys.executable, os.path.join(BENCH, "peer_gpt.py"), "--text", text, "--layers", "1", "--heads", "2",
            "--embd", "32", "--block", "16", "--batch", "4", "--steps", "8", "--warmup", "3", "--threads", "1",
            "--sync-every", "4"]
    p = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(p.returncode == 0, f"peer_gpt.py --sync-every 4 exited {p.returncode}: {p.stderr[-2000:]}")
    j = json.loads(p.stdout.strip().splitlines()[-1])
    check(j["sync_every"] == 4, f"sync_every {j['sync_every']}")
    check(j["timed_steps"] == 7 and len(j["step_ms"]) == 7, f"peer: {j['timed_steps']} timed steps, expected 7")
    check(len(set(j["step_ms"][:4])) == 1, f"peer: the window [4, 8) not at one mean: {j['step_ms']}")
    bad = subprocess.run(args[:-1] + ["0"], capture_output=True, text=True)
    check(bad.returncode == 2 and "--sync-every" in bad.stderr, f"--sync-every 0 accepted: {bad.returncode}")
print("sync_every_check: ok")
