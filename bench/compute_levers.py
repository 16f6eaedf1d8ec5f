#!/usr/bin/python3
"""Benchmark of the compute levers (issue: mixed precision, accumulation, activation
checkpointing, fused AdamW) and of frugal against an idiomatic PyTorch loop (peer_gpt.py).

Every comparison runs its two sides alternately, several times, in one invocation on this
machine (its effective core count drifts), and reports medians of per-step throughput.
Writes bench/out/compute_levers.json and prints a table. Usage:

    bench/compute_levers.py [--frugal build/frugal] [--repeats 3] [--quick]
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"  # Debian's interpreter with torch 1.13


def make_text(path, lines=200_000):
    r = random.Random(1)
    with open(path, "w") as f:
        for _ in range(lines):
            a, b = r.randrange(100), r.randrange(100)
            f.write(f"{a}+{b}={a + b}\n")


def run_frugal(frugal, out_dir, sets, skip=3):
    """Runs frugal train; returns (median per-step tokens/s, summary)."""
    args = [frugal, "train", "--quiet", "--overwrite", "--set", f"run.out_dir={out_dir}",
            "--set", "train.log_every=1", "--set", "train.eval_every=0",
            "--set", "train.eval_batches=1", "--set", "train.answer_samples=0"]
    for s in sets:
        args += ["--set", s]
    faults0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults0
    rates, opt_s = [], []
    with open(os.path.join(out_dir, "demo", "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["event"] == "step" and j["step"] > skip:
                rates.append(j["tokens_per_s"])
                opt_s.append(j["optimizer_s"])
    with open(os.path.join(out_dir, "demo", "summary.json")) as f:
        summary = json.load(f)
    summary["minor_page_faults"] = faults
    summary["optimizer_ms_median"] = 1e3 * statistics.median(opt_s)
    summary["step_ms_median"] = 1e3 * statistics.median(
        [summary["tokens"] / summary["steps"] / r for r in rates])
    return statistics.median(rates), summary


# glibc malloc settings equivalent to frugal's [memory] reuse_freed (mallopt in-process there),
# for the peer run that shows how much of the gap they explain.
REUSE_FREED_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647"}


def run_peer(text, precision, threads, model, steps, extra_env=None):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", **(extra_env or {}))
    args = [PY, os.path.join(HERE, "peer_gpt.py"), "--text", text, "--precision", precision,
            "--threads", str(threads), "--steps", str(steps), "--layers", str(model["layers"]),
            "--heads", str(model["heads"]), "--embd", str(model["embd"]),
            "--block", str(model["block"]), "--batch", str(model["batch"])]
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s_median"]


def model_sets(m):
    return [f"model.layers={m['layers']}", f"model.heads={m['heads']}", f"model.embd={m['embd']}",
            f"model.block={m['block']}", f"data.micro_batch={m['batch']}"]


def alternate(repeats, fns):
    """Runs each fn in turn, `repeats` rounds; returns lists of results per fn."""
    res = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            res[i].append(fn())
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run of the bench)")
    a = ap.parse_args()
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="frugal-bench-")
    text = os.path.join(work, "arith.txt")
    make_text(text)
    steps = 12 if a.quick else 30
    demo = dict(layers=4, heads=4, embd=128, block=64, batch=32)
    wide = dict(layers=4, heads=8, embd=512, block=64, batch=32)
    deep = dict(layers=12, heads=4, embd=256, block=128, batch=16)
    src = [f"data.source=text:{text}"]
    t_start = time.time()
    rows, result = [], {"date": time.strftime("%Y-%m-%d"), "repeats": a.repeats}

    doctor = json.loads(subprocess.run([a.frugal, "doctor", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    result["machine"] = {k: doctor[k] for k in ("cpu", "logical_cpus", "matmul_fp32_gflops",
                                                "matmul_bf16_gflops", "bf16_speedup", "torch_version")}

    def fr(model, extra, n=steps):
        return lambda: run_frugal(a.frugal, work, src + model_sets(model) + [f"train.steps={n}"] + extra)

    # 1. bf16 vs fp32, demo and wide.
    for name, model, n in (("demo", demo, steps), ("wide", wide, max(8, steps // 3))):
        f32, b16 = alternate(a.repeats, [fr(model, ["precision.mode=fp32"], n), fr(model, ["precision.mode=bf16"], n)])
        r32 = statistics.median(x[0] for x in f32)
        r16 = statistics.median(x[0] for x in b16)
        fpt = f32[0][1]["flops_per_token"]
        result[f"precision_{name}"] = {
            "fp32_tokens_per_s": r32, "bf16_tokens_per_s": r16, "speedup": r16 / r32,
            "mfu_fp32": r32 * fpt / (doctor["matmul_fp32_gflops"] * 1e9),
            "mfu_bf16": r16 * fpt / (doctor["matmul_bf16_gflops"] * 1e9)}
        rows.append((f"bf16 vs fp32 ({name}, embd {model['embd']})", f"{r32:,.0f} -> {r16:,.0f} tok/s",
                     f"{r16 / r32:.2f}x"))

    # 2. Activation checkpointing on a deep model: peak tensor memory and step time, in fp32 on
    #    both sides (precision "auto" decides per run from a timing, and bf16 keeps other tensors).
    def ckpt(mode):
        return fr(deep, ["precision.mode=fp32", f"memory.activation_checkpointing={mode}"], max(6, steps // 4))
    none, blocks = alternate(max(2, a.repeats - 1), [ckpt("none"), ckpt("blocks")])
    m0 = statistics.median(x[1]["peak_tensor_mb"] for x in none)
    m1 = statistics.median(x[1]["peak_tensor_mb"] for x in blocks)
    s0 = statistics.median(x[1]["step_ms_median"] for x in none)
    s1 = statistics.median(x[1]["step_ms_median"] for x in blocks)
    result["activation_checkpointing"] = {"peak_tensor_mb_none": m0, "peak_tensor_mb_blocks": m1,
                                          "memory_saved": 1 - m1 / m0, "step_ms_none": s0,
                                          "step_ms_blocks": s1, "time_overhead": s1 / s0 - 1}
    rows.append(("activation checkpointing (12 layers)", f"{m0:,.0f} -> {m1:,.0f} MB peak",
                 f"-{100 * (1 - m1 / m0):.0f}% memory, +{100 * (s1 / s0 - 1):.0f}% time"))

    # 3. Fused AdamW vs torch::optim::AdamW: the optimizer step alone on the wide model's
    #    parameters (12.7M), bench/optimizer_bench.cpp (alternating rounds, medians), with the
    #    trainer's 2 threads.
    ob = os.path.join(os.path.dirname(a.frugal), "optimizer_bench")
    opt = json.loads(subprocess.run([ob, "--layers", str(wide["layers"]), "--embd", str(wide["embd"]),
                                     "--block", str(wide["block"]), "--rounds", str(max(3, a.repeats + 2))],
                                    check=True, capture_output=True, text=True,
                                    env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE")).stdout)
    of, ot = opt["fused_adamw_ms_per_step_median"], opt["torch_adamw_ms_per_step_median"]
    result["fused_adamw"] = {"optimizer_ms_fused": of, "optimizer_ms_torch": ot, "speedup": ot / of,
                             "params": opt["params"], "fused_gb_per_s": opt["fused_gb_per_s"]}
    rows.append(("fused AdamW vs torch AdamW (optimizer step, 12.7M params)", f"{ot:.1f} -> {of:.1f} ms", f"{ot / of:.2f}x"))

    # 4. Peer: frugal vs an idiomatic PyTorch loop, same model/data/batch/precision. The peer
    #    gets its fastest thread count (measured) and the same passive OpenMP wait policy.
    for prec in ("fp32", "bf16"):
        cal = {t: run_peer(text, prec, t, demo, 15) for t in (1, 2)}
        best_t = max(cal, key=cal.get)
        fw, py, pyr = alternate(a.repeats, [fr(demo, [f"precision.mode={prec}"]),
                                           lambda: run_peer(text, prec, best_t, demo, steps),
                                           lambda: run_peer(text, prec, best_t, demo, steps, REUSE_FREED_ENV)])
        rf = statistics.median(x[0] for x in fw)
        rp = statistics.median(py)
        rr = statistics.median(pyr)
        result[f"peer_{prec}"] = {"frugal_tokens_per_s": rf, "pytorch_tokens_per_s": rp,
                                  "ratio": rf / rp, "pytorch_threads": best_t,
                                  "pytorch_reuse_freed_tokens_per_s": rr, "ratio_vs_reuse_freed": rf / rr,
                                  "frugal_runs": [x[0] for x in fw], "pytorch_runs": py,
                                  "pytorch_reuse_freed_runs": pyr}
        rows.append((f"frugal vs PyTorch loop ({prec}, demo)", f"{rp:,.0f} -> {rf:,.0f} tok/s", f"{rf / rp:.2f}x"))
        rows.append((f"  the same, peer given frugal's malloc settings", f"{rr:,.0f} -> {rf:,.0f} tok/s", f"{rf / rr:.2f}x"))

    # 5. [memory] reuse_freed: page faults (a count) and throughput, demo fp32, on vs off.
    on, off = alternate(a.repeats, [fr(demo, ["precision.mode=fp32", "memory.reuse_freed=true"]),
                                    fr(demo, ["precision.mode=fp32", "memory.reuse_freed=false"])])
    pf_on = statistics.median(x[1]["minor_page_faults"] for x in on)
    pf_off = statistics.median(x[1]["minor_page_faults"] for x in off)
    t_on = statistics.median(x[0] for x in on)
    t_off = statistics.median(x[0] for x in off)
    result["reuse_freed"] = {"page_faults_on": pf_on, "page_faults_off": pf_off, "tokens_per_s_on": t_on,
                             "tokens_per_s_off": t_off, "speedup": t_on / t_off}
    rows.append(("memory.reuse_freed (demo, fp32; page faults per run)", f"{pf_off:,.0f} -> {pf_on:,.0f} faults",
                 f"{t_on / t_off:.2f}x tok/s"))

    result["bench_seconds"] = time.time() - t_start
    with open(os.path.join(out_dir, "compute_levers.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    w = max(len(r[0]) for r in rows)
    print("\n" + "lever".ljust(w) + "  measured".ljust(32) + "  effect")
    for r in rows:
        print(r[0].ljust(w) + "  " + r[1].ljust(30) + "  " + r[2])


if __name__ == "__main__":
    sys.exit(main())
