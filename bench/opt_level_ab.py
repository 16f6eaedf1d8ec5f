#!/usr/bin/env python3
"""What the build's optimisation levels cost at run time (docs/build.md, "Build time"): two frugal
binaries of the same tree, side by side, in alternating rounds on the same machine. Binary A is
the default build (-O2; -O1 for the cold folders; the CPU kernels and the fused AdamW loop -O3);
binary B is built with CMAKE_CXX_FLAGS_RELEASE="-DNDEBUG -O3" (everything -O3, as before).

Two workloads that run frugal's own C++ the most on the CPU:
  train    `frugal train examples/demo.toml` (what `make demo` trains): tokens/s from summary.json
  prepare  `frugal prepare` of a generated text file with the byte tokenizer and exact dedup
           (tokenising, hashing, shard writing): seconds from start to exit

Writes bench/results/<date>/opt_level_ab.json (every round and the medians) and prints the ratios.

  .venv/bin/python bench/opt_level_ab.py --b /tmp/o3/frugal [--a build/frugal] [--rounds 3]
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import ROOT, common_fields, frugal_binary, median, results_dir, run, save_result, shown  # noqa: E402

DEMO = os.path.join(ROOT, "examples", "demo.toml")


def make_text(path, mb, seed=0):
    """About `mb` MB of documents separated by blank lines, one in ten a repeat (for dedup)."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    docs, size = [], 0
    while size < mb * 1_000_000:
        doc = rng.choice(docs) if docs and rng.random() < 0.1 else " ".join(rng.choices(words, k=rng.randint(50, 400)))
        docs.append(doc)
        size += len(doc) + 2
    with open(path, "w") as f:
        f.write("\n\n".join(docs))


def train_round(frugal, work):
    out = tempfile.mkdtemp(dir=work)
    run([frugal, "train", DEMO, "--quiet", "--set", f"run.out_dir={out}"], "opt_level_ab")
    with open(os.path.join(out, "demo", "summary.json")) as f:
        s = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    return s["tokens_per_s"]


def prepare_round(frugal, work, text):
    out = os.path.join(work, "shards")
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    run([frugal, "prepare", text, "--out", out, "--dedup", "exact"], "opt_level_ab")
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default=None, help="binary A, the default build (default build/frugal)")
    ap.add_argument("--b", required=True, help="binary B, built with CMAKE_CXX_FLAGS_RELEASE=\"-DNDEBUG -O3\"")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each workload per binary (medians)")
    ap.add_argument("--text-mb", type=int, default=100, help="size of the generated text for prepare")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    bins = {"A": frugal_binary(a.a), "B": os.path.abspath(a.b)}
    t0 = time.time()
    common = common_fields("opt_level_ab", False, a.rounds)
    work = tempfile.mkdtemp(prefix="frugal-opt-ab-")
    rounds = {"train_tokens_per_s": {"A": [], "B": []}, "prepare_s": {"A": [], "B": []}}
    try:
        text = os.path.join(work, "text.txt")
        make_text(text, a.text_mb)
        for r in range(a.rounds):  # A then B, then B then A: neither always runs first
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for k in order:
                rounds["train_tokens_per_s"][k].append(train_round(bins[k], work))
            for k in order:
                rounds["prepare_s"][k].append(prepare_round(bins[k], work, text))
            print(f"round {r + 1}: " + json.dumps({w: {k: v[-1] for k, v in d.items()} for w, d in rounds.items()}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {w: {k: median(v) for k, v in d.items()} for w, d in rounds.items()}
    out = {
        "a": {"binary": shown(bins["A"]), "flags": "the default: -O2; -O1 for src/cli, src/search, src/tune, "
                                                  "src/monitor; -O3 for the CPU kernels and the fused AdamW loop"},
        "b": {"binary": shown(bins["B"]), "flags": "CMAKE_CXX_FLAGS_RELEASE=\"-DNDEBUG -O3\": every file -O3"},
        "text_mb": a.text_mb, "rounds": rounds, "medians": med,
        # > 1: A is faster (more tokens/s, fewer seconds)
        "a_over_b_train_tokens_per_s": med["train_tokens_per_s"]["A"] / med["train_tokens_per_s"]["B"],
        "b_over_a_prepare_s": med["prepare_s"]["B"] / med["prepare_s"]["A"],
        # The same ratios round by round (A and B ran next to each other), then their median: on shared
        # cores whose speed drifts between rounds, the steadier figure.
        "a_over_b_train_paired_median": median([x / y for x, y in zip(rounds["train_tokens_per_s"]["A"],
                                                                      rounds["train_tokens_per_s"]["B"])]),
        "b_over_a_prepare_paired_median": median([y / x for x, y in zip(rounds["prepare_s"]["A"],
                                                                        rounds["prepare_s"]["B"])]),
    }
    path = save_result(a.results or results_dir(), common, out, t0)
    print(f"train: A {med['train_tokens_per_s']['A']:,.0f} tok/s, B {med['train_tokens_per_s']['B']:,.0f} tok/s "
          f"(A/B {out['a_over_b_train_tokens_per_s']:.3f}; round by round {out['a_over_b_train_paired_median']:.3f})")
    print(f"prepare {a.text_mb} MB: A {med['prepare_s']['A']:.2f} s, B {med['prepare_s']['B']:.2f} s "
          f"(B/A {out['b_over_a_prepare_s']:.3f}; round by round {out['b_over_a_prepare_paired_median']:.3f}; "
          f"> 1: A is faster)")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
