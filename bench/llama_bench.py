#!/usr/bin/env python3
"""frugal's Llama family against transformers' own LlamaForCausalLM (bench/peer_llama.py), eager
and under torch.compile, from the wheel frugal is built against, on this CPU.

Speed rows, per dtype (fp32, bf16): the "llama_mid" shape, 4 layers x 256 wide, 4 heads, 2
key/value heads, SwiGLU 688, block 128, an untied head, micro-batch 16 of byte tokens of the 2.7 MB
English text (bench/english_text.py), the same optimizer settings and schedule on every side. As in
bench/compute_levers.py: each side (frugal, eager, compile) first runs short calibrations at 1..
physical-cores threads and keeps its fastest count; then the sides alternate --repeats times, and
frugal's ratio to each peer is the median of the rounds' ratios. Throughput: the wall time between
the ends of consecutive steps, the median over the steps after the 3rd (frugal: metrics.jsonl's
elapsed_s, logged every step). Targets (the Llama issue): fp32 >= 1.0x the best PyTorch side, bf16
>= 1.3x eager.

Memory row: the same shape with Llama 3's 128,256-entry vocabulary (its logits for a micro-batch of
2,048 tokens are 1.05 GB in fp32): the peak resident memory (ru_maxrss) of a training process,
frugal (its chunked head + cross-entropy) against transformers eager, fp32, a few steps,
alternating; frugal's own peak of live tensor bytes beside it.

Writes bench/results/<YYYY-MM-DD>/llama_speed_fp32.json, llama_speed_bf16.json and
llama_memory.json; bench/render_tables.py turns them into docs/model.md's table.

  .venv/bin/python bench/llama_bench.py [--frugal build/frugal] [--repeats 3] [--quick]
      [--only speed,memory] [--dtypes fp32,bf16] [--no-compile]
"""
import argparse
import json
import os
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
from compute_levers import SKIP, run_frugal  # noqa: E402

PY = venv_python()
SHAPE = dict(layers=4, heads=4, kv_heads=2, embd=256, mlp=688, block=128, batch=16)
TARGET_FP32_VS_BEST = 1.0
TARGET_BF16_VS_EAGER = 1.3
MEMORY_VOCAB = 128256


def frugal_sets(m, vocab=256):
    return ["model.arch=llama", f"model.layers={m['layers']}", f"model.heads={m['heads']}",
            f"model.kv_heads={m['kv_heads']}", f"model.embd={m['embd']}", f"model.mlp_width={m['mlp']}",
            f"model.block={m['block']}", f"model.vocab={vocab}", "model.tie_embeddings=false", "model.norm_eps=1e-5",
            f"data.micro_batch={m['batch']}"]


def run_peer(text, dtype, threads, steps, compile_=False, vocab=256, warmup=SKIP):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    m = SHAPE
    args = [PY, os.path.join(HERE, "peer_llama.py"), "--text", text, "--dtype", dtype, "--threads", str(threads),
            "--steps", str(steps), "--warmup", str(warmup), "--layers", str(m["layers"]), "--heads", str(m["heads"]),
            "--kv-heads", str(m["kv_heads"]), "--embd", str(m["embd"]), "--mlp", str(m["mlp"]),
            "--block", str(m["block"]), "--batch", str(m["batch"]), "--vocab", str(vocab)]
    if compile_:
        args.append("--compile")
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        die(f"llama_bench: `{' '.join(args)}` exited {p.returncode}:\n{p.stderr[-3000:]}", 1)
    return json.loads(p.stdout.strip().splitlines()[-1])


def speed_row(a, frugal, work, text, dtype, steps, cal_steps, cores):
    tokens = SHAPE["batch"] * SHAPE["block"]

    def fr(t, n):
        sets = [f"data.source=text:{text}", f"precision.mode={dtype}", f"run.threads={t}",
                f"train.steps={n + SKIP}"] + frugal_sets(SHAPE)
        return run_frugal(frugal, work, sets, tokens)

    sides = {"frugal": fr, "eager": lambda t, n: run_peer(text, dtype, t, n)}
    if not a.no_compile:
        sides["compile"] = lambda t, n: run_peer(text, dtype, t, n, compile_=True)
    calibration, best = {}, {}
    for side, fn in sides.items():
        calibration[side] = {}
        for t in range(1, cores + 1):
            r = fn(t, cal_steps)
            calibration[side][t] = r[0] if side == "frugal" else r["tokens_per_s_median"]
        best[side] = max(calibration[side], key=calibration[side].get)
    runs = alternate(a.repeats, [lambda s=side: sides[s](best[s], steps) for side in sides])
    rf = [x[0] for x in runs[0]]
    obj = {"shape": "llama_mid", "model": SHAPE, "vocab": 256, "data": "english", "dtype": dtype,
           "steps_timed": steps, "threads_tried": list(range(1, cores + 1)), "calibration_tokens_per_s": calibration,
           "threads": best, "torch": runs[1][0]["torch"], "transformers": runs[1][0]["transformers"],
           "frugal_tokens_per_s": statistics.median(rf), "frugal_runs": rf,
           "frugal_step_ms": [x[1]["step_ms"] for x in runs[0]],
           "frugal_params": runs[0][0][1]["params"], "peer_params": runs[1][0]["params"],
           "flops_per_token": runs[0][0][1]["flops_per_token"]}
    for i, side in enumerate(sides):
        if side == "frugal":
            continue
        r = [x["tokens_per_s_median"] for x in runs[i]]
        obj[f"{side}_tokens_per_s"] = statistics.median(r)
        obj[f"{side}_runs"] = r
        obj[f"{side}_step_ms"] = [x["step_ms"] for x in runs[i]]
        obj[f"ratio_vs_{side}_rounds"] = [f / e for f, e in zip(rf, r)]
        obj[f"ratio_vs_{side}"] = statistics.median(obj[f"ratio_vs_{side}_rounds"])
        if side == "compile":
            obj["compile_s"] = [x["compile_s"] for x in runs[i]]
    peers = [s for s in sides if s != "frugal"]
    best_peer = max(peers, key=lambda s: obj[f"{s}_tokens_per_s"])
    obj["best_pytorch_side"] = best_peer
    obj["ratio_vs_best_pytorch"] = obj[f"ratio_vs_{best_peer}"]
    obj["targets"] = {"fp32_vs_best_pytorch": TARGET_FP32_VS_BEST, "bf16_vs_eager": TARGET_BF16_VS_EAGER}
    if dtype == "fp32":
        obj["targets"]["met"] = obj["ratio_vs_best_pytorch"] >= TARGET_FP32_VS_BEST
    else:
        obj["targets"]["met"] = obj["ratio_vs_eager"] >= TARGET_BF16_VS_EAGER
    return obj


def memory_row(a, frugal, work, text, steps):
    tokens = SHAPE["batch"] * SHAPE["block"]

    def fr():
        sets = [f"data.source=text:{text}", "precision.mode=fp32", f"train.steps={steps}"] + frugal_sets(SHAPE,
                                                                                                    MEMORY_VOCAB)
        return run_frugal(frugal, work, sets, tokens, skip=1)[1]

    def peer():
        return run_peer(text, "fp32", physical_cores(), max(1, steps - 1), vocab=MEMORY_VOCAB, warmup=1)

    runs = alternate(max(2, a.repeats - 1), [fr, peer])
    frugal_rss = statistics.median(x["peak_rss_mb"] for x in runs[0])
    peer_rss = statistics.median(x["peak_rss_mb"] for x in runs[1])
    logits_mb = tokens * MEMORY_VOCAB * 4 / 1e6
    return {"shape": "llama_mid", "model": SHAPE, "vocab": MEMORY_VOCAB, "dtype": "fp32", "steps": steps,
            "tokens_per_micro_batch": tokens, "fp32_logits_mb": logits_mb,
            "frugal_peak_rss_mb": frugal_rss, "transformers_peak_rss_mb": peer_rss,
            "frugal_peak_rss_runs": [x["peak_rss_mb"] for x in runs[0]],
            "transformers_peak_rss_runs": [x["peak_rss_mb"] for x in runs[1]],
            "frugal_peak_tensor_mb": statistics.median(x.get("peak_tensor_mb", float("nan")) for x in runs[0]),
            "frugal_over_transformers": frugal_rss / peer_rss, "saved_mb": peer_rss - frugal_rss,
            "params": runs[0][0]["params"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run of the bench)")
    ap.add_argument("--only", default="speed,memory", help="comma-separated subset of speed, memory")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--results", default=None)
    a = ap.parse_args()
    parts = [p for p in a.only.split(",") if p]
    if not (os.path.isfile(a.frugal) and os.access(a.frugal, os.X_OK)):
        die(f"llama_bench: {a.frugal} is not an executable; build it first (make build)")
    date = time.strftime("%Y-%m-%d")
    res_dir = a.results or results_dir(date, a.quick)
    os.makedirs(res_dir, exist_ok=True)
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    text = os.path.join(out_dir, "english.txt")
    p = subprocess.run([PY, os.path.join(HERE, "english_text.py"), "--out", text], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"llama_bench: bench/english_text.py failed:\n{p.stderr[-2000:]}", 1)
    work = tempfile.mkdtemp(prefix="frugal-llama-bench-")
    steps, cal_steps = (10, 4) if a.quick else (30, 10)
    common = {"date": date, "repeats": a.repeats, "quick": a.quick, "source": source_revision(),
              "command": " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
              "machine_facts": machine_facts()}
    rows = []

    def save(name, obj):
        obj = dict({"bench": name}, **common, **obj)
        with open(os.path.join(res_dir, name + ".json"), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        return obj

    t0 = time.time()
    if "speed" in parts:
        for dtype in [d for d in a.dtypes.split(",") if d]:
            obj = save(f"llama_speed_{dtype}", speed_row(a, a.frugal, work, text, dtype, steps, cal_steps,
                                                          physical_cores()))
            for side in ("eager", "compile"):
                if f"ratio_vs_{side}" in obj:
                    rows.append((f"frugal vs transformers {side} ({dtype})",
                                 f"{obj[f'{side}_tokens_per_s']:,.0f} -> {obj['frugal_tokens_per_s']:,.0f} tok/s",
                                 f"{obj[f'ratio_vs_{side}']:.2f}x"))
    if "memory" in parts:
        obj = save("llama_memory", memory_row(a, a.frugal, work, text, 4 if a.quick else 6))
        rows.append((f"peak RSS at vocab {MEMORY_VOCAB:,} (fp32)",
                     f"{obj['transformers_peak_rss_mb']:,.0f} -> {obj['frugal_peak_rss_mb']:,.0f} MB",
                     f"{obj['frugal_over_transformers']:.2f}x"))
    shutil.rmtree(work, ignore_errors=True)
    print(f"llama_bench: {time.time() - t0:.0f} s; results in {res_dir}")
    w = max([len(r[0]) for r in rows] + [5])
    for r in rows:
        print(r[0].ljust(w) + "  " + r[1].ljust(32) + "  " + r[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
