#!/usr/bin/env python3
"""Checkpoint stall, sync against async (docs/levers.md, "checkpoint"): how long the trainer is
blocked per checkpoint save. Trains the same model with a checkpoint every --every steps, once
with checkpoint.async = false and once with true, alternately for --rounds rounds, and reports
the medians over the rounds of summary.json's checkpoint figures (stall per save, mean and max;
write time per save; bytes per checkpoint) and of the runs' wall time.

Default model: 8 layers, embd 256, 8 heads, block 64, micro-batch 8 (6.4M parameters; a
checkpoint holds the weights and both AdamW moments), fp32, on the built-in addition problems.

Writes bench/results/<date>/checkpoint_stall.json and prints a table.

  .venv/bin/python bench/checkpoint_stall.py [--frugal build/frugal] [--rounds 3] [--steps 40]
      [--every 10] [--quick] [--set KEY=VALUE ...]
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
from bench_common import (alternate, common_fields, frugal_binary, median, results_dir, run,  # noqa: E402
                          save_result, shown)

MODEL = ["model.layers=8", "model.embd=256", "model.heads=8", "model.block=64", "data.micro_batch=8"]
FIELDS = ("stall_s_mean", "stall_s_max", "write_s_mean")


def one_run(frugal, work, sets, mode):
    out_dir = tempfile.mkdtemp(prefix=f"{mode}-", dir=work)
    args = [frugal, "train", "-q", "--set", f"run.out_dir={out_dir}", "--set", f"checkpoint.async={mode == 'async'}".lower()]
    for s in sets:
        args += ["--set", s]
    run(args, "checkpoint_stall")
    with open(os.path.join(out_dir, "demo", "summary.json")) as f:
        s = json.load(f)
    shutil.rmtree(out_dir, ignore_errors=True)
    c = s["checkpoint"]
    return {"saves": c["saves"], "bytes": c["bytes"], "wall_s": s["wall_s"], "params": s["params"],
            **{k: c[k] for k in FIELDS}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None, help="the frugal binary (default build/frugal)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--steps", type=int, default=40, help="training steps per run")
    ap.add_argument("--every", type=int, default=10, help="a checkpoint every N steps")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra frugal --set KEY=VALUE")
    ap.add_argument("--quick", action="store_true", help="1 round of 10 steps (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps, a.every = 1, 10, 5
    frugal = frugal_binary(a.frugal)
    t0 = time.time()
    common = common_fields("checkpoint_stall", a.quick, a.rounds)
    sets = MODEL + [f"train.steps={a.steps}", "train.eval_every=0", "train.answer_samples=0",
                    "precision.mode=fp32", f"checkpoint.every_steps={a.every}", "checkpoint.every_minutes=0",
                    "checkpoint.keep_last=2"] + a.sets
    work = tempfile.mkdtemp(prefix="frugal-ckpt-stall-")
    try:
        sync, async_ = alternate(a.rounds, [lambda: one_run(frugal, work, sets, "sync"),
                                            lambda: one_run(frugal, work, sets, "async")])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"model": MODEL, "steps": a.steps, "every_steps": a.every, "sets": sets,
           "params": sync[0]["params"], "modes": {}}
    for name, runs in (("sync", sync), ("async", async_)):
        out["modes"][name] = {"saves": runs[0]["saves"], "bytes": runs[0]["bytes"],
                              **{k: median([r[k] for r in runs]) for k in FIELDS + ("wall_s",)},
                              "runs": runs}
    out["stall_ratio_async_over_sync"] = out["modes"]["async"]["stall_s_mean"] / out["modes"]["sync"]["stall_s_mean"]
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    print(f"{out['params'] / 1e6:.1f}M parameters, {out['modes']['sync']['bytes'] / 1e6:.0f} MB per checkpoint, "
          f"a save every {a.every} of {a.steps} steps; medians of {a.rounds} alternating rounds")
    for name, v in out["modes"].items():
        print(f"{name:6} stall per save {1e3 * v['stall_s_mean']:.0f} ms mean / {1e3 * v['stall_s_max']:.0f} ms max, "
              f"write {1e3 * v['write_s_mean']:.0f} ms, run {v['wall_s']:.1f} s")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
