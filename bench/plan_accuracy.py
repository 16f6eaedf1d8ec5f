#!/usr/bin/env python3
"""How close `frugal plan` comes to the run it projects, on this machine.

For each shape, --repeats times: one `frugal plan` process projects the run (its probe on this
machine, priced as the price table's cpu-2vcpu row), then one `frugal train` process trains it,
timed from outside from its launch to its exit (the billed time of a machine rented for the run).
Each row holds the projected low / central / high, the measured time and cost, the error of the
central estimate in per cent, whether the measurement fell inside the range, the probe's own time,
and the trainer's share (summary.json's startup_s + wall_s) beside its projection.

Shapes: "demo" is examples/demo.toml as shipped (600 steps, an evaluation every 150, 200 answer
samples at the end); "mid" is the same data with a 4 x 4 x 256 GPT, block 128, micro-batch 16,
300 steps, an evaluation every 100 and a checkpoint every 150 steps.

Writes bench/results/<date>/plan_accuracy.json and prints a table. Run it under the machine's
CPU lock:

  flock /tmp/frugal-cpu.lock nice -n 5 .venv/bin/python bench/plan_accuracy.py [--frugal build/frugal]
      [--repeats 3] [--shapes demo,mid] [--date YYYY-MM-DD]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import ROOT, die, physical_cores, results_dir, source_revision  # noqa: E402

PRICE = ["--set", "budget.instance=cpu-2vcpu"]
SHAPES = {
    "demo": [],
    "mid": ["--set", "model.embd=256", "--set", "model.block=128", "--set", "data.micro_batch=16",
            "--set", "train.steps=300", "--set", "train.eval_every=100", "--set", "checkpoint.every_steps=150"],
}


def run(cmd):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        die(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}", 1)
    return wall


def one(frugal, shape, repeat, out_dir):
    sets = [os.path.join(ROOT, "examples", "demo.toml"), "--set", f"run.out_dir={out_dir}",
            "--set", f"run.name={shape}-{repeat}"] + PRICE + SHAPES[shape]
    plan_json = os.path.join(out_dir, f"plan-{shape}-{repeat}.json")
    plan_wall = run([frugal, "plan"] + sets + ["--json-out", plan_json])
    measured = run([frugal, "train"] + sets + ["--quiet"])
    with open(plan_json) as f:
        plan = json.load(f)
    with open(os.path.join(out_dir, f"{shape}-{repeat}", "summary.json")) as f:
        summary = json.load(f)
    s, usd = plan["seconds"], plan["on_demand"]["usd"]
    price = plan["on_demand"]["usd_per_hour"]
    trainer = summary["startup_s"] + summary["wall_s"]
    return {
        "shape": shape, "repeat": repeat, "steps": plan["steps"],
        "projected_s": s, "measured_s": measured,
        "error_pct": 100 * (s["central"] - measured) / measured,
        "within_range": s["low"] <= measured <= s["high"],
        "projected_usd": usd, "measured_usd": measured / 3600 * price,
        "probe_s": plan["figures"]["probe_s"], "plan_process_s": plan_wall,
        "launch_s": plan["figures"]["launch_s"], "probe_spread_pct": 100 * plan["terms"]["probe_spread"],
        "trainer_projected_s": plan["trainer_seconds"], "trainer_measured_s": trainer,
        "trainer_error_pct": 100 * (plan["trainer_seconds"]["central"] - trainer) / trainer,
        "terms": plan["terms"],
    }


def summarise(rows):
    out = {}
    for shape in sorted({r["shape"] for r in rows}):
        mine = [r for r in rows if r["shape"] == shape]
        errs = [abs(r["error_pct"]) for r in mine]
        widths = [100 * (r["projected_s"]["high"] - r["projected_s"]["low"]) / 2 / r["projected_s"]["central"] for r in mine]
        out[shape] = {"runs": len(mine), "median_abs_error_pct": statistics.median(errs), "max_abs_error_pct": max(errs),
                      "within_range": sum(r["within_range"] for r in mine),
                      "median_half_width_pct": statistics.median(widths),
                      "median_measured_s": statistics.median(r["measured_s"] for r in mine)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shapes", default="demo,mid")
    ap.add_argument("--date", default=None)
    ap.add_argument("--quick", action="store_true",
                    help="one demo run (a smoke run of the bench), written under bench/out/quick/")
    a = ap.parse_args()
    if a.quick:
        a.repeats, a.shapes = 1, "demo"
    if not os.access(a.frugal, os.X_OK):
        die(f"{a.frugal} is not an executable; build it first (make build)")
    shapes = a.shapes.split(",")
    for s in shapes:
        if s not in SHAPES:
            die(f"unknown shape {s}; known: {', '.join(SHAPES)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="frugal-plan-bench-") as out_dir:
        for repeat in range(1, a.repeats + 1):
            for shape in shapes:
                r = one(a.frugal, shape, repeat, out_dir)
                rows.append(r)
                p = r["projected_s"]
                print(f"{shape:<5} #{repeat}: projected {p['central']:7.1f} s ({p['low']:.1f}-{p['high']:.1f}), "
                      f"measured {r['measured_s']:7.1f} s, error {r['error_pct']:+5.1f}%, "
                      f"{'inside' if r['within_range'] else 'OUTSIDE'} the range; probe {r['probe_s']:.1f} s",
                      flush=True)
    result = {"bench": "plan_accuracy", "date": a.date or time.strftime("%Y-%m-%d"), "quick": a.quick,
              "machine": {"physical_cores": physical_cores(), "cpus": os.cpu_count()},
              "source": source_revision(), "price": "cpu-2vcpu ($0.08/h on demand)",
              "shapes": {k: " ".join(v) or "examples/demo.toml as shipped" for k, v in SHAPES.items() if k in shapes},
              "rows": rows, "summary": summarise(rows)}
    folder = results_dir(a.date, quick=a.quick)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "plan_accuracy.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    for shape, s in result["summary"].items():
        print(f"{shape}: {s['within_range']}/{s['runs']} inside the range; central error median "
              f"{s['median_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}%; range +-{s['median_half_width_pct']:.1f}%")
    print("wrote " + path)


if __name__ == "__main__":
    main()
