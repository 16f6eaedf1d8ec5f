#!/usr/bin/env python3
"""What `frugal search` saves by successive halving, measured: the compute spent by a search of
--trials trials of the demo GPT (examples/demo.toml's shape space, 3 rungs, eta 2) against running
the same trials each to the full length, and whether both pick the same winner.

Both sides are `frugal search` runs of one search file that differ only in `rungs` (3, and 1 for
the full runs): the trials are drawn from (seed, draw) alone, so both train exactly the same
configurations (docs/search.md). They run one after the other, one trial at a time. Compute is
counted in optimizer steps of all trials together (search.json compute.trial_steps), in the
trials' own training time (spent.trial_s: wall_s + startup_s of their summaries) and in the wall
time of each whole search (this script's clock, process start-ups included).

Each seed (--seeds) is one search of its own trials; the JSON has one entry per seed and the totals:
how often the two winners agree, and the compute of all halving searches against all full runs.

Writes bench/results/<date>/search.json and prints a short table.

  .venv/bin/python bench/search_bench.py [--frugal build/frugal] [--trials 8] [--steps 600] [--seeds 1,2,3]
  .venv/bin/python bench/search_bench.py --quick   # 4 trials of 120 steps, one seed: a smoke run
                                                  # (bench/out/quick/<date>/)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_common import ROOT, common_fields, die, results_dir, write_json

SPACE = """[search]
base = "{base}"
seed = {seed}
max_trials = {trials}
rungs = {rungs}
eta = 2
metric = "val_loss"

[space]
"train.lr" = {{ log_range = [1e-3, 3e-2] }}
"model.layers" = [2, 4]
"model.embd" = [64, 128]
"model.heads" = [2, 4, 8]

[train]
steps = {steps}
eval_every = {eval_every}
answer_samples = 0

[precision]
mode = "fp32"
"""


def run_search(frugal, space, out):
    t0 = time.monotonic()
    p = subprocess.run([frugal, "search", space, "--out", out, "--quiet"], capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        die(f"frugal search {space} exited {p.returncode}:\n{p.stdout}\n{p.stderr}", 1)
    with open(os.path.join(out, "search.json")) as f:
        return json.load(f), wall, p.stdout


def side(result, wall):
    best = next(t for t in result["trials"] if t["id"] == result["best"])
    return {
        "wall_s": wall,
        "trial_steps": result["compute"]["trial_steps"],
        "trial_sessions": result["compute"]["trial_sessions"],
        "trial_s": result["spent"]["trial_s"],
        "best": result["best"],
        "best_values": best["values"],
        "best_metric": best["metric"],
        "decisions": result["decisions"],
    }


def one_seed(args, seed):
    """The halving search and the full runs of one seed; returns the comparison."""
    work = tempfile.mkdtemp(prefix="frugal-search-bench-")
    try:
        spaces = {}
        for name, rungs in (("halving", 3), ("full", 1)):
            spaces[name] = os.path.join(work, f"{name}.toml")
            with open(spaces[name], "w") as f:
                f.write(SPACE.format(base=os.path.join(ROOT, "examples", "demo.toml"), seed=seed, trials=args.trials,
                                     rungs=rungs, steps=args.steps, eval_every=args.steps // 4))
        halving, h_wall, _ = run_search(args.frugal, spaces["halving"], os.path.join(work, "halving"))
        full, f_wall, _ = run_search(args.frugal, spaces["full"], os.path.join(work, "full"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    h, f = side(halving, h_wall), side(full, f_wall)
    full_rank = {t["id"]: t["rank"] for t in full["trials"]}
    full_metric = {t["id"]: t["metric"] for t in full["trials"]}
    trials = []
    for t in sorted(halving["trials"], key=lambda t: t["id"]):
        trials.append({"id": t["id"], "values": t["values"], "halving_rank": t["rank"], "halving_rung": t["rung"],
                       "halving_metric": t["metric"], "full_rank": full_rank[t["id"]],
                       "full_metric": full_metric[t["id"]]})
    return {
        "seed": seed,
        "rung_steps": halving["rung_steps"],
        "halving": h,
        "full": f,
        "agree": h["best"] == f["best"],
        "halving_best_full_rank": full_rank[h["best"]],
        "regret": full_metric[h["best"]] - f["best_metric"],
        "fraction_of_full": {"trial_steps": h["trial_steps"] / f["trial_steps"], "trial_s": h["trial_s"] / f["trial_s"],
                             "wall_s": h["wall_s"] / f["wall_s"]},
        "trials": trials,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seeds", default="1,2,3", help="one search per seed, comma-separated")
    ap.add_argument("--date", default=None, help="results folder date (default: today)")
    ap.add_argument("--quick", action="store_true", help="4 trials of 120 steps, seed 1 (a smoke run of the bench)")
    args = ap.parse_args()
    if args.quick:
        args.trials, args.steps, args.seeds = 4, 120, "1"
    if args.steps % 4:
        die("--steps must be a multiple of 4 (rungs at steps/4, steps/2, steps, each an evaluation step)")
    searches = [one_seed(args, int(s)) for s in args.seeds.split(",")]
    total = lambda side, key: sum(x[side][key] for x in searches)
    agree = sum(1 for x in searches if x["agree"])
    result = common_fields("search", args.quick, None)
    result.update({
        "what": f"{args.trials} trials of the demo GPT per seed (examples/demo.toml; space: train.lr log 1e-3..3e-2, "
                f"model.layers 2|4, model.embd 64|128, model.heads 2|4|8; fp32, {args.steps} steps), successive "
                f"halving with rungs {searches[0]['rung_steps']} and eta 2, against every trial trained to the end",
        "searches": searches,
        "agree": agree,
        "of": len(searches),
        "fraction_of_full": {k: total("halving", k) / total("full", k) for k in ("trial_steps", "trial_s", "wall_s")},
        "halving_wall_s": total("halving", "wall_s"),
        "full_wall_s": total("full", "wall_s"),
    })
    path = os.path.join(results_dir(args.date, args.quick), "search.json")
    write_json(path, result)
    print(f"{'seed':<5} {'side':<8} {'trial-steps':>12} {'trial s':>9} {'wall s':>9}  best")
    for x in searches:
        for name in ("halving", "full"):
            s = x[name]
            print(f"{x['seed']:<5} {name:<8} {s['trial_steps']:>12} {s['trial_s']:>9.1f} {s['wall_s']:>9.1f}  {s['best']} "
                  f"val_loss {s['best_metric']:.4f} {s['best_values']}")
    fr = result["fraction_of_full"]
    print(f"halving used {100 * fr['trial_steps']:.0f}% of the trial-steps, {100 * fr['trial_s']:.0f}% of the trials' "
          f"time and {100 * fr['wall_s']:.0f}% of the wall time; the winners agree in {agree} of {len(searches)} "
          f"searches (halving's picks rank {[x['halving_best_full_rank'] for x in searches]} among the full runs); "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
