#!/usr/bin/env python3
"""Benchmark of the compute levers (mixed precision, activation checkpointing, fused AdamW,
freed-memory reuse) and of frugal against PyTorch 2.x training loops (bench/peer_gpt.py) from
the same wheel frugal is built against: eager, and under torch.compile.

Every comparison runs its sides alternately, several times, in one invocation on this machine
(the effective core count of a shared machine drifts), and reports medians. Throughput is
measured over the same window on every side: the wall time between the ends of consecutive
steps (frugal: the differences of elapsed_s in metrics.jsonl, logged every step; the peer:
perf_counter after each step's loss.item()), the median over the steps after the 3rd.

The peer rows, per shape and dtype: each side (frugal, PyTorch eager, PyTorch compiled) first
runs short calibrations at 1..physical-cores threads and keeps its fastest count; then the three
sides alternate --repeats times, and frugal's ratio to each peer is the median of the rounds'
ratios (a round's runs follow each other, so they share the machine's state; the per-round
ratios are kept as ratio_vs_eager_rounds / ratio_vs_compile_rounds). torch.compile's compilation happens in the peer's first step,
outside the timed window; it is reported separately (compile_s). Alternating with them,
bench/matmul_floor.py times the step's matmuls alone at eager's thread count: eager's step time
over that floor is the ceiling of any loop's speed-up over eager through the same BLAS
(ceiling_vs_eager; targets.vs_eager_within_ceiling says whether the 1.3x target lies under it).

Shapes: "demo" is the demo GPT (4 layers x 4 heads x 128 wide, block 64, micro-batch 32) on
generated addition problems like builtin:arith's ("41+38=79" lines); "mid" is 4 x 4 x 256,
block 128, micro-batch 16 on a 2.7 MB English text (bench/english_text.py builds it from
Debian 12's Python documentation, licence texts and the torch wheel's docstrings); "wide"
(4 x 8 x 512) and "deep" (12 x 4 x 256) serve the precision and activation-checkpointing rows.

The machine's bf16/fp32 matmul ratio is measured in the same run, at its start and its end,
by `frugal doctor` (frugal's LibTorch) and by bench/matmul_peak.py (the same wheel from
Python); the bf16 target is judged against the doctor's median.

Writes one JSON file per benchmark to bench/results/<YYYY-MM-DD>/ (machine.json, peer_*.json,
precision_*.json, ...), the combined object to bench/out/compute_levers.json, and prints a
table; bench/render_tables.py turns the results folder into docs/levers.md's tables.

  .venv/bin/python bench/compute_levers.py [--frugal build/frugal] [--repeats 3] [--quick]
      [--only peer,precision,ckpt,adamw,reuse_freed] [--shapes demo,mid] [--dtypes fp32,bf16]
"""
import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import (ROOT, alternate, die, machine_facts, physical_cores, results_dir,  # noqa: E402
                          source_revision, venv_python)

PY = venv_python()
SKIP = 3  # untimed steps at the start of every run, on every side
ALL_PARTS = ("precision", "ckpt", "adamw", "peer", "reuse_freed")

# Targets of the platform issue: frugal against PyTorch eager and torch.compile (tokens/s ratio),
# and frugal's bf16/fp32 speed-up as a fraction of the machine's bf16/fp32 matmul ratio.
TARGET_VS_EAGER = 1.3
TARGET_VS_COMPILE = 1.0
TARGET_BF16_FRACTION = 0.9
# Below this bf16/fp32 matmul ratio (bf16 products emulated, e.g. on a CPU without AVX-512 BF16 or
# AMX), bf16 rows are skipped unless --force-bf16: every bf16 run would take minutes per step,
# and frugal's precision = "auto" trains such a machine in fp32 anyway.
BF16_USABLE_RATIO = 0.5

SHAPES = {
    "demo": dict(layers=4, heads=4, embd=128, block=64, batch=32, data="arith"),
    "mid": dict(layers=4, heads=4, embd=256, block=128, batch=16, data="english"),
    "wide": dict(layers=4, heads=8, embd=512, block=64, batch=32, data="arith"),
    "deep": dict(layers=12, heads=4, embd=256, block=128, batch=16, data="arith"),
}


def make_arith_text(path, lines=200_000):
    """Addition problems in builtin:arith's format, seeded: the demo's kind of data as a file,
    which both frugal (text:PATH) and the peer read."""
    r = random.Random(1)
    with open(path, "w") as f:
        for _ in range(lines):
            a, b = r.randrange(100), r.randrange(100)
            f.write(f"{a}+{b}={a + b}\n")


def median_step_rate(step_s, tokens_per_step):
    return tokens_per_step / statistics.median(step_s)


def run_frugal(frugal, work, sets, tokens_per_step, skip=SKIP, env=None):
    """Runs frugal train in a fresh run folder under `work` (removed afterwards), with `env` as its
    environment when given, else this environment with OMP_WAIT_POLICY=PASSIVE unless it is set:
    the policy the peers run with, so that frugal and the peers compare on equal terms (frugal
    alone keeps OpenMP's default; bench/threads_bench.py measures the two policies).
    Returns (median tokens/s over the wall time between steps, summary)."""
    if env is None:
        env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    out_dir = tempfile.mkdtemp(prefix="run-", dir=work)
    args = [frugal, "train", "--quiet", "--set", f"run.out_dir={out_dir}",
            "--set", "train.log_every=1", "--set", "train.eval_every=0",
            "--set", "train.eval_batches=1", "--set", "train.answer_samples=0"]
    for s in sets:
        args += ["--set", s]
    faults0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        die(f"compute_levers: `{' '.join(args)}` exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults0
    elapsed, compute_rates, opt_s = {}, [], []
    with open(os.path.join(out_dir, "demo", "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["event"] != "step":
                continue
            elapsed[j["step"]] = j["elapsed_s"]
            if j["step"] > skip:
                compute_rates.append(j["tokens_per_s"])
                opt_s.append(j["optimizer_s"])
    step_s = [elapsed[s] - elapsed[s - 1] for s in sorted(elapsed) if s > skip and s - 1 in elapsed]
    if not step_s:
        die(f"compute_levers: frugal logged too few steps in {out_dir} (need more than {skip})", 1)
    with open(os.path.join(out_dir, "demo", "summary.json")) as f:
        summary = json.load(f)
    summary["minor_page_faults"] = faults
    summary["optimizer_ms_median"] = 1e3 * statistics.median(opt_s)
    summary["step_ms_median"] = 1e3 * statistics.median(step_s)
    # The trainer's own per-step figure (the step alone, without the loop's work between steps).
    summary["tokens_per_s_step_only_median"] = statistics.median(compute_rates)
    summary["step_ms"] = [round(1e3 * s, 3) for s in step_s]
    shutil.rmtree(out_dir, ignore_errors=True)
    return median_step_rate(step_s, tokens_per_step), summary


# glibc malloc settings equivalent to frugal's [memory] reuse_freed (mallopt in-process there),
# for the peer run that shows how much of the gap they explain.
REUSE_FREED_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647"}


def run_peer(text, dtype, threads, model, steps, compile_=False, extra_env=None):
    """Runs bench/peer_gpt.py; returns its JSON object. The peer runs with the same passive OpenMP
    wait policy as frugal's runs here (run_frugal), and OMP_NUM_THREADS = its thread count (inductor's C++
    kernels read it)."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads), **(extra_env or {}))
    args = [PY, os.path.join(HERE, "peer_gpt.py"), "--text", text, "--dtype", dtype,
            "--threads", str(threads), "--steps", str(steps), "--warmup", str(SKIP),
            "--layers", str(model["layers"]), "--heads", str(model["heads"]), "--embd", str(model["embd"]),
            "--block", str(model["block"]), "--batch", str(model["batch"])]
    if compile_:
        args.append("--compile")
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        die(f"compute_levers: `{' '.join(args)}` exited {p.returncode}:\n{p.stderr[-3000:]}", 1)
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_floor(dtype, threads, model, steps):
    """Runs bench/matmul_floor.py (the step's matmuls alone) with the peer's environment."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    args = [PY, os.path.join(HERE, "matmul_floor.py"), "--dtype", dtype, "--threads", str(threads),
            "--steps", str(steps), "--layers", str(model["layers"]), "--heads", str(model["heads"]),
            "--embd", str(model["embd"]), "--block", str(model["block"]), "--batch", str(model["batch"])]
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        die(f"compute_levers: `{' '.join(args)}` exited {p.returncode}:\n{p.stderr[-3000:]}", 1)
    return json.loads(p.stdout.strip().splitlines()[-1])


def bf16_emulated(doc):
    """Why bf16 rows are not worth running, from `frugal doctor --json`'s figures (bench/render_tables.py
    says the same for a run that recorded no skip)."""
    return (f"bf16 matmul runs at {doc['bf16_speedup']:.3f}x fp32's speed on this CPU "
            f"(AVX-512 BF16: {doc.get('avx512_bf16')}, AMX: {doc.get('amx_bf16')}): bf16 products are emulated")


def model_sets(m):
    return [f"model.layers={m['layers']}", f"model.heads={m['heads']}", f"model.embd={m['embd']}",
            f"model.block={m['block']}", f"data.micro_batch={m['batch']}"]


def doctor(frugal):
    p = subprocess.run([frugal, "doctor", "--json", "--no-save"], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"compute_levers: `{frugal} doctor --json` exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
    return json.loads(p.stdout)


def python_matmul():
    p = subprocess.run([PY, os.path.join(HERE, "matmul_peak.py"), "--repeats", "3"], capture_output=True,
                       text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if p.returncode != 0:
        die(f"compute_levers: bench/matmul_peak.py exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"), help="the frugal binary")
    ap.add_argument("--repeats", type=int, default=3, help="alternating rounds per comparison")
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run of the bench)")
    ap.add_argument("--only", default=",".join(ALL_PARTS), help=f"comma-separated subset of {','.join(ALL_PARTS)}")
    ap.add_argument("--shapes", default="demo,mid", help="peer rows: comma-separated shapes (demo, mid, wide, deep)")
    ap.add_argument("--dtypes", default="fp32,bf16", help="peer rows: comma-separated dtypes (fp32, bf16)")
    ap.add_argument("--no-compile", action="store_true", help="peer rows without the torch.compile side")
    ap.add_argument("--force-bf16", action="store_true",
                    help=f"run the bf16 rows even where bf16 matmul is under {BF16_USABLE_RATIO}x fp32's speed")
    ap.add_argument("--results", default=None,
                    help="results folder (default bench/results/<today>; with --quick bench/out/quick/<today>)")
    a = ap.parse_args()
    parts = [p for p in a.only.split(",") if p]
    for p in parts:
        if p not in ALL_PARTS:
            ap.error(f"--only: '{p}' is not one of {', '.join(ALL_PARTS)}")
    shapes = [s for s in a.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"--shapes: '{s}' is not one of {', '.join(SHAPES)}")
    dtypes = [d for d in a.dtypes.split(",") if d]
    for d in dtypes:
        if d not in ("fp32", "bf16"):
            ap.error(f"--dtypes: '{d}' is not fp32 or bf16")
    if not (os.path.isfile(a.frugal) and os.access(a.frugal, os.X_OK)):
        die(f"compute_levers: {a.frugal} is not an executable; build it first (make build)")
    ob = os.path.join(os.path.dirname(a.frugal), "optimizer_bench")
    if "adamw" in parts and not os.access(ob, os.X_OK):
        die(f"compute_levers: {ob} is missing; build it (cmake --build build --target optimizer_bench)")

    date = time.strftime("%Y-%m-%d")
    res_dir = a.results or results_dir(date, a.quick)
    os.makedirs(res_dir, exist_ok=True)
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="frugal-bench-")
    texts = {"arith": os.path.join(work, "arith.txt"), "english": os.path.join(out_dir, "english.txt")}
    make_arith_text(texts["arith"])
    corpus = None
    if "precision" in parts or ("peer" in parts and any(SHAPES[s]["data"] == "english" for s in shapes)):
        p = subprocess.run([PY, os.path.join(HERE, "english_text.py"), "--out", texts["english"]],
                           capture_output=True, text=True)
        if p.returncode != 0:
            die(f"compute_levers: bench/english_text.py failed:\n{p.stderr[-2000:]}", 1)
        corpus = json.loads(p.stdout.strip().splitlines()[-1])
    steps = 12 if a.quick else 30  # timed steps; every run adds SKIP untimed ones first
    cal_steps = 6 if a.quick else 10
    cores = physical_cores()
    t_start = time.time()
    common = {"date": date, "repeats": a.repeats, "quick": a.quick, "source": source_revision(),
              "command": " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
              "machine_facts": machine_facts()}
    rows, combined = [], dict(common)

    def save(name, obj):
        obj = dict({"bench": name}, **common, **obj)
        combined[name] = obj
        with open(os.path.join(res_dir, name + ".json"), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        return obj

    def tokens(m):
        return m["batch"] * m["block"]

    def fr(shape, extra, n=steps):
        m = SHAPES[shape]
        src = [f"data.source=text:{texts[m['data']]}"]
        return lambda: run_frugal(a.frugal, work, src + model_sets(m) + [f"train.steps={n + SKIP}"] + extra, tokens(m))

    # The machine: frugal doctor and the wheel's matmul from Python, now and at the end.
    doc0, mm0 = doctor(a.frugal), python_matmul()
    # A machine fact, recorded whichever rows were asked for (the docs' tables say why bf16 is absent).
    bf16_skipped = None
    if doc0["bf16_speedup"] < BF16_USABLE_RATIO and not a.force_bf16:
        bf16_skipped = {"bf16_speedup": doc0["bf16_speedup"], "matmul_bf16_gflops": doc0["matmul_bf16_gflops"],
                        "matmul_fp32_gflops": doc0["matmul_fp32_gflops"], "usable_ratio": BF16_USABLE_RATIO,
                        "skipped": [f"peer_{s}_bf16" for s in shapes if "peer" in parts and "bf16" in dtypes]
                        + (["precision_demo", "precision_mid", "precision_wide"] if "precision" in parts else []),
                        "reason": bf16_emulated(doc0) + "; --force-bf16 runs them anyway"}
        if bf16_skipped["skipped"]:
            print(f"compute_levers: skipping the bf16 rows: {bf16_skipped['reason']}", file=sys.stderr)
        dtypes = [d for d in dtypes if d != "bf16"]
        parts = [p for p in parts if p != "precision"]

    # 1. bf16 vs fp32 (frugal), alternating: the demo, mid and wide shapes.
    if "precision" in parts:
        for name in ("demo", "mid", "wide"):
            if SHAPES[name]["data"] == "english" and corpus is None:
                continue
            n = steps if name != "wide" else max(8, steps // 3)
            f32, b16 = alternate(a.repeats, [fr(name, ["precision.mode=fp32"], n), fr(name, ["precision.mode=bf16"], n)])
            r32 = statistics.median(x[0] for x in f32)
            r16 = statistics.median(x[0] for x in b16)
            fpt = f32[0][1]["flops_per_token"]
            save(f"precision_{name}", {
                "shape": name, "model": SHAPES[name], "steps_timed": n,
                "fp32_tokens_per_s": r32, "bf16_tokens_per_s": r16, "speedup": r16 / r32,
                "fp32_runs": [x[0] for x in f32], "bf16_runs": [x[0] for x in b16],
                "flops_per_token": fpt, "threads": f32[0][1].get("threads"),
                # against the doctor's start figures (bench/render_tables.py: the faster of start and end)
                "mfu_fp32": r32 * fpt / (doc0["matmul_fp32_gflops"] * 1e9),
                "mfu_bf16": r16 * fpt / (doc0["matmul_bf16_gflops"] * 1e9)})
            rows.append((f"bf16 vs fp32 ({name}, embd {SHAPES[name]['embd']})", f"{r32:,.0f} -> {r16:,.0f} tok/s",
                         f"{r16 / r32:.2f}x"))

    # 2. Activation checkpointing on a deep model: peak tensor memory and step time, fp32 on
    #    both sides (precision "auto" decides per run from a timing, and bf16 keeps other tensors).
    if "ckpt" in parts:
        def ckpt(mode):
            return fr("deep", ["precision.mode=fp32", f"memory.activation_checkpointing={mode}"], max(6, steps // 4))
        none, blocks = alternate(max(2, a.repeats - 1), [ckpt("none"), ckpt("blocks")])
        m0 = statistics.median(x[1]["peak_tensor_mb"] for x in none)
        m1 = statistics.median(x[1]["peak_tensor_mb"] for x in blocks)
        s0 = statistics.median(x[1]["step_ms_median"] for x in none)
        s1 = statistics.median(x[1]["step_ms_median"] for x in blocks)
        save("activation_checkpointing", {"model": SHAPES["deep"], "peak_tensor_mb_none": m0,
                                          "peak_tensor_mb_blocks": m1, "memory_saved": 1 - m1 / m0,
                                          "step_ms_none": s0, "step_ms_blocks": s1, "time_overhead": s1 / s0 - 1})
        rows.append(("activation checkpointing (12 layers)", f"{m0:,.0f} -> {m1:,.0f} MB peak",
                     f"-{100 * (1 - m1 / m0):.0f}% memory, +{100 * (s1 / s0 - 1):.0f}% time"))

    # 3. Fused AdamW vs torch::optim::AdamW: the optimizer step alone on the wide model's
    #    parameters (12.7M), bench/optimizer_bench.cpp (alternating rounds, medians).
    if "adamw" in parts:
        wide = SHAPES["wide"]
        p = subprocess.run([ob, "--layers", str(wide["layers"]), "--embd", str(wide["embd"]), "--block",
                            str(wide["block"]), "--rounds", str(max(3, a.repeats + 2))],
                           capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
        if p.returncode != 0:
            die(f"compute_levers: {ob} exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
        opt = json.loads(p.stdout)
        of, ot = opt["fused_adamw_ms_per_step_median"], opt["torch_adamw_ms_per_step_median"]
        save("fused_adamw", {"optimizer_ms_fused": of, "optimizer_ms_torch": ot, "speedup": ot / of,
                             "params": opt["params"], "fused_gb_per_s": opt["fused_gb_per_s"]})
        rows.append((f"fused AdamW vs torch AdamW (optimizer step, {opt['params'] / 1e6:.1f}M params)",
                     f"{ot:.1f} -> {of:.1f} ms", f"{ot / of:.2f}x"))

    # 4. frugal vs PyTorch eager vs torch.compile: same model, data, batch, precision and
    #    optimizer settings; every side at its fastest thread count (1..physical cores).
    if "peer" in parts:
        for shape in shapes:
            m = SHAPES[shape]
            text = texts[m["data"]]
            for dtype in dtypes:
                sides = {
                    "frugal": lambda t, n: fr(shape, [f"precision.mode={dtype}", f"run.threads={t}"], n)(),
                    "eager": lambda t, n: run_peer(text, dtype, t, m, n),
                }
                if not a.no_compile:
                    sides["compile"] = lambda t, n: run_peer(text, dtype, t, m, n, compile_=True)
                # Calibration: short runs at each thread count; the fastest count is kept.
                calibration, best = {}, {}
                for side, fn in sides.items():
                    calibration[side] = {}
                    for t in range(1, cores + 1):
                        r = fn(t, cal_steps)
                        calibration[side][t] = r[0] if side == "frugal" else r["tokens_per_s_median"]
                    best[side] = max(calibration[side], key=calibration[side].get)
                fns = [lambda s=side: sides[s](best[s], steps) for side in sides]
                if shape == "demo":  # the eager peer once more, with frugal's malloc settings
                    fns.append(lambda: run_peer(text, dtype, best["eager"], m, steps, extra_env=REUSE_FREED_ENV))
                # The step's matmuls alone, at eager's thread count: what no loop can go below.
                fns.append(lambda: run_floor(dtype, best["eager"], m, steps))
                runs = alternate(a.repeats, fns)
                rf = [x[0] for x in runs[0]]
                re_ = [x["tokens_per_s_median"] for x in runs[1]]
                obj = {"shape": shape, "model": m, "data": m["data"], "dtype": dtype, "steps_timed": steps,
                       "threads_tried": list(range(1, cores + 1)), "calibration_tokens_per_s": calibration,
                       "threads": best, "torch": runs[1][0]["torch"],
                       "frugal_tokens_per_s": statistics.median(rf), "eager_tokens_per_s": statistics.median(re_),
                       "frugal_runs": rf, "eager_runs": re_,
                       "frugal_step_ms": [x[1]["step_ms"] for x in runs[0]],
                       "eager_step_ms": [x["step_ms"] for x in runs[1]],
                       "frugal_version": runs[0][0][1].get("frugal_version")}
                # Each round runs the sides back to back, so a round's ratio compares runs that shared
                # the machine's state; on a shared machine whose speed drifts between rounds, the
                # median of the rounds' ratios is the figure (the spread is kept beside it).
                obj["ratio_vs_eager_rounds"] = [f / e for f, e in zip(rf, re_)]
                obj["ratio_vs_eager"] = statistics.median(obj["ratio_vs_eager_rounds"])
                obj["targets"] = {"vs_eager": TARGET_VS_EAGER, "vs_eager_met": obj["ratio_vs_eager"] >= TARGET_VS_EAGER}
                i = 2
                if "compile" in sides:
                    rc = [x["tokens_per_s_median"] for x in runs[2]]
                    obj.update({"compile_tokens_per_s": statistics.median(rc), "compile_runs": rc,
                                "compile_step_ms": [x["step_ms"] for x in runs[2]],
                                "compile_s": [x["compile_s"] for x in runs[2]]})
                    obj["ratio_vs_compile_rounds"] = [f / c for f, c in zip(rf, rc)]
                    obj["ratio_vs_compile"] = statistics.median(obj["ratio_vs_compile_rounds"])
                    obj["targets"].update({"vs_compile": TARGET_VS_COMPILE,
                                           "vs_compile_met": obj["ratio_vs_compile"] >= TARGET_VS_COMPILE})
                    i = 3
                if shape == "demo":
                    rr = [x["tokens_per_s_median"] for x in runs[i]]
                    obj.update({"eager_reuse_freed_tokens_per_s": statistics.median(rr), "eager_reuse_freed_runs": rr})
                # The ceiling: eager's step over the floor bounds the speed-up of any loop that runs
                # the same matmuls (docstring of bench/matmul_floor.py).
                floor_ms = statistics.median(x["floor_ms_median"] for x in runs[-1])
                eager_ms = statistics.median(statistics.median(x["step_ms"]) for x in runs[1])
                frugal_ms = statistics.median(x[1]["step_ms_median"] for x in runs[0])
                obj.update({"matmul_floor": {"threads": best["eager"], "gemms": runs[-1][0]["gemms"],
                                             "gflop_per_step": runs[-1][0]["gflop"], "floor_ms_median": floor_ms,
                                             "floor_runs_ms": [x["floor_ms_median"] for x in runs[-1]],
                                             "eager_step_ms_median": eager_ms, "frugal_step_ms_median": frugal_ms,
                                             "eager_outside_matmuls_ms": eager_ms - floor_ms,
                                             "frugal_outside_matmuls_ms": frugal_ms - floor_ms},
                            "ceiling_vs_eager": eager_ms / floor_ms})
                obj["targets"]["vs_eager_within_ceiling"] = TARGET_VS_EAGER <= obj["ceiling_vs_eager"]
                save(f"peer_{shape}_{dtype}", obj)
                rows.append((f"frugal vs PyTorch eager ({dtype}, {shape})",
                             f"{obj['eager_tokens_per_s']:,.0f} -> {obj['frugal_tokens_per_s']:,.0f} tok/s",
                             f"{obj['ratio_vs_eager']:.2f}x (rounds {min(obj['ratio_vs_eager_rounds']):.2f}-"
                             f"{max(obj['ratio_vs_eager_rounds']):.2f}; target {TARGET_VS_EAGER}x, "
                             f"ceiling {obj['ceiling_vs_eager']:.2f}x)"))
                if "compile" in sides:
                    rows.append((f"frugal vs torch.compile ({dtype}, {shape})",
                                 f"{obj['compile_tokens_per_s']:,.0f} -> {obj['frugal_tokens_per_s']:,.0f} tok/s",
                                 f"{obj['ratio_vs_compile']:.2f}x (target {TARGET_VS_COMPILE}x)"))

    # 5. [memory] reuse_freed: page faults (a count) and throughput, demo fp32, on vs off.
    if "reuse_freed" in parts:
        on, off = alternate(a.repeats, [fr("demo", ["precision.mode=fp32", "memory.reuse_freed=true"]),
                                        fr("demo", ["precision.mode=fp32", "memory.reuse_freed=false"])])
        pf_on = statistics.median(x[1]["minor_page_faults"] for x in on)
        pf_off = statistics.median(x[1]["minor_page_faults"] for x in off)
        t_on = statistics.median(x[0] for x in on)
        t_off = statistics.median(x[0] for x in off)
        save("reuse_freed", {"page_faults_on": pf_on, "page_faults_off": pf_off, "tokens_per_s_on": t_on,
                             "tokens_per_s_off": t_off, "speedup": t_on / t_off})
        rows.append(("memory.reuse_freed (demo, fp32; page faults per run)", f"{pf_off:,.0f} -> {pf_on:,.0f} faults",
                     f"{t_on / t_off:.2f}x tok/s"))

    # The machine again, and the bf16 target: frugal's bf16/fp32 speed-up on each peer shape
    # against the measured matmul ratio (the median of the doctor's start and end figures).
    doc1, mm1 = doctor(a.frugal), python_matmul()
    keys = ("cpu", "logical_cpus", "physical_cores", "avx512_bf16", "amx_bf16", "matmul_fp32_gflops",
            "matmul_bf16_gflops", "bf16_speedup", "torch_version", "frugal_version", "blas_library")
    ratio = statistics.median([doc0["bf16_speedup"], doc1["bf16_speedup"]])
    machine = {"doctor_start": {k: doc0.get(k) for k in keys}, "doctor_end": {k: doc1.get(k) for k in keys},
               "python_matmul_start": mm0, "python_matmul_end": mm1,
               "matmul_bf16_over_fp32": ratio,
               "python_matmul_bf16_over_fp32": statistics.median([mm0["bf16_over_fp32"], mm1["bf16_over_fp32"]]),
               "physical_cores": cores, "python": PY, "corpus": corpus,
               "bench_seconds": time.time() - t_start}
    if bf16_skipped:
        machine["bf16_skipped"] = bf16_skipped
        rows.append(("bf16 rows", "skipped", f"bf16 matmul {doc0['bf16_speedup']:.3f}x fp32 here"))
    if "precision" in parts:
        bf16_target = {}
        for name in ("demo", "mid"):
            if f"precision_{name}" in combined:
                s = combined[f"precision_{name}"]["speedup"]
                bf16_target[name] = {"speedup": s, "fraction_of_matmul_ratio": s / ratio,
                                     "target_fraction": TARGET_BF16_FRACTION, "met": s / ratio >= TARGET_BF16_FRACTION}
                rows.append((f"bf16 speed-up / matmul bf16:fp32 ratio ({name})", f"{s:.2f}x / {ratio:.2f}x",
                             f"{100 * s / ratio:.0f}% (target {100 * TARGET_BF16_FRACTION:.0f}%)"))
        machine["bf16_target"] = bf16_target
    save("machine", machine)
    shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(out_dir, "compute_levers.json"), "w") as f:
        json.dump(combined, f, indent=2)
    print(json.dumps({k: v for k, v in combined.items() if k in common or k == "machine"}, indent=2))
    shown = os.path.relpath(res_dir, ROOT) if os.path.abspath(res_dir).startswith(ROOT + os.sep) else res_dir
    print(f"\nresults: {shown}/ ({', '.join(sorted(k for k in combined if k not in common))})")
    w = max([len(r[0]) for r in rows] + [5])
    print("\n" + "lever".ljust(w) + "  measured".ljust(34) + "  effect")
    for r in rows:
        print(r[0].ljust(w) + "  " + r[1].ljust(32) + "  " + r[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
