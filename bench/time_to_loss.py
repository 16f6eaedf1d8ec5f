#!/usr/bin/env python3
"""Tokens and wall time to a target validation loss: AdamW with the cosine schedule against Muon
with warmup-stable-decay (train.optimizer = "muon", train.schedule = "wsd"), each at the best of
a small learning-rate sweep, on English text (bench/english_text.py, byte-level), for the "mid"
shape of the compute bench (4 layers x 4 heads x 256, block 128, micro-batch 16) and a wider one
(4 x 8 x 512), over --seeds seeds; "mid-accum2" is mid at train.accum = 2.

Every run is one `frugal train` with train.target_loss: it stops at the first evaluation (every
--eval-every steps) whose validation loss is at or below the target, and summary.json's
to_target gives the tokens and the billed wall time it took; a run that has not reached it after
--max-steps steps counts as "not reached". Each side's learning rate is picked on the first seed
(the fewest tokens to target, then the lowest final validation loss), and every seed then runs
at it. The step time of each run (the median over its log windows after the first, evaluations
left out; see step_windows_ms) shows what Muon's Newton-Schulz iterations cost; the runs of the two sides alternate,
so a drift in the machine's speed hits both alike.

Writes bench/results/<date>/time_to_loss.json and prints a table.

  .venv/bin/python bench/time_to_loss.py [--frugal build/frugal] [--shapes mid,wide] [--seeds 1,2,3]
        [--target 2.0] [--max-steps 1200] [--eval-every 25]
        [--adamw-lrs 1e-3,3e-3] [--muon-lrs 1e-3,3e-3]
  .venv/bin/python bench/time_to_loss.py --shapes wide --merge   # adds a shape to today's file (else the newest earlier day's)
  .venv/bin/python bench/time_to_loss.py --quick   # a tiny shape, a few steps: a smoke run
                                                   # (bench/out/quick/<date>/)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_common import ROOT, common_fields, die, frugal_binary, median, results_dir, run, save_result, venv_python

SHAPES = {
    "mid": dict(layers=4, heads=4, embd=256, block=128, batch=16),
    "wide": dict(layers=4, heads=8, embd=512, block=128, batch=16),
    # mid at two micro-batches a step (train.accum = 2): twice the tokens a step, the same
    # Newton-Schulz work; run it with half mid's --max-steps, --eval-every and --warmup.
    "mid-accum2": dict(layers=4, heads=4, embd=256, block=128, batch=16, accum=2),
    "quick": dict(layers=1, heads=2, embd=32, block=32, batch=8),
}
SIDES = {
    "adamw_cosine": ["train.optimizer=fused_adamw", "train.schedule=cosine"],
    "muon_wsd": ["train.optimizer=muon", "train.schedule=wsd"],
}


def corpus(path, nbytes):
    if not os.path.exists(path):
        run([venv_python(), os.path.join(ROOT, "bench", "english_text.py"), "--out", path, "--bytes", str(nbytes)],
            "english_text")
    return json.load(open(path + ".json"))


def newton_schulz_dtype():
    """What train.muon_precision = "auto" picks on this CPU: bf16 where it multiplies bf16 natively."""
    try:
        flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
    except OSError:
        flags = []
    return "bf16" if "avx512_bf16" in flags or "amx_bf16" in flags else "fp32"


STEP_TIME = "median log window after the first"  # by_shape's "step_time": how step_ms was taken


def step_windows_ms(run_dir):
    """A run's step time in each log window between two step lines of metrics.jsonl (so not in the
    one up to the first line, which holds the warm-up step, the allocations and the thread
    start-up): the window's wall time less its evaluations and saves, per step (the windows
    `frugal plan --from` reads)."""
    lines = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl")) if '"event":"step"' in x]
    if len(lines) < 3:
        die(f"time_to_loss: {run_dir} logged {len(lines)} step lines; a step time needs three", 1)
    return [1e3 * (b["elapsed_s"] - a["elapsed_s"] - b.get("eval_s", 0) - b.get("checkpoint_s", 0)) /
            (b["step"] - a["step"]) for a, b in zip(lines, lines[1:])]


def merge_source(quick):
    """The results --merge adds to: today's time_to_loss.json, else the newest earlier day's."""
    today = os.path.join(results_dir(quick=quick), "time_to_loss.json")
    if os.path.exists(today):
        return today
    base = os.path.dirname(results_dir(quick=quick))
    days = sorted(d for d in os.listdir(base) if os.path.exists(os.path.join(base, d, "time_to_loss.json"))) \
        if os.path.isdir(base) else []
    return os.path.join(base, days[-1], "time_to_loss.json") if days else None


def train_once(frugal, work, text, shape, side, lr, seed, a):
    """One run to the target; returns its figures."""
    s = SHAPES[shape]
    name = f"{shape}-{side}-lr{lr:g}-s{seed}"
    sets = [f"run.out_dir={work}", f"run.name={name}", f"run.seed={seed}", f"data.source=text:{text}",
            f"model.layers={s['layers']}", f"model.heads={s['heads']}", f"model.embd={s['embd']}",
            f"model.block={s['block']}", "model.dropout=0", "model.vocab=256", f"data.micro_batch={s['batch']}", f"train.accum={s.get('accum', 1)}",
            f"train.steps={a.max_steps}", f"train.warmup_steps={a.warmup}", f"train.eval_every={a.eval_every}",
            "train.eval_batches=8", "train.log_every=25", "train.answer_samples=0", "precision.mode=fp32",
            "checkpoint.every_steps=0", "checkpoint.every_minutes=0", f"train.lr={lr}",
            f"train.target_loss={a.target}"] + SIDES[side]
    cmd = [frugal, "train", "-q", "--overwrite"]
    for x in sets:
        cmd += ["--set", x]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        die(f"time_to_loss: {name} exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
    summ = json.load(open(os.path.join(work, name, "summary.json")))
    t = summ.get("to_target", {})
    # The mean over all steps (the summary's phases) carries the warm-up step, which weighs more on
    # the side that stops sooner; the median log window after the first does not.
    mean_ms = sum(summ.get(k, 0) for k in ("data_ms_per_step", "forward_ms_per_step", "backward_ms_per_step",
                                           "optimizer_ms_per_step"))
    return {"shape": shape, "side": side, "lr": lr, "seed": seed, "reached": bool(t.get("reached")),
            "steps": summ["steps"], "tokens_to_target": t.get("tokens"), "wall_s_to_target": t.get("wall_s"),
            "final_val_loss": summ.get("final_val_loss"), "step_ms": median(step_windows_ms(os.path.join(work, name))),
            "mean_step_ms_with_warmup": mean_ms,
            "optimizer_ms_per_step": summ.get("optimizer_ms_per_step"), "process_wall_s": round(wall, 2)}


def rank_key(r):
    return (0 if r["reached"] else 1, r["tokens_to_target"] or 0, r["final_val_loss"] or 1e9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None)
    ap.add_argument("--shapes", default="mid,wide")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--target", type=float, default=2.0, help="validation loss to reach (nats per byte)")
    ap.add_argument("--max-steps", type=int, default=1200)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--adamw-lrs", default="1e-3,3e-3")
    ap.add_argument("--muon-lrs", default="1e-3,3e-3")
    ap.add_argument("--bytes", type=int, default=2_700_000, help="corpus size")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other shapes' rows and runs of today's time_to_loss.json (else the newest earlier day's) (each shape's command "
                         "and source revision are kept in by_shape)")
    a = ap.parse_args()
    if a.quick:
        a.shapes, a.seeds, a.max_steps, a.warmup, a.eval_every, a.target = "quick", "1", 60, 5, 10, 3.0
        a.adamw_lrs, a.muon_lrs = "3e-3", "3e-3"
    frugal = frugal_binary(a.frugal)
    seeds = [int(x) for x in a.seeds.split(",")]
    lrs = {"adamw_cosine": [float(x) for x in a.adamw_lrs.split(",")],
           "muon_wsd": [float(x) for x in a.muon_lrs.split(",")]}
    old_path = merge_source(a.quick) if a.merge else None
    old = json.load(open(old_path)) if old_path else None
    if old and old["target_loss"] != a.target:  # checked before the runs, not after
        die(f"time_to_loss: --merge: {old_path} has target {old['target_loss']}; this pass {a.target} (the rows of "
            f"one table share their target)")
    t_start = time.time()
    common = common_fields("time_to_loss", a.quick, len(seeds))  # the machine and source as the runs start
    text = os.path.join(ROOT, "bench", "out", "english.txt")
    corpus_facts = corpus(text, a.bytes)
    runs, best = [], {}
    with tempfile.TemporaryDirectory(prefix="frugal-ttl-") as work:
        for shape in a.shapes.split(","):
            if shape not in SHAPES:
                die(f"time_to_loss: --shapes: '{shape}' is not one of {', '.join(SHAPES)}")
            # The sweep, on the first seed: the sides alternate, learning rate by learning rate.
            sweep = {side: [] for side in SIDES}
            for i in range(max(len(v) for v in lrs.values())):
                for side in SIDES:
                    if i < len(lrs[side]):
                        r = train_once(frugal, work, text, shape, side, lrs[side][i], seeds[0], a)
                        r["phase"] = "sweep"
                        sweep[side].append(r)
                        runs.append(r)
                        print(f"  {shape} {side} lr {r['lr']:g} seed {seeds[0]}: "
                              f"{'reached' if r['reached'] else 'not reached'} at step {r['steps']}, "
                              f"{r['step_ms']:.0f} ms/step", flush=True)
            for side in SIDES:
                best[(shape, side)] = min(sweep[side], key=rank_key)
            for seed in seeds[1:]:
                for side in SIDES:
                    r = train_once(frugal, work, text, shape, side, best[(shape, side)]["lr"], seed, a)
                    r["phase"] = "seeds"
                    runs.append(r)
                    print(f"  {shape} {side} lr {r['lr']:g} seed {seed}: "
                          f"{'reached' if r['reached'] else 'not reached'} at step {r['steps']}", flush=True)
    table = []
    for shape in a.shapes.split(","):
        row = {"shape": shape}
        for side in SIDES:
            lr = best[(shape, side)]["lr"]
            mine = [r for r in runs if r["shape"] == shape and r["side"] == side and r["lr"] == lr]
            reached = [r for r in mine if r["reached"]]
            row[side] = {"lr": lr, "seeds": len(mine), "reached": len(reached),
                         "median_tokens_to_target": median([r["tokens_to_target"] for r in reached]) if reached else None,
                         "median_wall_s_to_target": median([r["wall_s_to_target"] for r in reached]) if reached else None,
                         "median_step_ms": median([r["step_ms"] for r in mine])}
        a_, m_ = row["adamw_cosine"], row["muon_wsd"]
        row["token_ratio_adamw_over_muon"] = (a_["median_tokens_to_target"] / m_["median_tokens_to_target"]
                                              if a_["median_tokens_to_target"] and m_["median_tokens_to_target"] else None)
        row["step_time_ratio_muon_over_adamw"] = m_["median_step_ms"] / a_["median_step_ms"]
        table.append(row)
    mine = a.shapes.split(",")
    by_shape = {k: {"command": common["command"], "source": common["source"], "date": common["date"],
                    "learning_rates": lrs, "max_steps": a.max_steps, "bench_seconds": round(time.time() - t_start, 1),
                    "newton_schulz": newton_schulz_dtype(), "step_time": STEP_TIME, "eval_every": a.eval_every,
                    "warmup_steps": a.warmup}
                for k in mine}
    shapes = {k: SHAPES[k] for k in mine}
    if old:
        print(f"time_to_loss: --merge: keeping the other shapes of {os.path.relpath(old_path, ROOT)}")
        keep = [r for r in old["table"] if r["shape"] not in mine]
        table = keep + table
        runs = [r for r in old["runs"] if r["shape"] not in mine] + runs
        for r in keep:
            shapes[r["shape"]] = old["shapes"][r["shape"]]
            by_shape[r["shape"]] = old.get("by_shape", {}).get(r["shape"]) or {
                "command": old["command"], "source": old["source"], "date": old["date"],
                "learning_rates": old["learning_rates"], "max_steps": old["max_steps"],
                "bench_seconds": old["bench_seconds"]}
            # Each shape keeps its own cadence (a pass may evaluate at another one).
            by_shape[r["shape"]].setdefault("eval_every", old["eval_every"])
            by_shape[r["shape"]].setdefault("warmup_steps", old["warmup_steps"])
    out = {"target_loss": a.target, "max_steps": a.max_steps, "eval_every": a.eval_every, "warmup_steps": a.warmup,
           "corpus": corpus_facts, "shapes": shapes, "sides": SIDES,
           "learning_rates": lrs, "by_shape": by_shape, "table": table, "runs": runs,
           "targets": {"token_ratio_adamw_over_muon": 1.25, "step_time_ratio_muon_over_adamw": 1.10}}
    path = save_result(results_dir(quick=a.quick), common, out, t_start)
    print(f"\n{'shape':<6} {'side':<14} {'lr':>7} {'reached':>8} {'tokens to target':>17} {'wall s':>8} {'ms/step':>8}")
    for row in table:
        for side in SIDES:
            r = row[side]
            tok = f"{r['median_tokens_to_target']:,.0f}" if r["median_tokens_to_target"] else "-"
            wall = f"{r['median_wall_s_to_target']:.0f}" if r["median_wall_s_to_target"] else "-"
            print(f"{row['shape']:<6} {side:<14} {r['lr']:>7g} {r['reached']:>3}/{r['seeds']:<4} {tok:>17} {wall:>8} "
                  f"{r['median_step_ms']:>8.0f}")
        ratio = row["token_ratio_adamw_over_muon"]
        print(f"{row['shape']:<6} tokens AdamW / Muon: {ratio:.2f}x" if ratio else f"{row['shape']:<6} tokens ratio: -",
              f"; step time Muon / AdamW: {row['step_time_ratio_muon_over_adamw']:.2f}x")
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
