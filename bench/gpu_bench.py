#!/usr/bin/env python3
"""The GPU benchmark: frugal against PyTorch eager and torch.compile (bench/peer_gpt.py, the same
wheel) on the GPT-2 124M shape (12 layers, 12 heads, 768 wide, vocabulary 50257, block 1024),
trained from llm.c-format token shards at the same micro-batch on every side.

Rows (each side's runs alternate, --repeats rounds, each round starting one side later, so no
side is always first or last; medians):
  - bf16: tokens/s and MFU of frugal (its defaults: on a GPU the output head's matmuls padded to
    a multiple of 64, model.head_multiple), PyTorch eager, torch.compile mode "default" (compile
    time apart); on a GPU, frugal on its own CUDA kernels (model.kernels = frugal; --no-kernels
    leaves it out), and on its kernels with the step replayed as a CUDA graph (train.cuda_graphs); torch.compile mode "max-autotune" with --max-autotune in every round, or, under
    a --deadline, once after the rounds when the time left covers it;
  - fp8 (sides of the bf16 row): frugal with precision.mode = fp8 (the blocks' linears in fp8,
    e4m3 forward and e5m2 gradients, everything else bf16), on ATen and on its kernels: its
    tokens/s over torch.compile's bf16 and its final loss beside frugal's bf16 (loss_parity);
    MFU against the bf16 peak, so that fp8's gain shows as a higher figure;
  - llama: frugal's Llama family (model.arch = llama) at GPT-2's depth, width, block and
    vocabulary (12 x 768, 12 heads with 4 key/value heads, SwiGLU 2048, an untied head) against
    the same model in plain PyTorch, eager and torch.compile "default" (peer_gpt.py --arch llama),
    bf16; on a GPU frugal on its kernels too (RMSNorm and SwiGLU), and with the fp8 row, frugal's
    fp8 linears. MFU from the Llama FLOPs per token;
  - head (sides of the bf16 row): frugal with model.head_multiple = 1 (the head unpadded) and
    eager with the head padded by hand (peer_gpt.py --head-multiple 64), to show the head-padding
    lever on its own;
  - fp16 with dynamic loss scaling (frugal's precision.mode = fp16, the peer's GradScaler):
    tokens/s, MFU against the fp16 matmul peak, skipped steps, final loss scale;
  - reading the loss every --sync-every steps (default 10) instead of every step, bf16: frugal
    logging every N steps (train.log_every; between log steps it does not wait for the GPU) and
    eager calling loss.item() every N steps (peer_gpt.py --sync-every), each timed over its
    windows of N steps: what a loop that logs every N steps gets from the host running ahead;
  - activation checkpointing (frugal memory.activation_checkpointing = blocks, the peer's
    torch.utils.checkpoint per block) against none: peak tensor memory and step time, bf16;
  - checkpoint stall, sync against async (checkpoint.async): the trainer's stall per save, the
    write time and bytes of a checkpoint (summary.json's "checkpoint" figures), bf16;
  - muon: frugal's step with train.optimizer = "muon" (Newton-Schulz in bf16 on the GPU) against
    its default fused AdamW, bf16: the step-time ratio the time-to-loss bench needs on a GPU;
  - offload: frugal's step with dist.offload = "optimizer" (AdamW's moments in host memory, the
    update on the CPU) against the same on the GPU, bf16: step time and peak GPU memory, the
    slowdown and the saving;
  - data wait: the fraction of step time the trainer waited for its batch (frugal's prefetching
    loader: metrics.jsonl data_wait_s; the peer builds its batch inline: data_ms).

Throughput is timed over the same window on every side: the wall time between the ends of
consecutive steps (frugal: elapsed_s differences in metrics.jsonl, logged every step; the peer:
after each step's loss.item()), the median over the steps after the warm-up. MFU = tokens/s x
FLOPs per token (frugal's formula, docs/model.md) / peak, against two peaks: this GPU's dense
matmul measured here (torch.mm 8192^3, median of repeats, bench/matmul_peak.py) and the
datasheet's dense figure where the GPU is known (H100 SXM and H200: 989 TFLOP/s bf16/fp16).

Every side trains the same seeded data and initialisation from the same learning-rate schedule,
so their final losses agree: each row records them beside frugal's ATen side ("loss_parity":
within 2% for frugal's other sides, 5% for PyTorch's, whose initialisation draws other numbers),
and a side that misses it is listed, so that a fast but wrong side shows. The peer builds all its
batches on the device before its first step (peer_gpt.py --prebuilt-batches): no side's timed
window holds batch building.

Time budget: with --deadline (a Unix time; scripts/gpu-check.sh passes its own budget's end) a
run starts only when its expected time (the last run of the same side, else a first guess by kind)
ends before the deadline; a run that would not is listed in gpu_machine.json ("skipped"). Under
a deadline each round runs frugal's and torch.compile's sides of every row first and PyTorch eager
(and the head lever's sides) last, so a short budget measures the targets' ratios before the rest. Every
row's JSON and gpu_machine.json are rewritten after each run (atomically), so a bench that is cut
off keeps every figure it measured; gpu_machine.json's "complete" says whether it ran to the end.

The shards hold uniformly random tokens (seeded): throughput does not depend on what the tokens
say, and the bench needs no download. Files: *_train_*.bin and *_val_*.bin, each a header of 256
int32 words (20240520, 1, token count) and uint16 tokens, what frugal's shards:DIR reads.

  .venv/bin/python bench/gpu_bench.py [--out DIR] [--batch 16] [--steps 30] [--repeats 2]
  .venv/bin/python bench/gpu_bench.py --smoke     # on the CPU: a tiny shape, every row, 3 steps
  .venv/bin/python bench/gpu_bench.py --dry-run   # write and verify the shards, print the commands

Writes gpu_*.json (one file per row) into --out (default bench/results/<today>/; with --smoke
bench/out/gpu_smoke/) and prints a table. Each run prints a line as it ends (its tokens/s, or why it
failed). A failed run does not stop the others: it is listed in gpu_machine.json ("failures"),
the rows it leaves without a side are written without it, and the exit status is 1. Exits 2
when no CUDA device is visible (or frugal is built without CUDA).
"""
import argparse
import ctypes
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch  # noqa: E402

import matmul_peak  # noqa: E402
from bench_common import ROOT, die, results_dir, source_revision, venv_python, write_json  # noqa: E402
from peer_gpt import flops_per_token, llama_flops_per_token  # noqa: E402

LLMC_MAGIC = 20240520
GPT2 = dict(layers=12, heads=12, embd=768, block=1024, vocab=50257)
SMOKE = dict(layers=2, heads=2, embd=64, block=32, vocab=50257)
# The Llama row: GPT-2's depth, width, block and vocabulary with Llama's blocks (4 key/value heads,
# SwiGLU at 8/3 of the width, an untied head): ~163M parameters.
LLAMA = dict(GPT2, kv_heads=4, mlp=2048)
SMOKE_LLAMA = dict(SMOKE, kv_heads=1, mlp=176)
# The files a run writes into the results folder (save() refuses any other name, so that the
# clean-up of an earlier run's files knows them all).
ROW_FILES = ("gpu_muon", "gpu_offload", "gpu_bf16", "gpu_llama", "gpu_fp16", "gpu_sync_every", "gpu_activation_checkpointing", "gpu_checkpoint_stall",
             "gpu_machine")
SKIP = 3  # untimed steps at the start of every run (the peer's first one compiles under --compile)
ROWS = ("bf16", "fp8", "llama", "head", "fp16", "sync", "ckpt", "stall", "muon", "offload")
# A run's expected seconds before one of its side has run (GPT-2 shape on an H100/H200, measured
# 2026-11-26, rounded up; process start, the warm-up and the timed steps): frugal, the eager peer,
# torch.compile "default" (its first compile) and "max-autotune" (minutes of autotuning).
FIRST_GUESS_S = {"frugal": 15, "peer": 25, "compile": 75, "max_autotune": 420}
LOSS_TOLERANCE = {"frugal": 0.02, "peer": 0.05}  # relative, against frugal's ATen side

def datasheet_peak(doctor, name):
    """The datasheet's dense bf16/fp16 TFLOP/s for the GPU `name` and its source, from frugal's own
    table (`frugal doctor --json`, src/monitor/mfu.cpp): the figure frugal's summary.json quotes
    MFU against. (None, None) for a GPU not in the table."""
    for g in doctor.get("gpus") or []:
        if g.get("name") == name and g.get("datasheet_bf16_tflops"):
            return g["datasheet_bf16_tflops"], g.get("datasheet_source")
    return None, None


def write_llmc_shard(path, tokens):
    """One llm.c token file: 256 little-endian int32 header words, then uint16 tokens."""
    header = struct.pack("<256i", LLMC_MAGIC, 1, tokens.numel(), *([0] * 253))
    t = tokens.to(torch.uint16).contiguous()
    with open(path, "wb") as f:
        f.write(header)
        f.write(ctypes.string_at(t.data_ptr(), 2 * t.numel()))  # host byte order: little-endian x86/ARM


def make_shards(directory, vocab, train_tokens, val_tokens, train_files=2, seed=1234):
    """Seeded uniform random tokens in [0, vocab), split over train_files training shards and one
    validation shard; each file read back and checked. Returns the file list."""
    os.makedirs(directory, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    files = []
    per = train_tokens // train_files
    for i in range(train_files):
        files.append((os.path.join(directory, f"synthetic_train_{i + 1:06d}.bin"), per))
    files.append((os.path.join(directory, "synthetic_val_000000.bin"), val_tokens))
    for path, n in files:
        write_llmc_shard(path, torch.randint(0, vocab, (n,), generator=g, dtype=torch.int32))
        with open(path, "rb") as f:
            magic, version, count = struct.unpack("<3i", f.read(12))
        size = os.path.getsize(path)
        if (magic, version, count) != (LLMC_MAGIC, 1, n) or size != 1024 + 2 * n:
            die(f"gpu_bench: shard {path} reads back wrong (magic {magic}, version {version}, "
                f"{count} tokens, {size} bytes)", 1)
    return [p for p, _ in files]


class RunFailed(Exception):
    """One run (frugal train or the peer) exited non-zero: the bench records it and goes on."""


def run_cmd(args, env=None, what=""):
    """The command's standard output; RunFailed (its exit status, command line and the end of its
    standard error) when it fails."""
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        lines = [x for x in p.stderr.splitlines() if x.strip()] or ["(nothing on standard error)"]
        # A crash report (frugal's "killed by SIGSEGV ...", then its phase line) says more than
        # its last backtrace line; otherwise the last line of standard error.
        crash = [i for i, x in enumerate(lines) if ": killed by " in x]
        why = " ".join(lines[crash[0]:crash[0] + 3:2]) if crash else lines[-1]
        how = f"exit {p.returncode}"
        if p.returncode < 0:
            try:
                how = f"killed by signal {signal.Signals(-p.returncode).name}"
            except ValueError:  # a real-time signal has no name
                how = f"killed by signal {-p.returncode}"
        raise RunFailed(f"{what} failed ({how}): {why[:400]}", f"{shlex.join(args)}\n{p.stderr[-6000:]}")
    return p.stdout


class Bench:
    def __init__(self, a, shape, device, shards, work, peaks):
        self.a, self.shape, self.device, self.shards, self.work, self.peaks = a, shape, device, shards, work, peaks
        self.fpt = flops_per_token(shape["layers"], shape["embd"], shape["vocab"], shape["block"])
        self.llama = SMOKE_LLAMA if a.smoke else LLAMA  # the shape keys it shares with `shape` are equal
        ll = self.llama
        self.llama_fpt = llama_flops_per_token(ll["layers"], ll["embd"], ll["heads"], ll["kv_heads"], ll["mlp"],
                                               ll["vocab"], ll["block"])
        self.llama_sets = ["model.arch=llama", f"model.kv_heads={ll['kv_heads']}", f"model.mlp_width={ll['mlp']}",
                           "model.tie_embeddings=false"]
        self.tokens_per_step = a.batch * shape["block"]
        self.commands = []
        self.runs = 0

    def frugal_args(self, dtype, name, extra=(), steps=None, log_every=1):
        s = self.shape
        sets = [f"run.device={self.device}", f"run.out_dir={self.work}/runs", f"run.name={name}",
                f"data.source=shards:{self.shards}", f"model.vocab={s['vocab']}", f"model.layers={s['layers']}",
                f"model.heads={s['heads']}", f"model.embd={s['embd']}", f"model.block={s['block']}",
                f"data.micro_batch={self.a.batch}", *self.precision_sets(dtype),
                f"train.steps={(steps or self.a.steps) + SKIP}", f"train.log_every={log_every}", "train.eval_every=0",
                "train.eval_batches=1", "checkpoint.enabled=false", "checkpoint.every_minutes=0",
                "monitor.peak_tflops=" + (f"{self.peaks[dtype] / 1e3:.6g}" if self.peaks[dtype] else "<measured>"),
                "model.kernels=aten",  # the ATen sides; the kernel sides' extra sets model.kernels=frugal after it
                *extra]
        args = [self.a.frugal, "train", "--quiet"]
        for x in sets:
            args += ["--set", x]
        return args

    def precision_sets(self, dtype):
        """frugal's precision keys for `dtype`. frugal refuses fp16 on a CPU (it is far slower than
        fp32 there), so a --smoke run on the CPU exercises the fp16 row's loss-scaling path in fp32
        with the dynamic loss scaler instead."""
        if dtype == "fp16" and not self.device.startswith("cuda"):
            return ["precision.mode=fp32", "precision.loss_scaling=dynamic"]
        return [f"precision.mode={dtype}"]

    def peer_args(self, dtype, compile_=False, ckpt=False, head_multiple=1, sync_every=1, steps=None,
                  compile_mode="default", llama=False):
        s = self.shape
        args = [venv_python(), os.path.join(HERE, "peer_gpt.py"), "--shards", self.shards, "--device", self.device,
                "--dtype", dtype, "--vocab", str(s["vocab"]), "--layers", str(s["layers"]), "--heads", str(s["heads"]),
                "--embd", str(s["embd"]), "--block", str(s["block"]), "--batch", str(self.a.batch),
                "--steps", str(steps or self.a.steps), "--warmup", str(SKIP), "--prebuilt-batches"]
        if llama:
            args += ["--arch", "llama", "--kv-heads", str(self.llama["kv_heads"]), "--mlp-width", str(self.llama["mlp"])]
        if compile_:
            args.append("--compile")
            if compile_mode != "default":
                args += ["--compile-mode", compile_mode]
        if ckpt:
            args.append("--activation-checkpointing")
        if head_multiple != 1:
            args += ["--head-multiple", str(head_multiple)]
        if sync_every != 1:
            args += ["--sync-every", str(sync_every)]
        return args

    def frugal(self, dtype, name, extra=(), steps=None, log_every=1):
        self.runs += 1
        name = f"{name}-{self.runs}"  # a fresh run folder for every run
        args = self.frugal_args(dtype, name, extra, steps, log_every)
        self.commands.append(shlex.join(args))
        if self.a.dry_run:
            return None
        run_cmd(args, what="frugal train")
        run_dir = os.path.join(self.work, "runs", name)
        elapsed, wait = {}, {}
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                j = json.loads(line)
                if j["event"] == "step":
                    elapsed[j["step"]] = j["elapsed_s"]
                    wait[j["step"]] = j["data_wait_s"]
        step_s, timed, mean_s = window_step_times(elapsed, SKIP)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        shutil.rmtree(run_dir, ignore_errors=True)  # checkpoints of the GPT-2 shape are 1.5 GB each
        med = statistics.median(step_s)
        return {"tokens_per_s": self.tokens_per_step / med, "step_ms_median": 1e3 * med,
                "step_ms": [round(1e3 * x, 3) for x in step_s],
                "data_wait_ms_median": 1e3 * statistics.median(wait[s] for s in timed),
                "data_wait_fraction": sum(wait[s] for s in timed) / sum(mean_s),
                "peak_tensor_mb": summary.get("peak_tensor_mb"), "peak_reserved_mb": summary.get("peak_reserved_mb"),
                "skipped_steps": summary.get("skipped_steps"), "loss_scale": summary.get("loss_scale"),
                "final_train_loss": summary.get("final_train_loss"), "checkpoint": summary.get("checkpoint"),
                "frugal_reported_mfu": summary.get("mfu"), "frugal_reported_mfu_datasheet": summary.get("mfu_datasheet"),
                "frugal_reported_mfu_measured": summary.get("mfu_measured"),
                "frugal_train_tokens_per_s": summary.get("train_tokens_per_s"), "flops_per_token": summary.get("flops_per_token"),
                "frugal_version": summary.get("frugal_version"), "torch_version": summary.get("torch_version")}

    def peer(self, dtype, compile_=False, ckpt=False, head_multiple=1, sync_every=1, steps=None,
             compile_mode="default", llama=False):
        args = self.peer_args(dtype, compile_, ckpt, head_multiple, sync_every, steps, compile_mode, llama)
        self.commands.append(shlex.join(args))
        if self.a.dry_run:
            return None
        # On the CPU (--smoke) the peer gets the passive OpenMP wait policy frugal sets for itself.
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if self.device == "cpu" else None
        j = json.loads(run_cmd(args, env=env, what="peer_gpt.py").strip().splitlines()[-1])
        return {"tokens_per_s": j["tokens_per_s_median"], "step_ms_median": j["step_ms_median"], "step_ms": j["step_ms"],
                "data_wait_ms_median": j["data_ms_median"], "data_wait_fraction": j["data_wait_fraction"],
                "peak_tensor_mb": j.get("peak_tensor_mb"), "peak_reserved_mb": j.get("peak_reserved_mb"),
                "compile_s": j["compile_s"], "loss_scale": j["loss_scale"], "final_train_loss": j["final_loss"],
                "torch_version": j["torch"]}

    def mfu(self, tokens_per_s, dtype, fpt=None):
        """MFU against the measured peak and against the datasheet (None where unknown); `fpt`: the
        row's FLOPs per token where its model is not the GPT's."""
        achieved = tokens_per_s * (fpt or self.fpt) / 1e9  # GFLOP/s
        ds = self.peaks.get("datasheet_tflops")
        return achieved / self.peaks[dtype], (achieved / (ds * 1e3) if ds else None)


def window_step_times(elapsed, skip):
    """Step times from frugal's log lines (step -> elapsed_s): the windows between consecutive log
    lines that start at or after step `skip` (with log_every = 1, each step after the warm-up);
    every step of a window counts at the window's mean. Returns (the per-step times, the windows'
    last steps (the log steps whose data_wait_s is known), each window's mean)."""
    logged = sorted(elapsed)
    windows = [(p, s) for p, s in zip(logged, logged[1:]) if p >= skip]
    mean_s = [(elapsed[s] - elapsed[p]) / (s - p) for p, s in windows]
    step_s = [m for m, (p, s) in zip(mean_s, windows) for _ in range(s - p)]
    return step_s, [s for _, s in windows], mean_s


def summarize(bench, runs, dtype, fpt=None):
    """Medians over the alternating rounds of one side."""
    tps = statistics.median(r["tokens_per_s"] for r in runs)
    mfu, mfu_ds = bench.mfu(tps, dtype, fpt)
    out = {"tokens_per_s": tps, "mfu_measured_peak": mfu, "mfu_datasheet": mfu_ds,
           "step_ms_median": statistics.median(r["step_ms_median"] for r in runs),
           "data_wait_fraction": statistics.median(r["data_wait_fraction"] for r in runs),
           "data_wait_ms_median": statistics.median(r["data_wait_ms_median"] for r in runs),
           "runs": runs}
    for k in ("peak_tensor_mb", "peak_reserved_mb", "compile_s"):
        vals = [r[k] for r in runs if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
    return out


class Schedule:
    """Which runs fit before the deadline (a Unix time; 0 or None: every run fits)."""

    def __init__(self, deadline):
        self.deadline = deadline

    def left(self):
        return self.deadline - time.time() if self.deadline else float("inf")

    @staticmethod
    def expected(key, kind, last_s):
        """A run's expected seconds: the last run of its side, else the first guess for its kind."""
        return last_s.get(key, FIRST_GUESS_S[kind])

    def fits(self, expect):
        return not self.deadline or time.time() + expect <= self.deadline


def round_order(group, r):
    """Round r's order of a row's sides: the list rotated by r, so that no side is always first
    (on a cold machine) or always last (after the others warmed it)."""
    return group[r % len(group):] + group[:r % len(group)] if group else []


# Under a deadline, the sides whose figures matter least run after every other side of the round:
# the targets compare frugal with torch.compile, so eager and the head lever's sides wait.
SECONDARY_SIDES = ("eager", "eager_padded", "frugal_unpadded")


def round_plan(groups, r, deadline):
    """Round r's runs as (label, group, side) in order: each row's sides rotated (round_order), row
    after row; under a deadline the secondary sides moved to the round's end, in that order."""
    plan = [(label, g, side) for label, g in groups for side in round_order(g, r)]
    if deadline:
        plan.sort(key=lambda x: x[2][0] in SECONDARY_SIDES)  # stable: the rest keep their order
    return plan


def loss_parity(group, reference="frugal"):
    """Each side's median final loss against the reference side's: {"reference", "sides": {side:
    {final_loss, relative_difference, tolerance, ok}}, "ok"}; None without the reference side."""
    if reference not in group:
        return None
    ref = statistics.median(r["final_train_loss"] for r in group[reference]["runs"])
    sides, ok = {}, math.isfinite(ref)
    for k, v in group.items():
        loss = statistics.median(r["final_train_loss"] for r in v["runs"])
        tol = LOSS_TOLERANCE["frugal" if k.startswith("frugal") else "peer"]
        diff = abs(loss - ref) / abs(ref) if math.isfinite(loss) and math.isfinite(ref) and ref else float("inf")
        sides[k] = {"final_loss": loss, "relative_difference": diff if math.isfinite(diff) else None,
                    "tolerance": tol, "ok": diff <= tol}
        ok = ok and sides[k]["ok"]
    return {"reference": reference, "sides": sides, "ok": ok}


class ResultWriter:
    """Writes every row's JSON and gpu_machine.json from the runs so far (after each run and at
    the end): a bench cut off keeps what it measured."""

    def __init__(self, a, bench, machine, out, date, shape, sync_n, stall_steps):
        self.a, self.b, self.machine, self.out, self.n, self.stall_steps = a, bench, machine, out, sync_n, stall_steps
        self.common = {"date": date, "device": a.device, "device_name": machine.get("device_name"), "shape": shape,
                       "batch": a.batch, "smoke": a.smoke, "flops_per_token": bench.fpt}

    def clear(self):
        # A row this run cannot write must not leave an earlier run's file beside this run's.
        os.makedirs(self.out, exist_ok=True)
        for name in ROW_FILES:
            if os.path.exists(os.path.join(self.out, name + ".json")):
                os.remove(os.path.join(self.out, name + ".json"))

    def write(self, rounds, groups, failures, skipped, t0, complete):
        a, b, res = self.a, self.b, {}
        sides, fp16_sides, sync_sides, stall_sides, muon_sides, llama_sides, offload_sides = (g for _, g in groups)

        def save(name, obj):
            assert name in ROW_FILES, name
            obj = {"bench": name, **self.common, **obj}  # a row may name its own shape and FLOPs per token
            write_json(os.path.join(self.out, name + ".json"), obj)
            res[name] = obj

        def ratios(obj, group):  # frugal (and frugal on its kernels) over each peer side that ran
            for mine in ("frugal", "frugal_kernels", "frugal_kernels_graphs", "frugal_fp8", "frugal_kernels_fp8"):
                for peer in ("eager", "eager_padded", "compile", "compile_max_autotune", "frugal_unpadded", "frugal"):
                    if mine != peer and mine in group and peer in group:
                        obj[f"{mine}_over_{peer}"] = group[mine]["tokens_per_s"] / group[peer]["tokens_per_s"]
            return obj

        # A side with no successful run is left out of its row; a row with no side is not written.
        bf = {k: summarize(b, v, "bf16") for k, v in rounds[id(sides)].items() if v}
        bf_sides = {k: bf[k] for k in bf if not k.endswith("_ckpt")}
        if bf_sides:
            save("gpu_bf16", ratios({"dtype": "bf16", "sides": bf_sides, "loss_parity": loss_parity(bf)}, bf))
        fp = {k: summarize(b, v, "fp16") for k, v in rounds[id(fp16_sides)].items() if v}
        for k, v in fp.items():
            v["skipped_steps"] = [r.get("skipped_steps") for r in v["runs"]]
            v["loss_scale"] = [r.get("loss_scale") for r in v["runs"]]
        if fp:
            save("gpu_fp16", ratios({"dtype": "fp16", "loss_scaling": "dynamic", "sides": fp,
                                     "loss_parity": loss_parity(fp)}, fp))
        sy = {k: summarize(b, v, "bf16") for k, v in rounds[id(sync_sides)].items() if v}
        if sy:
            save("gpu_sync_every", ratios({"dtype": "bf16", "sync_every": self.n, "sides": sy,
                                           "loss_parity": loss_parity(sy)}, sy))
        ck = {}
        for side in ("frugal", "eager"):
            if side not in bf or side + "_ckpt" not in bf:
                continue
            base, rec = bf[side], bf[side + "_ckpt"]
            ck[side] = {"peak_tensor_mb_none": base.get("peak_tensor_mb"), "peak_tensor_mb_ckpt": rec.get("peak_tensor_mb"),
                        "step_ms_none": base["step_ms_median"], "step_ms_ckpt": rec["step_ms_median"],
                        "time_overhead": rec["step_ms_median"] / base["step_ms_median"] - 1,
                        "tokens_per_s_ckpt": rec["tokens_per_s"], "runs_ckpt": rec["runs"]}
            if base.get("peak_tensor_mb") and rec.get("peak_tensor_mb"):
                ck[side]["memory_saved"] = 1 - rec["peak_tensor_mb"] / base["peak_tensor_mb"]
        if ck:
            save("gpu_activation_checkpointing", {"dtype": "bf16", "frugal_mode": "blocks",
                                                  "eager_mode": "torch.utils.checkpoint per block", "sides": ck})
        st = {}
        for mode, runs in rounds[id(stall_sides)].items():
            if not runs:
                continue
            cps = [r["checkpoint"] for r in runs]
            st[mode] = {"saves": cps[0]["saves"], "bytes": cps[0]["bytes"],
                        "stall_s_mean": statistics.median(c["stall_s_mean"] for c in cps),
                        "stall_s_max": statistics.median(c["stall_s_max"] for c in cps),
                        "write_s_mean": statistics.median(c["write_s_mean"] for c in cps),
                        "step_ms_median": statistics.median(r["step_ms_median"] for r in runs), "runs": runs}
            if all("stall_s_each" in c for c in cps):  # each save's stall, in order (first round's run)
                st[mode]["stall_s_each"] = cps[0]["stall_s_each"]
        if "sync" in st and "async" in st:
            st["stall_ratio_async_over_sync"] = (st["async"]["stall_s_mean"] / st["sync"]["stall_s_mean"]
                                                 if st["sync"]["stall_s_mean"] > 0 else None)
        if st:
            save("gpu_checkpoint_stall", {"dtype": "bf16", "every_steps": a.ckpt_every, "steps": self.stall_steps,
                                          "modes": st})
        ll = {k: summarize(b, v, "bf16", b.llama_fpt) for k, v in rounds[id(llama_sides)].items() if v}
        if ll:
            save("gpu_llama", ratios({"dtype": "bf16", "shape": dict(b.llama, arch="llama"),
                                      "flops_per_token": b.llama_fpt, "sides": ll, "loss_parity": loss_parity(ll)}, ll))
        mu = {k: summarize(b, v, "bf16") for k, v in rounds[id(muon_sides)].items() if v}
        if mu:
            obj = {"dtype": "bf16", "sides": mu}
            if "muon" in mu and "fused_adamw" in mu:
                obj["step_time_ratio_muon_over_adamw"] = mu["muon"]["step_ms_median"] / mu["fused_adamw"]["step_ms_median"]
            save("gpu_muon", obj)
        of = {k: summarize(b, v, "bf16") for k, v in rounds[id(offload_sides)].items() if v}
        if of:
            obj = {"dtype": "bf16", "sides": of, "loss_parity": loss_parity(of)}
            if "offload" in of and "on_device" in of:
                dev, host = of["on_device"], of["offload"]
                obj["step_time_ratio_offload_over_on_device"] = host["step_ms_median"] / dev["step_ms_median"]
                if dev.get("peak_tensor_mb") and host.get("peak_tensor_mb"):
                    obj["peak_memory_saved"] = 1 - host["peak_tensor_mb"] / dev["peak_tensor_mb"]
            save("gpu_offload", obj)
        self.machine.update({"bench_seconds": time.time() - t0, "complete": complete, "failures": failures,
                             "skipped": skipped, "deadline": a.deadline or None})
        write_json(os.path.join(self.out, "gpu_machine.json"), self.machine)
        return res, (bf, fp, sy, ck, st)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="results folder (default bench/results/<today>)")
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"), help="frugal built with CUDA")
    ap.add_argument("--device", default="cuda", help="cuda or cuda:N")
    ap.add_argument("--batch", type=int, default=16, help="micro-batch of every side (sequences of 1024 tokens)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run (after 3 untimed ones)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating rounds")
    ap.add_argument("--train-tokens", type=int, default=20_000_000, help="tokens in the training shards")
    ap.add_argument("--ckpt-every", type=int, default=40,
                    help="checkpoint-stall rows: a save every N steps (40 steps of the GPT-2 shape outlast one "
                         "write of its 1.5 GB checkpoint on an H100 node, so an async save need not wait for "
                         "the previous one)")
    ap.add_argument("--keep-last", type=int, default=2,
                    help="checkpoint-stall rows: checkpoints kept (older ones are rotated out, as in training)")
    ap.add_argument("--datasheet-tflops", type=float, default=0,
                    help="dense bf16/fp16 peak of the GPU for MFU (0 = from the table of known GPUs)")
    ap.add_argument("--work", default=None, help="folder for shards and runs (default: a temporary one, removed)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile side")
    ap.add_argument("--no-kernels", dest="kernels", action="store_false",
                    help="leave out the bf16 side of frugal on its own CUDA kernels (model.kernels = frugal)")
    ap.add_argument("--max-autotune", action="store_true",
                    help="add torch.compile mode \"max-autotune\" to the bf16 row in every round (its autotuning "
                         "takes minutes); under --deadline it otherwise runs once after the rounds if time is left")
    ap.add_argument("--only", default="",
                    help="comma-separated rows to run (bf16, fp8, llama, head, fp16, sync, ckpt, stall, muon, offload; default all): e.g. "
                         "--only bf16 for a short lease")
    ap.add_argument("--deadline", type=float, default=0,
                    help="a Unix time: a run starts only if its expected time ends before it (0 = no deadline)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="the deadline as seconds from now (instead of --deadline)")
    ap.add_argument("--sync-every", type=int, default=10,
                    help="the sync-every row: both sides read the loss every N steps (0 = skip the row)")
    ap.add_argument("--smoke", action="store_true",
                    help="on the CPU: tiny shape, 3 timed steps, 1 round, every row (tests the bench itself)")
    ap.add_argument("--dry-run", action="store_true",
                    help="write and verify the shards and print every command, run nothing (no GPU needed)")
    a = ap.parse_args()

    shape = SMOKE if a.smoke else GPT2
    rows = {r.strip() for r in a.only.split(",") if r.strip()} or set(ROWS)
    unknown = rows - set(ROWS)
    if unknown:
        ap.error(f"--only {a.only}: unknown row(s) {', '.join(sorted(unknown))}; allowed: {', '.join(ROWS)}")
    a.rows = rows
    if a.budget_s < 0 or a.deadline < 0 or (a.budget_s and a.deadline):
        ap.error("--budget-s and --deadline take one positive number, and only one of them")
    if a.budget_s:
        a.deadline = time.time() + a.budget_s
    if a.sync_every < 0:
        die("gpu_bench: --sync-every must be 0 (no row) or at least 1", 2)
    if a.smoke:
        a.device, a.batch, a.steps, a.repeats, a.ckpt_every = "cpu", 4, 3, 1, 2
        a.sync_every = min(a.sync_every, 2)
        a.train_tokens = min(a.train_tokens, 200_000)
    elif not a.dry_run:
        if not torch.cuda.is_available():
            die(f"gpu_bench: no CUDA device is visible to PyTorch {torch.__version__} (built for CUDA "
                f"{torch.version.cuda}); this benchmark needs a GPU. `--smoke` tests it on the CPU, "
                "`--dry-run` prints its commands.", 2)
    if not a.dry_run and not os.access(a.frugal, os.X_OK):
        die(f"gpu_bench: {a.frugal} is not an executable; build frugal first (make build)", 2)

    date = time.strftime("%Y-%m-%d")
    # A smoke run's figures are CPU figures of a toy model: never into bench/results/.
    out = a.out or (os.path.join(ROOT, "bench", "out", "gpu_smoke") if a.smoke else results_dir(date))
    work = a.work or tempfile.mkdtemp(prefix="frugal-gpu-bench-")
    shards = os.path.join(work, "shards")
    t0 = time.time()
    if a.dry_run and not a.work:
        a.train_tokens = min(a.train_tokens, 2_000_000)  # the commands only need the files to exist
    files = make_shards(shards, shape["vocab"], a.train_tokens, max(shape["block"] * a.batch * 4, a.train_tokens // 20))
    print(f"gpu_bench: {len(files)} llm.c shards in {shards} ({sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB, "
          f"{time.time() - t0:.1f} s)", file=sys.stderr)

    # The machine: frugal doctor (must see the GPU) and the wheel's matmul peak.
    machine = {"bench": "gpu_machine", "date": date, "source": source_revision(), "shape": shape,
               "batch": a.batch, "steps_timed": a.steps, "repeats": a.repeats, "smoke": a.smoke,
               "shards": {"files": [os.path.basename(f) for f in files], "train_tokens": a.train_tokens,
                          "tokens": "uniform random, seeded"}}
    if a.dry_run:  # the peaks are measured on the GPU; the commands show where they go
        peaks = {"bf16": None, "fp16": None, "datasheet_tflops": None}
    else:
        try:
            doc = json.loads(run_cmd([a.frugal, "doctor", "--json"], what="frugal doctor"))
        except RunFailed as e:
            die(f"gpu_bench: {e.args[0]}\n{e.args[1]}", 1)
        machine["doctor"] = {k: doc.get(k) for k in ("torch_version", "frugal_version", "cuda_compiled",
                                                    "cuda_compiled_version", "cudnn_version", "nccl_compiled",
                                                    "cuda_available", "cuda_devices", "gpus", "cpu")}
        if a.device.startswith("cuda") and not doc.get("cuda_available"):
            die(f"gpu_bench: {a.frugal} sees no CUDA device (cuda_compiled = {doc.get('cuda_compiled')}); build "
                "frugal against the CUDA wheel (scripts/install-deps.sh, make build)", 2)
        mm = matmul_peak.run(a.device, 1024 if a.smoke else 8192, 2 if a.smoke else 5, 0.2 if a.smoke else 1.0)
        machine["matmul"] = mm
        name = mm["device_name"]
        ds, ds_source = (a.datasheet_tflops, "--datasheet-tflops") if a.datasheet_tflops else datasheet_peak(doc, name)
        peaks = {"bf16": mm["gflops"]["bf16"], "fp16": mm["gflops"].get("fp16", mm["gflops"]["bf16"]),
                 "datasheet_tflops": ds}
        machine.update({"device_name": name, "matmul_bf16_tflops": mm["gflops"]["bf16"] / 1e3,
                        "matmul_fp16_tflops": mm["gflops"].get("fp16", float("nan")) / 1e3,
                        "datasheet_tflops": ds, "datasheet_source": ds_source})

    b = Bench(a, shape, a.device, shards, work, peaks)
    compile_ = not a.no_compile

    # bf16: frugal, eager, compile; and activation checkpointing on frugal and eager, alternating.
    # frugal pads the head's matmuls to a multiple of 64 on a GPU by default (model.head_multiple):
    # the head row's frugal_unpadded shows that lever alone, eager_padded the same padding by hand.
    # Each side is (name, kind, run): the kind picks the first guess of its time (FIRST_GUESS_S).
    sides = [("frugal", "frugal", lambda: b.frugal("bf16", "bf16")), ("eager", "peer", lambda: b.peer("bf16"))]
    if a.kernels and a.device.startswith("cuda"):  # the kernels and graphs are refused on a CPU (--smoke)
        sides.append(("frugal_kernels", "frugal", lambda: b.frugal("bf16", "bf16_kernels", ["model.kernels=frugal"])))
        sides.append(("frugal_kernels_graphs", "frugal",
                      lambda: b.frugal("bf16", "bf16_kernels_graphs", ["model.kernels=frugal", "train.cuda_graphs=true"])))
    if compile_:
        sides.append(("compile", "compile", lambda: b.peer("bf16", compile_=True)))
    if "fp8" in a.rows:
        sides.append(("frugal_fp8", "frugal", lambda: b.frugal("bf16", "fp8", ["precision.mode=fp8"])))
        if a.kernels and a.device.startswith("cuda"):
            sides.append(("frugal_kernels_fp8", "frugal",
                          lambda: b.frugal("bf16", "fp8_kernels", ["precision.mode=fp8", "model.kernels=frugal"])))
    if "head" in a.rows:
        sides += [("frugal_unpadded", "frugal", lambda: b.frugal("bf16", "bf16_unpadded", ["model.head_multiple=1"])),
                  ("eager_padded", "peer", lambda: b.peer("bf16", head_multiple=64))]
    autotune = ("compile_max_autotune", "max_autotune",
                lambda: b.peer("bf16", compile_=True, compile_mode="max-autotune"))
    if compile_ and a.max_autotune:
        sides.append(autotune)
    if "ckpt" in a.rows:
        sides += [("frugal_ckpt", "frugal", lambda: b.frugal("bf16", "bf16_ckpt", ["memory.activation_checkpointing=blocks"])),
                  ("eager_ckpt", "peer", lambda: b.peer("bf16", ckpt=True))]
    if "bf16" not in a.rows:
        sides = [x for x in sides if x[0].endswith(("_ckpt", "_fp8")) or x[0] in ("frugal_unpadded", "eager_padded")]
    fp16_sides = [("frugal", "frugal", lambda: b.frugal("fp16", "fp16")), ("eager", "peer", lambda: b.peer("fp16"))]
    if compile_:
        fp16_sides.append(("compile", "compile", lambda: b.peer("fp16", compile_=True)))
    if "fp16" not in a.rows:
        fp16_sides = []
    n = a.sync_every if "sync" in a.rows else 0
    sync_sides = [] if n == 0 else [
        ("frugal", "frugal", lambda: b.frugal("bf16", f"bf16_log{n}", log_every=n, steps=max(a.steps, 2 * n))),
        ("eager", "peer", lambda: b.peer("bf16", sync_every=n, steps=max(a.steps, 2 * n)))]
    stall_steps = max(a.steps, 3 * a.ckpt_every)
    stall_sides = [(mode, "frugal", lambda m=mode: b.frugal("bf16", f"stall_{m}", [
        "checkpoint.enabled=true", f"checkpoint.every_steps={a.ckpt_every}", f"checkpoint.keep_last={a.keep_last}",
        f"checkpoint.async={'true' if m == 'async' else 'false'}"], steps=stall_steps)) for mode in ("sync", "async")
        if "stall" in a.rows]

    muon_sides = [("fused_adamw", "frugal", lambda: b.frugal("bf16", "bf16_adamw")),
                  ("muon", "frugal", lambda: b.frugal("bf16", "bf16_muon", ["train.optimizer=muon", "train.schedule=wsd"]))
                  ] if "muon" in a.rows else []

    offload_sides = [("on_device", "frugal", lambda: b.frugal("bf16", "bf16_on_device")),
                     ("offload", "frugal", lambda: b.frugal("bf16", "bf16_offload", ["dist.offload=optimizer"]))
                     ] if "offload" in a.rows else []

    llama_sides = []
    if "llama" in a.rows:
        llama_sides = [("frugal", "frugal", lambda: b.frugal("bf16", "llama", b.llama_sets)),
                       ("eager", "peer", lambda: b.peer("bf16", llama=True))]
        if a.kernels and a.device.startswith("cuda"):  # RMSNorm and SwiGLU on frugal's kernels
            llama_sides.append(("frugal_kernels", "frugal",
                                lambda: b.frugal("bf16", "llama_kernels", b.llama_sets + ["model.kernels=frugal"])))
        if compile_:
            llama_sides.append(("compile", "compile", lambda: b.peer("bf16", compile_=True, llama=True)))
        if "fp8" in a.rows:
            llama_sides.append(("frugal_fp8", "frugal",
                                lambda: b.frugal("bf16", "llama_fp8", b.llama_sets + ["precision.mode=fp8"])))

    groups = (("bf16", sides), ("fp16", fp16_sides), (f"sync every {n}", sync_sides),
              ("checkpoint stall", stall_sides), ("muon", muon_sides), ("llama", llama_sides), ("offload", offload_sides))
    rounds = {id(g): {k: [] for k, _, _ in g} for _, g in groups}
    failures, skipped = [], []
    last_s = {}  # side -> seconds its last run took
    writer = ResultWriter(a, b, machine, out, date, shape, n, stall_steps)
    sched = Schedule(a.deadline)

    def attempt(r, label, group, k, kind, fn):
        key = (label, k)
        expect = sched.expected(key, kind, last_s)
        if not sched.fits(expect):
            skipped.append({"round": r + 1, "row": label, "side": k, "expected_s": round(expect),
                            "left_s": round(sched.left()), "why": "the time budget (--deadline) would be passed"})
            print(f"gpu_bench: round {r + 1} {label} {k}: skipped, {expect:.0f} s expected and "
                  f"{max(0, sched.left()):.0f} s left before the deadline", file=sys.stderr)
            return
        t = time.time()
        try:
            run = fn()
        except (RunFailed, OSError, ValueError, KeyError, IndexError) as e:
            # A run that failed, or one that exited 0 but left unreadable figures
            # (metrics.jsonl, summary.json, the peer's JSON line).
            error, detail = e.args if isinstance(e, RunFailed) else (f"{type(e).__name__}: {e}", repr(e))
            failures.append({"round": r + 1, "row": label, "side": k, "error": error, "detail": detail})
            writer.write(rounds, groups, failures, skipped, t0, complete=False)
            print(f"gpu_bench: round {r + 1}/{a.repeats} {label} {k}: FAILED after {time.time() - t:.0f} s: "
                  f"{detail[-1500:]}", file=sys.stderr)
            return
        finally:
            last_s[key] = time.time() - t
        if run is not None:
            rounds[id(group)][k].append(run)
            writer.write(rounds, groups, failures, skipped, t0, complete=False)  # before the line that says so
            print(f"gpu_bench: round {r + 1}/{a.repeats} {label} {k}: {run['tokens_per_s']:,.0f} tokens/s, "
                  f"step {run['step_ms_median']:.1f} ms (median), loss {run['final_train_loss']:.4f}, "
                  f"{time.time() - t:.0f} s", file=sys.stderr)

    if not a.dry_run:
        writer.clear()
    for r in range(a.repeats):
        for label, g, (k, kind, fn) in round_plan(groups, r, a.deadline):
            attempt(r, label, g, k, kind, fn)
    # Under a deadline, max-autotune (minutes of autotuning) once, when the time left covers it.
    if compile_ and not a.max_autotune and a.deadline and "bf16" in a.rows and not a.dry_run:
        sides.append(autotune)
        rounds[id(sides)][autotune[0]] = []
        attempt(a.repeats - 1, "bf16", sides, *autotune)

    if a.dry_run:
        print("\n".join(b.commands))
        print(f"gpu_bench: dry run: {len(files)} shards written and verified; {len(b.commands)} commands above "
              f"({a.repeats} rounds)" + ("" if a.work else "; the temporary folder is removed"), file=sys.stderr)
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
        return 0

    res, (bf, fp, sy, ck, st) = writer.write(rounds, groups, failures, skipped, t0, complete=True)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    def mb(x):  # the peer reports tensor memory on CUDA only
        return "n/a" if x is None else f"{x:,.0f}"
    print(f"\n{machine['device_name']}: matmul bf16 {peaks['bf16'] / 1e3:.1f} TFLOP/s measured, datasheet "
          f"{peaks['datasheet_tflops'] or 'n/a'}; shape {shape}, micro-batch {a.batch}")
    print(f"{'row':34} {'tokens/s':>12} {'MFU meas.':>10} {'MFU sheet':>10} {'peak MB':>10} {'data wait':>10}")
    for dt, group in (("bf16", bf), ("fp16", fp), ("llama bf16", res.get("gpu_llama", {}).get("sides", {}))):
        for k, v in group.items():
            if k.endswith("_ckpt"):
                continue
            extra = f"  (compile {v['compile_s']:.0f} s)" if v.get("compile_s") else ""
            print(f"{dt + ' ' + k:34} {v['tokens_per_s']:12,.0f} {pct(v['mfu_measured_peak']):>10} "
                  f"{pct(v['mfu_datasheet']):>10} {mb(v.get('peak_tensor_mb')):>10} "
                  f"{pct(v['data_wait_fraction']):>10}{extra}")
    for k, v in sy.items():
        print(f"{'bf16 ' + k + f', loss read every {n}':34} {v['tokens_per_s']:12,.0f} {pct(v['mfu_measured_peak']):>10} "
              f"{pct(v['mfu_datasheet']):>10} {mb(v.get('peak_tensor_mb')):>10} {pct(v['data_wait_fraction']):>10}")
    for side, v in ck.items():
        print(f"{'activation ckpt ' + side:34} {mb(v['peak_tensor_mb_none'])} -> {mb(v['peak_tensor_mb_ckpt'])} MB,"
              f" {v['step_ms_none']:.0f} -> {v['step_ms_ckpt']:.0f} ms/step")
    for mode in ("sync", "async"):
        if mode not in st:
            continue
        v = st[mode]
        print(f"{'checkpoint ' + mode:34} stall {1e3 * v['stall_s_mean']:.0f} ms mean, {1e3 * v['stall_s_max']:.0f} ms max;"
              f" write {1e3 * v['write_s_mean']:.0f} ms; {v['bytes'] / 1e6:.0f} MB x {v['saves']} saves")
        if v.get("stall_s_each"):
            print(f"{'':34} stall of each save: {', '.join(f'{1e3 * x:.0f}' for x in v['stall_s_each'])} ms")
    if "step_time_ratio_muon_over_adamw" in res.get("gpu_muon", {}):
        print(f"{'muon over fused_adamw':34} step time x{res['gpu_muon']['step_time_ratio_muon_over_adamw']:.3f}")
    if "step_time_ratio_offload_over_on_device" in res.get("gpu_offload", {}):
        o = res["gpu_offload"]
        saved = f", peak memory {100 * o['peak_memory_saved']:.0f}% less" if "peak_memory_saved" in o else ""
        print(f"{'offload over on the device':34} step time x{o['step_time_ratio_offload_over_on_device']:.3f}{saved}")
    parity_failed = []
    for name in ("gpu_bf16", "gpu_fp16", "gpu_sync_every", "gpu_llama", "gpu_offload"):
        lp = res.get(name, {}).get("loss_parity")
        if not lp:
            continue
        print(f"{name + ' final loss':34} " + ", ".join(
            f"{k} {v['final_loss']:.4f}" + ("" if v["ok"] else " (OFF)") for k, v in lp["sides"].items()))
        parity_failed += [f"{name} {k}" for k, v in lp["sides"].items() if not v["ok"]]
    for f in failures:
        print(f"{'FAILED round ' + str(f['round']) + ' ' + f['row'] + ' ' + f['side']:34} {f['error']}")
    if parity_failed:
        print(f"{'LOSS OFF its reference':34} {', '.join(parity_failed)} (beyond {LOSS_TOLERANCE['frugal']:.0%} for "
              f"frugal's sides, {LOSS_TOLERANCE['peer']:.0%} for PyTorch's, of frugal's ATen side)")
    if skipped:
        print(f"{'skipped (time budget)':34} {len(skipped)} run(s): "
              + ", ".join(f"round {x['round']} {x['row']} {x['side']}" for x in skipped))
    print(f"\nresults: {out}/ ({', '.join(sorted(res) + ['gpu_machine'])})")
    return 1 if failures or parity_failed else 0


if __name__ == "__main__":
    sys.exit(main())
