#!/usr/bin/env python3
"""`frugal tune` on the demo config (docs/tuning.md): the tune with a short probe and the time
bound lifted (tune.max_fraction = 1: every candidate, every round, the loss check), and the same
command with the default bound, each once. Keeps each run's JSON report (`--json-out`) and its
console table, so the page shows the table exactly as the command printed it.

Writes bench/results/<date>/tune_demo.json and prints both tables.

  .venv/bin/python bench/tune_demo.py [--frugal build/frugal] [--instance cpu-2vcpu] [--quick]
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
from bench_common import ROOT, common_fields, frugal_binary, results_dir, run, save_result, shown  # noqa: E402

DEMO = os.path.join(ROOT, "examples", "demo.toml")


def tune(frugal, work, name, sets):
    report, tuned = os.path.join(work, name + ".json"), os.path.join(work, name + ".toml")
    args = [frugal, "tune", DEMO, "--out", tuned, "--json-out", report]
    for s in sets:
        args += ["--set", s]
    p = run(args, "tune_demo")
    with open(report) as f:
        rep = json.load(f)
    # The table as the command prints it, without the progress lines of each candidate
    # ("tune: ...") and the last line, which names the temporary file the config went to.
    console = [ln for ln in p.stdout.rstrip("\n").splitlines() if not ln.startswith(("wrote ", "tune: "))]
    shown_args = ["frugal", "tune", shown(DEMO)] + [x for s in sets for x in ("--set", s)]
    return {"command": " ".join(shown_args), "sets": sets, "report": rep, "console": "\n".join(console)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=None, help="the frugal binary (default build/frugal)")
    ap.add_argument("--instance", default="cpu-2vcpu", help="budget.instance for the $ and CO2 columns")
    ap.add_argument("--quick", action="store_true", help="1 probe step, 1 round (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    frugal = frugal_binary(a.frugal)
    t0 = time.time()
    common = common_fields("tune_demo", a.quick, None)
    probe = ["tune.probe_steps=1", "tune.rounds=1", "tune.loss_check_steps=4"] if a.quick else ["tune.probe_steps=3"]
    base = probe + [f"budget.instance={a.instance}"]
    work = tempfile.mkdtemp(prefix="frugal-tune-")
    try:
        out = {"unbounded": tune(frugal, work, "unbounded", probe + ["tune.max_fraction=1", f"budget.instance={a.instance}"]),
               "default_bound": tune(frugal, work, "default_bound", base)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    for k, v in out.items():
        print(f"$ {v['command']}\n{v['console']}\n")
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
