#!/usr/bin/env python3
"""Data parallel on this machine (docs/levers.md and docs/distributed.md): 2 local processes
against 1, and ZeRO-1, 2 and 3 against plain data parallel. The same model trains with the same
global batch of 16 sequences per step: one process with accumulation 2, two ranks (`frugal launch
-n 2`, Gloo on localhost) with accumulation 1 each, two ranks with dist.zero = 1, 2 and 3, and
ZeRO-3 with dist.reshard_after_forward = false (blocks kept whole from forward to backward). The
six run alternately for --rounds rounds; the table gives medians over the
rounds of the step time (summary.json wall_s / steps), the communication time per step (waits for
gradient reductions not hidden behind backward, the per-step stop agreement, ZeRO's parameter
all-gather) and its fraction of step time, the AdamW state per rank (summary.json
optimizer_state_mb), the training state one rank holds (summary.json state_bytes_per_rank:
parameters, gradients, moments), ZeRO-3's block gathers per step and the largest rank's peak of
live tensor memory (summary.json peak_tensor_mb_per_rank). Targets: ZeRO-2's step time at most 1.05x ZeRO-1's, ZeRO-3's at
most 1.3x.

Default model: 4 layers, embd 256, 8 heads, block 64, micro-batch 8 (3.2M parameters), fp32.
On a machine with few cores the two processes share the cores one process already used, so
step time is no measure of data parallel's speed-up here; the communication fraction and the
state per rank are the figures that carry over.

Writes bench/results/<date>/dist.json and prints a table.

On a multi-GPU node (one GPU cannot show sharding): --device cuda --procs N runs N ranks, one GPU
each (NCCL), against one process with accumulation N, e.g.

  .venv/bin/python bench/dist_bench.py --device cuda --procs 8 --set precision.mode=bf16 \
      --set model.layers=12 --set model.embd=768 --set model.heads=12 --set model.block=1024 \
      --results bench/results/<date>-gpu-<card>x8

  .venv/bin/python bench/dist_bench.py [--frugal build/frugal] [--rounds 3] [--steps 30]
      [--port 29690] [--procs 2] [--device cpu] [--quick] [--set KEY=VALUE ...]
"""
import argparse
import itertools
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

MODEL = ["model.layers=4", "model.embd=256", "model.heads=8", "model.block=64", "data.micro_batch=8"]
DIST_FIELDS = ("comm_fraction", "comm_ms_per_step", "allreduce_wait_ms_per_step", "zero_gather_ms_per_step",
               "agree_ms_per_step")

def make_runs(procs):
    """The six sides for `procs` ranks: (label, processes, extra --set values)."""
    return {"single": (f"1 process, accum {procs}", 1, [f"train.accum={procs}"]),
            "dp": (f"{procs} processes", procs, ["train.accum=1"]),
            "zero": (f"{procs} processes, ZeRO-1", procs, ["train.accum=1", "dist.zero=1"]),
            "zero2": (f"{procs} processes, ZeRO-2", procs, ["train.accum=1", "dist.zero=2"]),
            "zero3": (f"{procs} processes, ZeRO-3", procs, ["train.accum=1", "dist.zero=3"]),
            "zero3_keep": (f"{procs} processes, ZeRO-3, blocks kept", procs,
                           ["train.accum=1", "dist.zero=3", "dist.reshard_after_forward=false"])}



def one_run(frugal, work, sets, sides, name, ports):
    label, procs, extra = sides[name]
    out_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=work)
    train = ["train", "-q", "--set", f"run.out_dir={out_dir}"]
    for s in sets + extra:
        train += ["--set", s]
    args = [frugal] + train if procs == 1 else [frugal, "launch", "-n", str(procs), "--port", str(next(ports)), "--"] + train
    run(args, "dist_bench")
    with open(os.path.join(out_dir, "demo", "summary.json")) as f:
        s = json.load(f)
    shutil.rmtree(out_dir, ignore_errors=True)
    row = {"step_ms": 1e3 * s["wall_s"] / s["steps"], "tokens_per_s": s["tokens_per_s"],
           "optimizer_state_mb_per_rank": s["optimizer_state_mb"], "params": s["params"],
           "peak_tensor_mb_per_rank": max(s.get("peak_tensor_mb_per_rank") or [s.get("peak_tensor_mb") or 0])}
    if "state_bytes_per_rank" in s:
        row.update({f"state_{k}_mb_per_rank": v / 1e6 for k, v in s["state_bytes_per_rank"].items()})
    if "dist" in s:
        row.update({k: s["dist"][k] for k in DIST_FIELDS + ("block_gathers_per_step",)})
        row["buckets"] = s["dist"].get("buckets")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None, help="the frugal binary (default build/frugal)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--steps", type=int, default=30, help="training steps per run")
    ap.add_argument("--port", type=int, default=29690, help="first rendezvous port (each launch takes the next)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra frugal --set KEY=VALUE")
    ap.add_argument("--procs", type=int, default=2, help="ranks of the data-parallel sides (2 or more)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: one GPU per rank (frugal launch gives rank r cuda:r), NCCL")
    ap.add_argument("--quick", action="store_true", help="1 round of 6 steps (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps = 1, 6
    if a.procs < 2:
        ap.error(f"--procs {a.procs}: data parallel needs at least 2 ranks")
    sides = make_runs(a.procs)
    frugal = frugal_binary(a.frugal)
    t0 = time.time()
    common = common_fields("dist", a.quick, a.rounds)
    sets = MODEL + [f"train.steps={a.steps}", "train.eval_every=0", "train.answer_samples=0",
                    "checkpoint.enabled=false", "precision.mode=fp32", f"run.device={a.device}"] + a.sets
    ports = itertools.count(a.port)
    work = tempfile.mkdtemp(prefix="frugal-dist-")
    try:
        res = alternate(a.rounds, [lambda n=n: one_run(frugal, work, sets, sides, n, ports) for n in sides])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"model": MODEL, "steps": a.steps, "global_batch": 8 * a.procs, "processes": a.procs,
           "backend": "nccl" if a.device == "cuda" else "gloo", "device": a.device, "sets": sets,
           "params": res[0][0]["params"], "runs": {}}
    for name, runs in zip(sides, res):
        row = {"label": sides[name][0], "processes": sides[name][1], "rounds": runs}
        for k in runs[0]:
            if k not in ("params", "buckets") and runs[0][k] is not None:
                row[k] = median([r[k] for r in runs])
        row["buckets"] = runs[0].get("buckets")
        out["runs"][name] = row
    out["zero1_state_ratio"] = (out["runs"]["zero"]["optimizer_state_mb_per_rank"]
                                / out["runs"]["dp"]["optimizer_state_mb_per_rank"])
    # Per round (the rounds alternate, so each ratio compares neighbours in time), then the median.
    out["zero2_over_zero1_step_time"] = median([b["step_ms"] / a["step_ms"] for a, b in
                                                zip(out["runs"]["zero"]["rounds"], out["runs"]["zero2"]["rounds"])])
    out["zero2_over_zero1_step_time_target"] = 1.05
    out["zero2_state_ratio"] = (out["runs"]["zero2"]["state_total_mb_per_rank"]
                                / out["runs"]["dp"]["state_total_mb_per_rank"])
    out["zero3_over_zero1_step_time"] = median([b["step_ms"] / a["step_ms"] for a, b in
                                                zip(out["runs"]["zero"]["rounds"], out["runs"]["zero3"]["rounds"])])
    out["zero3_over_zero1_step_time_target"] = 1.3
    out["zero3_state_ratio"] = (out["runs"]["zero3"]["state_total_mb_per_rank"]
                                / out["runs"]["dp"]["state_total_mb_per_rank"])
    out["zero3_keep_over_zero3_step_time"] = median([b["step_ms"] / a["step_ms"] for a, b in
                                                     zip(out["runs"]["zero3"]["rounds"],
                                                         out["runs"]["zero3_keep"]["rounds"])])
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    print(f"{out['params'] / 1e6:.2f}M parameters, {a.steps} steps, medians of {a.rounds} alternating rounds")
    for name, v in out["runs"].items():
        comm = f", communication {v['comm_ms_per_step']:.1f} ms/step ({100 * v['comm_fraction']:.1f}%)" \
            if "comm_fraction" in v else ""
        print(f"{v['label']:22} step {v['step_ms']:.0f} ms{comm}, AdamW state {v['optimizer_state_mb_per_rank']:.2f} "
              f"MB/rank, training state {v['state_total_mb_per_rank']:.2f} MB/rank")
    print(f"ZeRO-2 step time / ZeRO-1's: {out['zero2_over_zero1_step_time']:.3f} (target <= 1.05); training state "
          f"per rank {out['zero2_state_ratio']:.2f} x plain data parallel's")
    print(f"ZeRO-3 step time / ZeRO-1's: {out['zero3_over_zero1_step_time']:.3f} (target <= 1.3); training state "
          f"per rank {out['zero3_state_ratio']:.2f} x plain data parallel's")
    k, z = out["runs"]["zero3_keep"], out["runs"]["zero3"]
    print(f"ZeRO-3 with blocks kept whole: step time {out['zero3_keep_over_zero3_step_time']:.3f}x ZeRO-3's, "
          f"{k['block_gathers_per_step']:.0f} block gathers a step (ZeRO-3: {z['block_gathers_per_step']:.0f}), "
          f"peak {k['peak_tensor_mb_per_rank']:.1f} MB per rank (ZeRO-3: {z['peak_tensor_mb_per_rank']:.1f})")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
