#!/usr/bin/env python3
"""Dense matmul throughput of this machine through the PyTorch wheel frugal links: the peak MFU is
measured against and the bf16/fp32 ratio the bf16 lever is bounded by. An n x n x n torch.mm per
dtype, repeated for --seconds, --repeats times; the median of the repeats (GFLOP/s) is reported.

  .venv/bin/python bench/matmul_peak.py                       # CPU: n = 1024 (frugal doctor's size)
  .venv/bin/python bench/matmul_peak.py --device cuda         # GPU: n = 8192, fp32 / bf16 / fp16

Prints one JSON object: {"device", "n", "threads", "gflops": {dtype: median}, "runs": {dtype:
[...]}, "bf16_over_fp32"}. On CUDA, fp32 is measured without TF32 (full fp32) and again with it.
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


def measure(n, dtype, device, seconds):
    """GFLOP/s of repeated n^3 matmuls for at least `seconds` (after one warm-up product)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.mm(a, b)  # warm-up: oneDNN primitive creation, cuBLAS handle and heuristics
    sync()
    reps, t0 = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        reps += 1
        if device.type == "cuda" and reps % 8:
            continue  # keep the GPU queue full between checks
        sync()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and reps >= 2:
            return 2.0 * n ** 3 * reps / elapsed / 1e9


def run(device="cpu", n=0, repeats=5, seconds=0.5, threads=0):
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"matmul_peak: --device {device} but no CUDA device is available")
    threads = threads or physical_cores()
    torch.set_num_threads(threads)
    n = n or (8192 if device.type == "cuda" else 1024)
    kinds = [("fp32", torch.float32, False), ("bf16", torch.bfloat16, False)]
    if device.type == "cuda":
        kinds = [("fp32", torch.float32, False), ("fp32_tf32", torch.float32, True),
                 ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)]
    runs = {k: [] for k, _, _ in kinds}
    for _ in range(repeats):  # dtypes alternate, so a drift of the machine hits all alike
        for name, dtype, tf32 in kinds:
            if device.type == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = tf32
            runs[name].append(measure(n, dtype, device, seconds))
    g = {k: statistics.median(v) for k, v in runs.items()}
    return {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "n": n, "threads": threads, "repeats": repeats, "gflops": g,
            "runs": runs, "bf16_over_fp32": g["bf16"] / g["fp32"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--n", type=int, default=0, help="matrix size; 0 = 1024 on CPU, 8192 on CUDA")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5, help="minimum time per measurement")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = physical cores")
    a = ap.parse_args()
    try:
        print(json.dumps(run(a.device, a.n, a.repeats, a.seconds, a.threads)))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
