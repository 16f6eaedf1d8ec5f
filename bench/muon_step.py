#!/usr/bin/env python3
"""Muon's step against fused AdamW's as the tokens per optimizer step grow: the time-to-loss
bench's "mid" shape (4 layers x 4 heads x 256, block 128, micro-batch 16) at train.accum = 1, 2
and 4 (2,048, 4,096 and 8,192 tokens a step), fp32 weights as there, Muon with its Newton-Schulz
iterations in the dtype train.muon_precision = "auto" picks on this machine.

Muon's iterations cost the same whatever the batch, while forward and backward grow with the
tokens of a step; this bench measures how much of the step the iterations are at each size. Each
run is one `frugal train` of --steps steps on the English corpus of bench/time_to_loss.py; its
step time is the median over its log windows after the first (metrics.jsonl's elapsed_s per step,
the warm-up step left out), and its optimizer time the median of the log steps' optimizer_s. The sides alternate within each round, --repeats rounds; medians.

Writes bench/results/<date>/muon_step.json and prints a table.

  .venv/bin/python bench/muon_step.py [--frugal build/frugal] [--accums 1,2,4] [--steps 30] [--repeats 3]
  .venv/bin/python bench/muon_step.py --quick   # a tiny shape, a few steps (bench/out/quick/<date>/)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_common import ROOT, common_fields, die, frugal_binary, median, results_dir, save_result
from time_to_loss import corpus, newton_schulz_dtype, step_windows_ms

SHAPES = {"mid": dict(layers=4, heads=4, embd=256, block=128, batch=16),
          "quick": dict(layers=1, heads=2, embd=32, block=32, batch=8)}
SIDES = {"fused_adamw": ["train.optimizer=fused_adamw"], "muon": ["train.optimizer=muon", "train.schedule=wsd"]}


def step_ms(frugal, work, text, shape, side, accum, steps):
    s = SHAPES[shape]
    name = f"{side}-accum{accum}"
    sets = [f"run.out_dir={work}", f"run.name={name}", f"data.source=text:{text}", f"model.layers={s['layers']}",
            f"model.heads={s['heads']}", f"model.embd={s['embd']}", f"model.block={s['block']}", "model.dropout=0",
            "model.vocab=256", f"data.micro_batch={s['batch']}", f"train.accum={accum}", f"train.steps={steps}",
            "train.warmup_steps=5", "train.eval_every=0", "train.log_every=5", "train.answer_samples=0",
            "precision.mode=fp32", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"] + SIDES[side]
    cmd = [frugal, "train", "-q", "--overwrite"]
    for x in sets:
        cmd += ["--set", x]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"muon_step: {name} exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
    summ = json.load(open(os.path.join(work, name, "summary.json")))
    lines = [json.loads(x) for x in open(os.path.join(work, name, "metrics.jsonl")) if '"event":"step"' in x]
    windows = step_windows_ms(os.path.join(work, name))
    return {"step_ms": median(windows), "window_ms": [round(w, 2) for w in windows],
            "optimizer_ms": 1e3 * median([x["optimizer_s"] for x in lines[1:]]),
            "tokens_per_step": summ["tokens"] // summ["steps"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None)
    ap.add_argument("--accums", default="1,2,4")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    shape = "quick" if a.quick else "mid"
    if a.quick:
        a.accums, a.steps, a.repeats = "1,2", 15, 1
    try:
        accums = [int(x) for x in a.accums.split(",")]
    except ValueError:
        die(f"muon_step: --accums '{a.accums}': expected comma-separated whole numbers, e.g. 1,2,4")
    if not accums or min(accums) < 1 or a.steps < 15 or a.repeats < 1:
        die("muon_step: --accums must be at least 1 each, --steps at least 15 (three log windows of 5), --repeats "
            "at least 1")
    frugal = frugal_binary(a.frugal)
    t_start = time.time()
    common = common_fields("muon_step", a.quick, a.repeats)
    text = os.path.join(ROOT, "bench", "out", "english.txt")
    corpus(text, 2_700_000)
    runs = []
    with tempfile.TemporaryDirectory(prefix="frugal-muon-step-") as work:
        for r in range(a.repeats):
            for accum in accums:
                for side in SIDES:
                    one = dict(step_ms(frugal, work, text, shape, side, accum, a.steps), side=side, accum=accum,
                               round=r + 1)
                    runs.append(one)
                    print(f"  round {r + 1} accum {accum} {side}: {one['step_ms']:.0f} ms/step "
                          f"(optimizer {one['optimizer_ms']:.1f} ms)", file=sys.stderr, flush=True)
    table = []
    for accum in accums:
        row = {"accum": accum}
        for side in SIDES:
            mine = [x for x in runs if x["accum"] == accum and x["side"] == side]
            row[side] = {"median_step_ms": median([x["step_ms"] for x in mine]),
                         "median_optimizer_ms": median([x["optimizer_ms"] for x in mine]),
                         "tokens_per_step": mine[0]["tokens_per_step"]}
        row["step_time_ratio_muon_over_adamw"] = row["muon"]["median_step_ms"] / row["fused_adamw"]["median_step_ms"]
        table.append(row)
    out = {"shape": SHAPES[shape], "steps": a.steps, "newton_schulz": newton_schulz_dtype(), "sides": SIDES,
           "table": table, "runs": runs, "targets": {"step_time_ratio_muon_over_adamw": 1.10}}
    path = save_result(results_dir(quick=a.quick), common, out, t_start)
    print(f"\n{'accum':>5} {'tokens/step':>12} {'AdamW ms':>9} {'Muon ms':>9} {'Muon/AdamW':>11}")
    for row in table:
        print(f"{row['accum']:>5} {row['muon']['tokens_per_step']:>12,} {row['fused_adamw']['median_step_ms']:>9.0f} "
              f"{row['muon']['median_step_ms']:>9.0f} {row['step_time_ratio_muon_over_adamw']:>10.2f}x")
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
