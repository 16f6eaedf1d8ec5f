#!/usr/bin/env python3
"""The demo as a user meets it (README, docs/levers.md "smoke", docs/tuning.md): `frugal train`
on examples/demo.toml (what `make demo` trains) from start to exit, its summary.json (steps,
tokens/s, precision, peak tensor memory and the process's peak resident memory), and
`frugal smoke examples/demo.toml` timed from start to exit, --rounds times (median). Also the
size of the PyTorch wheel's install in .venv/ (what scripts/install-deps.sh downloads).

Writes bench/results/<date>/demo_run.json and prints a summary.

  .venv/bin/python bench/demo_run.py [--frugal build/frugal] [--rounds 3] [--quick]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import ROOT, common_fields, frugal_binary, median, results_dir, run, save_result, shown  # noqa: E402

DEMO = os.path.join(ROOT, "examples", "demo.toml")
KEEP = ("steps", "tokens", "wall_s", "startup_s", "tokens_per_s", "precision", "threads", "peak_tensor_mb",
        "peak_rss_mb", "final_val_loss", "answer_accuracy", "params")


def timed(args, what):
    t = time.perf_counter()
    run(args, what)
    return time.perf_counter() - t


def tree_bytes(path):
    """Bytes of the regular files under path (symbolic links followed at the top only)."""
    total = 0
    for d, _, files in os.walk(os.path.realpath(path)):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None, help="the frugal binary (default build/frugal)")
    ap.add_argument("--rounds", type=int, default=3, help="smoke runs (median)")
    ap.add_argument("--quick", action="store_true", help="a 60-step demo and one smoke run (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    if a.quick:
        a.rounds = 1
    frugal = frugal_binary(a.frugal)
    t0 = time.time()
    common = common_fields("demo_run", a.quick, a.rounds)
    work = tempfile.mkdtemp(prefix="frugal-demo-")
    try:
        args = [frugal, "train", DEMO, "--quiet", "--set", f"run.out_dir={work}"]
        if a.quick:
            args += ["--set", "train.steps=60"]
        train_s = timed(args, "demo_run")
        with open(os.path.join(work, "demo", "summary.json")) as f:
            s = json.load(f)
        smoke = [timed([frugal, "smoke", DEMO], "demo_run") for _ in range(a.rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"config": shown(DEMO), "train_process_s": train_s, "summary": {k: s.get(k) for k in KEEP},
           "smoke_s": median(smoke), "smoke_runs_s": smoke}
    venv = os.path.join(ROOT, ".venv")
    out["venv_bytes"] = tree_bytes(venv) if os.path.isdir(venv) else None
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    print(f"frugal train {shown(DEMO)}: {s['steps']} steps in {train_s:.1f} s from start to exit "
          f"({s['wall_s']:.1f} s of training, {s['tokens_per_s']:,.0f} tok/s, {s.get('precision')}); peak tensor "
          f"{s['peak_tensor_mb']:.0f} MB, peak RSS {s['peak_rss_mb']:.0f} MB")
    print(f"frugal smoke: {median(smoke):.1f} s (median of {a.rounds})")
    if out["venv_bytes"]:
        print(f".venv: {out['venv_bytes'] / 1e9:.1f} GB")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
