#!/usr/bin/env python3
"""Loader and prepare benchmark (docs/levers.md, "data loading"):

  1. build/loader_bench (bench/loader_bench.cpp): record shard against small files, raw bytes
     and finished training batches, page cache warm, alternating rounds; the first epoch from
     disk with the page cache dropped before each (only as root: it writes
     /proc/sys/vm/drop_caches, which empties the page cache of the whole machine); `frugal
     prepare --format images` and the text tokenizers (bytes, SentencePiece) at 1 and 2 threads;
  2. frugal's training batches from the shard against a PyTorch DataLoader over the same small
     files (bench/torch_loader_baseline.py: map-style Dataset, 2 workers), one epoch each,
     alternately for --rounds rounds;
  3. the demo GPT on token shards (`frugal prepare` of two licence texts) for --train-steps
     steps in fp32 and in bf16: the fraction of step time the trainer waited for data.

Writes bench/results/<date>/loader.json and prints a summary.

  .venv/bin/python bench/loader_bench.py [--build build] [--rounds 5] [--records 20000]
      [--images 2000] [--train-steps 200] [--quick]
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
from bench_common import (ROOT, common_fields, die, median, results_dir, run, save_result,  # noqa: E402
                          shown, venv_python)

LICENCES = ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]


def shard_vs_torch(build, work, records, rounds):
    """frugal's batches from the shard and the PyTorch DataLoader, one epoch each per round."""
    fr, pt, version = [], [], None
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    for _ in range(rounds):
        p = run([os.path.join(build, "loader_bench"), work, "--source-shard-only", "--records", str(records),
                 "--rounds", "1"], "loader_bench")
        fr += json.loads(p.stdout)["source_shard_samples_per_s"]
        p = run([venv_python(), os.path.join(HERE, "torch_loader_baseline.py"), work, "--epochs", "1"],
                "loader_bench", env=env)
        j = json.loads(p.stdout.strip().splitlines()[-1])
        pt += j["torch_dataloader_small_files_samples_per_s"]
        version = j["torch_version"]
    return {"frugal_source_shard_samples_per_s": fr, "torch_dataloader_small_files_samples_per_s": pt,
            "frugal_source_shard_samples_per_s_median": median(fr),
            "torch_dataloader_small_files_samples_per_s_median": median(pt),
            "shard_vs_torch_dataloader": median(fr) / median(pt),
            "shard_vs_torch_dataloader_per_round": [a / b for a, b in zip(fr, pt)], "torch_version": version}


def data_wait(build, work, steps):
    frugal = os.path.join(build, "frugal")
    shards = os.path.join(work, "text_shards")
    run([frugal, "prepare"] + LICENCES + ["--out", shards, "--quiet"], "loader_bench")
    out = {"data": "frugal prepare of " + " and ".join(os.path.basename(x) for x in LICENCES) + " (byte tokens)",
           "steps": steps}
    for p in ("fp32", "bf16"):
        runs = os.path.join(work, "runs")
        run([frugal, "train", os.path.join(ROOT, "examples", "demo.toml"), "--set", f"data.source=shards:{shards}",
             "--set", f"train.steps={steps}", "--set", f"run.out_dir={runs}", "--set", f"run.name={p}",
             "--set", f"precision.mode={p}", "--quiet"], "loader_bench")
        with open(os.path.join(runs, p, "summary.json")) as f:
            s = json.load(f)
        out[p] = {"data_wait_fraction": s["data_wait_fraction"], "tokens_per_s": s["tokens_per_s"],
                  "data_ms_per_step": s.get("data_ms_per_step")}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder (loader_bench, frugal)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    ap.add_argument("--records", type=int, default=20000, help="image records in the loader comparison")
    ap.add_argument("--images", type=int, default=2000, help="JPEGs for the image prepare rows")
    ap.add_argument("--train-steps", type=int, default=200, help="steps of the data-wait runs")
    ap.add_argument("--quick", action="store_true", help="2 rounds, 2560 records, 200 images, 20 steps")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.records, a.images, a.train_steps = 2, 2560, 200, 20
    for b in ("loader_bench", "frugal"):
        if not os.access(os.path.join(a.build, b), os.X_OK):
            die(f"loader_bench: {a.build}/{b} is missing; build it (cmake --build build --target loader_bench frugal)")
    t0 = time.time()
    common = common_fields("loader", a.quick, a.rounds)
    common["root"] = os.geteuid() == 0
    work = tempfile.mkdtemp(prefix="frugal-loader-")
    try:
        p = run([os.path.join(a.build, "loader_bench"), work, "--records", str(a.records), "--rounds", str(a.rounds),
                 "--images", str(a.images)], "loader_bench")
        out = {"loader_bench": json.loads(p.stdout)}
        out["torch"] = shard_vs_torch(a.build, work, a.records, a.rounds)
        out["data_wait"] = data_wait(a.build, work, a.train_steps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    c, t, d = out["loader_bench"], out["torch"], out["data_wait"]
    print(f"{c['records']} records, medians of {a.rounds} alternating rounds (samples/s)")
    for k in ("raw_shard", "raw_files", "source_shard", "source_files"):
        print(f"  {k:13} {c[k + '_samples_per_s_median']:>12,.0f}")
    print(f"  torch DataLoader over the small files {t['torch_dataloader_small_files_samples_per_s_median']:,.0f}; "
          f"frugal's batches from the shard {t['frugal_source_shard_samples_per_s_median']:,.0f} "
          f"({t['shard_vs_torch_dataloader']:.1f}x)")
    if "cold_raw_shard_samples_per_s_median" in c:
        print(f"  cold: shard {c['cold_raw_shard_samples_per_s_median']:,.0f}, files "
              f"{c['cold_raw_files_samples_per_s_median']:,.0f} ({c['cold_raw_shard_vs_small_files']:.1f}x)")
    else:
        print(f"  cold: {c.get('cold')}")
    for p in ("fp32", "bf16"):
        print(f"  data wait, demo on shards, {p}: {100 * d[p]['data_wait_fraction']:.2f}% of step time "
              f"({d[p]['tokens_per_s']:,.0f} tok/s)")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
