#!/usr/bin/env python3
"""The threads lever (docs/levers.md, "threads"): the demo GPT's tokens/s with one intra-op
thread, with one per physical core under OpenMP's default wait policy (idle workers spin a while
before they sleep: what a LibTorch program gets when nobody sets OMP_WAIT_POLICY), and with one
per physical core under the passive policy (what frugal sets for ranks that share a machine;
alone, frugal keeps OpenMP's default, the faster of the two here).

The settings run alternately (--rounds rounds, A B C A B C ...) on generated addition problems
(the demo's data, as a text file), fp32 pinned so that precision "auto" does not decide per run;
throughput is the median over the steps after the 3rd of the wall time between steps
(metrics.jsonl, compute_levers.run_frugal), and the table gives each setting's median over the
rounds. The default-policy runs set FRUGAL_NO_REEXEC=1 with OMP_WAIT_POLICY unset, which keeps
frugal from re-executing itself with another policy.

Writes bench/results/<date>/threads.json and prints a table.

  .venv/bin/python bench/threads_bench.py [--frugal build/frugal] [--rounds 3] [--steps 30] [--quick]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import (alternate, common_fields, environment, frugal_binary, median, physical_cores,  # noqa: E402
                          results_dir, save_result, shown)
from compute_levers import SHAPES, SKIP, make_arith_text, model_sets, run_frugal  # noqa: E402


def settings(cores):
    """(label, threads, environment changes) of each setting; None removes a variable."""
    rows = [("1 thread", 1, {"OMP_WAIT_POLICY": "PASSIVE"})]
    if cores > 1:
        rows += [(f"{cores} threads, default OpenMP wait policy (workers spin before sleeping)", cores,
                  {"OMP_WAIT_POLICY": None, "FRUGAL_NO_REEXEC": "1"}),
                 (f"{cores} threads, passive OpenMP workers (what frugal sets for ranks that share a machine)", cores,
                  {"OMP_WAIT_POLICY": "PASSIVE"})]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None, help="the frugal binary (default build/frugal)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run (3 untimed ones come first)")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 8 steps (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps = 2, 8
    frugal = frugal_binary(a.frugal)
    t0 = time.time()
    common = common_fields("threads", a.quick, a.rounds)
    work = tempfile.mkdtemp(prefix="frugal-threads-")
    try:
        text = os.path.join(work, "arith.txt")
        make_arith_text(text)
        m = SHAPES["demo"]
        sets = [f"data.source=text:{text}", "precision.mode=fp32", f"train.steps={a.steps + SKIP}"] + model_sets(m)
        rows = settings(physical_cores())

        def side(threads, changes):
            return lambda: run_frugal(frugal, work, sets + [f"run.threads={threads}"], m["batch"] * m["block"],
                                      env=environment(changes))
        res = alternate(a.rounds, [side(t, ch) for _, t, ch in rows])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"model": m, "data": "arith", "precision": "fp32", "steps_timed": a.steps, "settings": []}
    for (label, threads, changes), runs in zip(rows, res):
        rates = [r[0] for r in runs]
        out["settings"].append({"label": label, "threads": threads,
                                "environment": {k: v for k, v in changes.items()},
                                "tokens_per_s": median(rates), "runs": rates})
    by = {s["label"]: s["tokens_per_s"] for s in out["settings"]}
    if len(rows) == 3:
        out["passive_over_default_policy"] = by[rows[2][0]] / by[rows[1][0]]
        out["passive_over_one_thread"] = by[rows[2][0]] / by[rows[0][0]]
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    w = max(len(s["label"]) for s in out["settings"])
    print("setting".ljust(w) + "  tokens/s (median; runs)")
    for s in out["settings"]:
        print(s["label"].ljust(w) + f"  {s['tokens_per_s']:,.0f} ({', '.join(f'{x:,.0f}' for x in s['runs'])})")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
