#!/usr/bin/env python3
"""LoRA and DoRA against a full fine-tune (docs/lora.md), on a Llama-family shape 1,024 wide (4
layers, 8 heads of 128, 2 key/value heads, SwiGLU 2,752, block 128, an untied head, micro-batch 4
of English bytes), bf16 compute. (At bench/llama_bench.py's 256-wide shape a rank-16 adapter over a
256 x 256 projection is 16 x 512 / 65,536 = 12.5% of it: no such run can hold under 5% of a full
one's state, whatever the implementation. At 1,024 wide it is 3.1%; at Llama 3 8B's 4,096, 0.8%.)

A base model is trained from scratch on the English text (bench/english_text.py) and exported as a
Hugging Face directory; then, from it, at the same micro-batch and settings, in alternating rounds:
a full fine-tune, LoRA r=16 alpha=32 over every projection (a bf16 base, the default), DoRA the
same, and QLoRA (LoRA over an NF4 base, lora.base_dtype = nf4), each --steps steps with a checkpoint
at the end. Per side: the median step time (the wall
time between consecutive steps after the 3rd, metrics.jsonl's elapsed_s), the trainable parameters,
the optimizer's state and the gradients' bytes (fp32 each, from summary.json's optimizer_state_mb
and trainable_params), the bytes of the checkpoint's files, the bytes of the weights the adapted
products hold (summary.json's lora.base_mb, with NF4's scales), the peak of live tensor bytes and the
validation loss at the end (the same tokens for every side). Targets (the LoRA issue): optimizer +
gradient bytes <= 5% of the full run's, checkpoint bytes <= 5%, step time <= 0.8x; QLoRA's base
weights <= 0.3x the bf16 base's.

Writes bench/results/<YYYY-MM-DD>/lora.json; bench/render_tables.py turns it into docs/lora.md's
table.

  .venv/bin/python bench/lora_bench.py [--frugal build/frugal] [--repeats 3] [--steps 40] [--quick]
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
from bench_common import ROOT, alternate, die, machine_facts, results_dir, source_revision, venv_python  # noqa: E402
from llama_bench import frugal_sets  # noqa: E402

PY = venv_python()
SKIP = 3
SHAPE = dict(layers=4, heads=8, kv_heads=2, embd=1024, mlp=2752, block=128, batch=4)
TARGETS = {"optimizer_and_grad_share": 0.05, "checkpoint_share": 0.05, "step_time_ratio": 0.8}
BASE_TARGET = 0.3  # QLoRA's base weights against the bf16 base's
SIDES = {"full": [], "lora": ["lora.rank=16", "lora.alpha=32"],
         "dora": ["lora.rank=16", "lora.alpha=32", "lora.dora=true"],
         "qlora": ["lora.rank=16", "lora.alpha=32", "lora.base_dtype=nf4"]}


def train(frugal, work, name, sets):
    out = tempfile.mkdtemp(prefix=name + "-", dir=work)
    args = [frugal, "train", "--quiet", "--set", f"run.out_dir={out}", "--set", f"run.name={name}"]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if p.returncode != 0:
        die(f"lora_bench: `{' '.join(args)}` exited {p.returncode}:\n{p.stderr[-2000:]}", 1)
    return os.path.join(out, name)


def measure(run_dir):
    elapsed = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j.get("event") == "step":
                elapsed[j["step"]] = j["elapsed_s"]
    step_s = [elapsed[s] - elapsed[s - 1] for s in sorted(elapsed) if s > SKIP and s - 1 in elapsed]
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    ckpts = [os.path.join(run_dir, "checkpoints", d) for d in os.listdir(os.path.join(run_dir, "checkpoints"))
             if os.path.isfile(os.path.join(run_dir, "checkpoints", d, "state.json"))]
    newest = max(ckpts)
    ckpt_bytes = sum(os.path.getsize(os.path.join(newest, f)) for f in os.listdir(newest))
    return {"step_ms": 1e3 * statistics.median(step_s), "trainable_params": s["trainable_params"],
            "params": s["params"], "optimizer_state_mb": s["optimizer_state_mb"],
            "grad_mb": 4 * s["trainable_params"] / 1e6, "checkpoint_bytes": ckpt_bytes,
            "peak_tensor_mb": s.get("peak_tensor_mb"), "final_val_loss": s.get("final_val_loss"),
            "base_mb": s.get("lora", {}).get("base_mb"), "base_mb_bf16": s.get("lora", {}).get("base_mb_bf16"),
            "model": s["model"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--base-steps", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run of the bench)")
    ap.add_argument("--results", default=None)
    a = ap.parse_args()
    if a.quick:
        a.steps, a.base_steps, a.repeats = 8, 20, 1
    date = time.strftime("%Y-%m-%d")
    res_dir = a.results or results_dir(date, a.quick)
    os.makedirs(res_dir, exist_ok=True)
    text = os.path.join(ROOT, "bench", "out", "english.txt")
    os.makedirs(os.path.dirname(text), exist_ok=True)
    p = subprocess.run([PY, os.path.join(HERE, "english_text.py"), "--out", text], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"lora_bench: bench/english_text.py failed:\n{p.stderr[-2000:]}", 1)
    work = tempfile.mkdtemp(prefix="frugal-lora-bench-")
    t0 = time.time()
    common = frugal_sets(SHAPE) + [f"data.source=text:{text}", "precision.mode=bf16", "train.log_every=1",
                                   "train.eval_every=0", "train.eval_batches=8", "train.answer_samples=0"]
    base_run = train(a.frugal, work, "base", common + [f"train.steps={a.base_steps}", "checkpoint.enabled=false"])
    base = os.path.join(work, "base-hf")
    subprocess.run([a.frugal, "export", base_run, "--out", base], check=True, capture_output=True)
    tune = common + [f"model.init_from=hf:{base}", f"train.steps={a.steps}", "train.lr=1e-3", "train.warmup_steps=5",
                     "run.seed=7", f"checkpoint.every_steps={a.steps}", "checkpoint.enabled=true"]
    fns = [lambda n=name, x=extra: measure(train(a.frugal, work, n, tune + x)) for name, extra in SIDES.items()]
    runs = dict(zip(SIDES, alternate(a.repeats, fns)))
    out = {"bench": "lora", "date": date, "quick": a.quick, "repeats": a.repeats, "source": source_revision(),
           "command": " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
           "machine_facts": machine_facts(), "model": SHAPE, "vocab": 256, "precision": "bf16", "steps": a.steps,
           "base_steps": a.base_steps, "sides": {}}
    for side, rs in runs.items():
        first = rs[0]
        out["sides"][side] = dict(first, step_ms=statistics.median(r["step_ms"] for r in rs),
                                  step_ms_runs=[r["step_ms"] for r in rs])
    full = out["sides"]["full"]
    for side in ("lora", "dora", "qlora"):
        s = out["sides"][side]
        s["optimizer_and_grad_share"] = (s["optimizer_state_mb"] + s["grad_mb"]) / (full["optimizer_state_mb"] +
                                                                                   full["grad_mb"])
        s["checkpoint_share"] = s["checkpoint_bytes"] / full["checkpoint_bytes"]
        s["step_time_ratio_rounds"] = [x / y for x, y in zip(s["step_ms_runs"], full["step_ms_runs"])]
        s["step_time_ratio"] = statistics.median(s["step_time_ratio_rounds"])
        s["targets_met"] = {k: s[k] <= v for k, v in TARGETS.items()}
    q = out["sides"]["qlora"]
    q["base_share"] = q["base_mb"] / out["sides"]["lora"]["base_mb"]
    q["targets_met"]["base_share"] = q["base_share"] <= BASE_TARGET
    out["targets"] = dict(TARGETS, base_share=BASE_TARGET)
    out["machine_end_loadavg_1_5_15"] = list(os.getloadavg())
    with open(os.path.join(res_dir, "lora.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"lora_bench: {time.time() - t0:.0f} s; results in {res_dir}/lora.json")
    for side, s in out["sides"].items():
        extra = "" if side == "full" else (f"  opt+grad {s['optimizer_and_grad_share']:.1%}, checkpoint "
                                           f"{s['checkpoint_share']:.1%}, step {s['step_time_ratio']:.2f}x, base "
                                           f"{s['base_mb']:.1f} MB")
        print(f"  {side:5} {s['step_ms']:7.1f} ms/step  trainable {s['trainable_params']:>9,}  val loss "
              f"{s['final_val_loss']:.4f}{extra}")


if __name__ == "__main__":
    main()
