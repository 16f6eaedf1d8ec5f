#!/usr/bin/env python3
"""Dynamic batching (docs/tuning.md): naive padding against length bucketing against sequence
packing, by build/dynamic_batching_bench (bench/dynamic_batching_bench.cpp: padding fraction,
target tokens and target tokens/s of GPT training with each strategy). Each invocation of the
binary runs the three strategies in turn, so --rounds invocations are --rounds alternating
rounds; the table gives the median target tokens/s of each strategy over the rounds. Padding
fractions and token counts are exact (the same in every round; the script checks it).

Writes bench/results/<date>/dynamic_batching.json and prints a table.

  .venv/bin/python bench/dynamic_batching.py [--build build] [--rounds 3] [--quick]
      [-- dynamic_batching_bench options: --docs N --block T --rows B --jsonl FILE --field F]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import ROOT, common_fields, die, median, results_dir, run, save_result, shown  # noqa: E402

EXACT = ("batches", "positions", "padding_positions", "padding_fraction", "target_tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder holding dynamic_batching_bench")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (invocations)")
    ap.add_argument("--quick", action="store_true", help="1 round over 60 documents (a smoke run of the bench)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    ap.add_argument("bench_args", nargs="*", help="options for dynamic_batching_bench (after --)")
    a = ap.parse_args()
    binary = os.path.join(a.build, "dynamic_batching_bench")
    if not os.access(binary, os.X_OK):
        die(f"dynamic_batching: {binary} is missing; build it (cmake --build build --target dynamic_batching_bench)")
    args = list(a.bench_args)
    if a.quick:
        a.rounds = 1
        args = ["--docs", "60"] + args
    t0 = time.time()
    common = common_fields("dynamic_batching", a.quick, a.rounds)
    rounds = [json.loads(run([binary] + args, "dynamic_batching").stdout) for _ in range(a.rounds)]
    first = rounds[0]
    out = {k: first[k] for k in ("documents", "document_tokens", "block", "rows_per_batch", "threads", "model")}
    out["documents_source"] = first["source"]
    out["bench_args"] = args
    out["strategies"] = {}
    for i, r in enumerate(first["results"]):
        name = r["strategy"]
        per = [rr["results"][i] for rr in rounds]
        for k in EXACT:
            if any(p[k] != r[k] for p in per):
                die(f"dynamic_batching: {name}'s {k} differs between rounds ({[p[k] for p in per]}); "
                    "the batching is not deterministic", 1)
        out["strategies"][name] = {**{k: r[k] for k in EXACT},
                                   "target_tokens_per_s": median([p["target_tokens_per_s"] for p in per]),
                                   "target_tokens_per_s_runs": [p["target_tokens_per_s"] for p in per],
                                   "mean_loss_runs": [p["mean_loss"] for p in per]}
    s = out["strategies"]
    out["positions_pack_over_pad"] = s["pack"]["positions"] / s["pad"]["positions"]
    out["positions_bucket_over_pad"] = s["bucket"]["positions"] / s["pad"]["positions"]
    out["speedup_pack_over_pad"] = s["pack"]["target_tokens_per_s"] / s["pad"]["target_tokens_per_s"]
    out["speedup_bucket_over_pad"] = s["bucket"]["target_tokens_per_s"] / s["pad"]["target_tokens_per_s"]
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    print(f"{out['documents']} documents, {out['document_tokens']:,} tokens, block {out['block']}, "
          f"{out['rows_per_batch']} rows per batch; {out['model']}")
    for name, v in s.items():
        print(f"{name:7} batches {v['batches']:3}  padding {v['padding_fraction']:.3f}  target tokens "
              f"{v['target_tokens']:,}  {v['target_tokens_per_s']:,.0f} tok/s (median; "
              f"{', '.join(f'{x:,.0f}' for x in v['target_tokens_per_s_runs'])})")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
