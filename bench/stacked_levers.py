#!/usr/bin/env python3
"""The CPU levers stacked one at a time (the table of docs/levers.md, "the levers stacked"): each
row is the previous row plus one lever, from a PyTorch-defaults-like configuration of a GPT (the
demo shape and the mid shape of compute_levers.py) to frugal's defaults on this machine, then
activation checkpointing (memory for time):

  1. baseline: fp32, torch::optim::AdamW, glibc's malloc defaults (reuse_freed off), batches
     built inline on the trainer thread (data.workers = 0, like a DataLoader with
     num_workers = 0), OpenMP's default wait policy (which frugal keeps for a process alone on
     its machine; docs/levers.md, "threads"), one intra-op thread per physical core (LibTorch's
     default count);
  2. + fused AdamW (train.optimizer = fused_adamw);
  3. + memory.reuse_freed;
  4. + a loader thread building batches ahead (data.workers = 1, data.prefetch = 4);
  5. + bf16 autocast (precision.mode = bf16; what precision = auto picks where bf16 matmuls
     are fast);
  6. + activation checkpointing (memory.activation_checkpointing = blocks).

All rows run alternately (--rounds rounds) on token shards that `frugal prepare` makes of the
licence texts in /usr/share/common-licenses (byte tokens). Each row: tokens/s (the median over
the rounds of each run's median wall time between steps after the 3rd; metrics.jsonl), peak
tensor memory (summary.json's counting allocator, the median over the rounds), $ per 1M tokens
at the price of --instance in data/prices.toml (on-demand), and the change against the row
above. Levers that need a GPU (fp16 with dynamic loss scaling, TF32, pinned-memory copies) are
not in this CPU table.

Writes bench/results/<date>/stacked_levers.json and prints the table.

  .venv/bin/python bench/stacked_levers.py [--frugal build/frugal] [--rounds 3] [--steps 30]
      [--shapes demo,mid] [--instance cpu-2vcpu] [--quick]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import (ROOT, alternate, common_fields, die, environment, frugal_binary, median,  # noqa: E402
                          physical_cores, results_dir, run, save_result, shown)
from compute_levers import SHAPES, SKIP, model_sets, run_frugal  # noqa: E402

# (row label, lever key for the docs, --set values this row adds, environment changes it makes)
LEVERS = [
    ("baseline: fp32, torch_adamw, glibc malloc defaults, inline batches, default OpenMP waits", "baseline",
     ["precision.mode=fp32", "train.optimizer=torch_adamw", "memory.reuse_freed=false", "data.workers=0",
      "memory.activation_checkpointing=none"], {"OMP_WAIT_POLICY": None, "FRUGAL_NO_REEXEC": "1"}),
    ("+ fused AdamW", "train.optimizer = fused_adamw", ["train.optimizer=fused_adamw"], {}),
    ("+ freed memory kept for reuse", "memory.reuse_freed = true", ["memory.reuse_freed=true"], {}),
    ("+ loader thread, 4 batches ahead", "data.workers = 1, data.prefetch = 4",
     ["data.workers=1", "data.prefetch=4"], {}),
    ("+ bf16 autocast", "precision.mode = bf16", ["precision.mode=bf16"], {}),
    ("+ activation checkpointing", "memory.activation_checkpointing = blocks",
     ["memory.activation_checkpointing=blocks"], {}),
]
GPU_ONLY = ["precision.mode = fp16 with dynamic loss scaling", "precision.tf32",
            "pinned host memory and non-blocking host-to-device copies", "run.deterministic (a GPU cost)"]


def stacked():
    """Per row: (label, lever, the accumulated --set values, the accumulated environment)."""
    rows, sets, env = [], {}, {}
    for label, lever, add, changes in LEVERS:
        for s in add:
            k, _, v = s.partition("=")
            sets[k] = v
        env.update(changes)
        rows.append((label, lever, [f"{k}={v}" for k, v in sets.items()], dict(env)))
    return rows


def price(instance):
    path = os.environ.get("FRUGAL_PRICE_TABLE") or os.path.join(ROOT, "data", "prices.toml")
    with open(path, "rb") as f:
        table = tomllib.load(f)
    if instance not in table:
        die(f"stacked_levers: --instance '{instance}' is not in {path} (known: {', '.join(table)})")
    return {"instance": instance, "usd_per_hour": table[instance]["usd_per_hour"],
            "provider": table[instance].get("provider", ""), "table": shown(path)}


def measure_shape(frugal, work, shards, shape, rounds, steps):
    m = SHAPES[shape]
    base = [f"data.source=shards:{shards}", f"train.steps={steps + SKIP}", f"run.threads={physical_cores()}"]
    base += model_sets(m)
    rows = stacked()
    fns = [lambda s=sets, e=env: run_frugal(frugal, work, base + s, m["batch"] * m["block"], env=environment(e))
           for _, _, sets, env in rows]
    res = alternate(rounds, fns)
    out = []
    for (label, lever, sets, env), runs in zip(rows, res):
        out.append({"label": label, "lever": lever, "sets": sets,
                    "environment": {k: v for k, v in env.items()},
                    "tokens_per_s": median([r[0] for r in runs]), "runs": [r[0] for r in runs],
                    "peak_tensor_mb": median([r[1]["peak_tensor_mb"] for r in runs]),
                    "peak_rss_mb": median([r[1]["peak_rss_mb"] for r in runs]),
                    "precision": runs[0][1].get("precision"), "threads": runs[0][1].get("threads")})
    return {"shape": shape, "model": m, "rows": out}


def add_costs(res, usd_per_hour):
    prev = None
    for r in res["rows"]:
        r["usd_per_million_tokens"] = usd_per_hour / 3600 / r["tokens_per_s"] * 1e6
        if prev:
            r["speedup_vs_previous"] = r["tokens_per_s"] / prev["tokens_per_s"]
            r["memory_vs_previous"] = r["peak_tensor_mb"] / prev["peak_tensor_mb"] - 1
        prev = r
    first, last = res["rows"][0], res["rows"][-1]
    res["speedup_total"] = last["tokens_per_s"] / first["tokens_per_s"]
    best = max(res["rows"], key=lambda r: r["tokens_per_s"])
    res["fastest_row"] = best["label"]
    res["fastest_speedup_vs_baseline"] = best["tokens_per_s"] / first["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None, help="the frugal binary (default build/frugal)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run (3 untimed ones come first)")
    ap.add_argument("--shapes", default="demo,mid", help="comma-separated: demo, mid (compute_levers.py's shapes)")
    ap.add_argument("--instance", default="cpu-2vcpu", help="data/prices.toml entry for the $ column")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 6 steps (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    shapes = [s for s in a.shapes.split(",") if s]
    for s in shapes:
        if s not in ("demo", "mid"):
            ap.error(f"--shapes: '{s}' is not demo or mid")
    if a.quick:
        a.rounds, a.steps = 2, 6
    frugal = frugal_binary(a.frugal)
    cost = price(a.instance)
    t0 = time.time()
    common = common_fields("stacked_levers", a.quick, a.rounds)
    work = tempfile.mkdtemp(prefix="frugal-stacked-")
    try:
        shards = os.path.join(work, "shards")
        run([frugal, "prepare", "/usr/share/common-licenses", "--out", shards, "--quiet"], "stacked_levers")
        results = [measure_shape(frugal, work, shards, s, a.rounds, a.steps) for s in shapes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in results:
        add_costs(r, cost["usd_per_hour"])
    out = {"data": "shards of /usr/share/common-licenses (frugal prepare, byte tokens)", "steps_timed": a.steps,
           "price": cost, "gpu_only_levers": GPU_ONLY, "shapes": results}
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    for r in results:
        print(f"\n{r['shape']}: tokens/s (median of {a.rounds}), peak tensor MB, $ per 1M tokens at "
              f"{cost['instance']} ${cost['usd_per_hour']}/h")
        w = max(len(x["label"]) for x in r["rows"])
        for x in r["rows"]:
            ch = f"  {x['speedup_vs_previous']:.2f}x" if "speedup_vs_previous" in x else ""
            print(f"{x['label'].ljust(w)}  {x['tokens_per_s']:>8,.0f}  {x['peak_tensor_mb']:>7.1f} MB  "
                  f"${x['usd_per_million_tokens']:.4f}{ch}")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
