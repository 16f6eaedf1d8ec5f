#!/usr/bin/env python3
"""The matmul floor of one GPT training step: the time of that step's matrix products alone, run
back to back through the PyTorch wheel frugal links, with the layouts autograd gives them.

Every training loop of the model, frugal's and the peers' (bench/peer_gpt.py), runs these same
products: per block the qkv, attention-output, MLP-up and MLP-down linears, and the tied output
head, each forward (addmm with the bias, or mm) and twice backward (the input's gradient dY W,
and the weight's X^T dY, as ATen's AddmmBackward0 / MmBackward0 compute them). Whatever a loop
does besides (attention, LayerNorm, GELU, loss, optimizer, data) comes on top, so

    ceiling_vs_eager = eager step time / matmul floor

bounds the speed-up over PyTorch eager of ANY loop that runs these products through the same
BLAS: a loop that is faster than eager by more than that would spend negative time outside its
matmuls. (Attention's own q k^T and p v products are outside the floor: they belong to the
attention kernels, which differ between the loops.)

  .venv/bin/python bench/matmul_floor.py --layers 4 --heads 4 --embd 256 --block 128 --batch 16 \\
      --threads 2 [--dtype fp32|bf16] [--steps 20]

Prints one JSON object on the last line: {"floor_ms_median", "gemms", "gflop", "gflops", ...}.
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import physical_cores  # noqa: E402


def products(layers, embd, vocab, tokens, dtype):
    """The step's products as (name, function) pairs, on tensors made once (values random)."""
    out = []
    linears = [("qkv", embd, 3 * embd), ("proj", embd, embd), ("fc", embd, 4 * embd), ("fc_proj", 4 * embd, embd)]
    for layer in range(layers):
        for name, fan_in, fan_out in linears:
            x = torch.randn(tokens, fan_in, dtype=dtype)
            w = torch.randn(fan_out, fan_in, dtype=dtype)
            b = torch.randn(fan_out, dtype=dtype)
            dy = torch.randn(tokens, fan_out, dtype=dtype)
            tag = f"h{layer}.{name}"
            out.append((f"{tag} forward", lambda x=x, w=w, b=b: torch.addmm(b, x, w.t())))
            out.append((f"{tag} input grad", lambda dy=dy, w=w: torch.mm(dy, w)))
            out.append((f"{tag} weight grad", lambda x=x, dy=dy: torch.mm(x.t(), dy)))
    x = torch.randn(tokens, embd, dtype=dtype)
    e = torch.randn(vocab, embd, dtype=dtype)
    dl = torch.randn(tokens, vocab, dtype=dtype)
    out.append(("head forward", lambda: torch.mm(x, e.t())))
    out.append(("head input grad", lambda: torch.mm(dl, e)))
    out.append(("head weight grad", lambda: torch.mm(x.t(), dl)))
    return out


def flop(layers, embd, vocab, tokens):
    per_token = layers * (3 + 1 + 4 + 4) * embd * embd + vocab * embd
    return 3 * 2 * per_token * tokens  # forward + two backward products, 2 FLOP per multiply-add


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4, help="recorded only: the floor does not depend on it")
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = the physical cores")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (after 3 untimed ones)")
    a = ap.parse_args()
    if min(a.layers, a.embd, a.block, a.batch, a.vocab, a.steps) < 1:
        ap.error("--layers, --embd, --block, --batch, --vocab and --steps must be at least 1")
    threads = a.threads or physical_cores()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    tokens = a.batch * a.block
    ops = products(a.layers, a.embd, a.vocab, tokens, dtype)
    times = []
    for step in range(3 + a.steps):
        t0 = time.perf_counter()
        for _, fn in ops:
            fn()
        times.append(time.perf_counter() - t0)
    timed = times[3:]
    med = statistics.median(timed)
    gflop = flop(a.layers, a.embd, a.vocab, tokens) / 1e9
    print(json.dumps({
        "program": "matmul_floor", "torch": torch.__version__, "dtype": a.dtype, "threads": threads,
        "model": {"layers": a.layers, "heads": a.heads, "embd": a.embd, "block": a.block, "vocab": a.vocab},
        "batch": a.batch, "tokens_per_step": tokens, "gemms": len(ops), "gflop": gflop,
        "floor_ms_median": 1e3 * med, "floor_ms": [round(1e3 * t, 3) for t in timed],
        "gflops": gflop / med,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
