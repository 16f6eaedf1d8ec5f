#!/usr/bin/env python3
"""Where frugal's GPU step time goes, against PyTorch eager's: both sides profiled over the same
number of steps at the GPT-2 124M shape (bench/gpu_bench.py's shape, shards and commands), and
their device work summed from the two Chrome traces.

  - frugal: `frugal train` with [profile] (profile.capture_steps = --steps after the warm-up);
    its trace (runs/<name>/profile/trace-*.json) holds LibTorch's operator events, the device's
    on tracks numbered from 1,000,000;
  - the peer: bench/peer_gpt.py --profile-trace (torch.profiler, CPU and CUDA activities); device
    events have the categories "kernel", "gpu_memcpy" and "gpu_memset";
  - the peer under torch.compile (unless --no-compile; never under --smoke): the same, its
    compiled step, to show which kernels compilation fuses away.

Per side and per profiled step: the step's wall time (the mean of the trace's "step" spans:
frugal's phase, the peer's record_function; each step ends waiting for the device), the
device's busy time (the union of its event intervals, over the steps), the rest of the step as
the device's idle time, and the number of device events. Busy time is then split by kind (matmul, attention, optimizer, norm/softmax/loss,
copies, other elementwise), and the kernels with the most time are listed. Where frugal's busy
time matches the peer's but its idle time is higher, the host is the bottleneck (launches,
synchronisation). Where frugal's busy time is higher, the table names the kernels that cost more.

  .venv/bin/python bench/gpu_profile.py [--frugal build/frugal] [--out DIR] [--steps 5] [--dtype bf16]
  .venv/bin/python bench/gpu_profile.py --smoke   # on the CPU, tiny shape: both traces made and read

Writes gpu_profile.json into --out (default bench/out/gpu_profile; figures of a profiled run are
not throughput figures, so they never go into bench/results/ by default) and prints the table.
Exit status 2 without a GPU (unless --smoke), 1 when a side fails.
"""
import argparse
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch  # noqa: E402

from bench_common import ROOT, die, source_revision  # noqa: E402
from gpu_bench import GPT2, SKIP, SMOKE, Bench, RunFailed, make_shards, run_cmd  # noqa: E402

DEVICE_TID = 1_000_000  # frugal's trace: device tracks are numbered from here (src/monitor/profiler.cpp)
PEER_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# The first pattern that matches a kernel's lower-cased name gives its kind.
KINDS = [
    ("copies", re.compile(r"memcpy|memset")),
    ("optimizer", re.compile(r"adam")),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|cudnn.*(mha|sdpa)")),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|matmul|sm\d+_")),
    ("norm/softmax/loss", re.compile(r"norm|softmax|nll|cross_entropy|reduce|sum_|_sum|welford")),
]


def kind_of(name):
    low = name.lower()
    for kind, pattern in KINDS:
        if pattern.search(low):
            return kind
    return "other elementwise"


def busy_us(intervals):
    """The length of the union of [start, end) intervals."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def device_events(trace, side):
    """(name, ts_us, dur_us) of the trace's device events, and the count of all timed events."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    if side == "frugal":
        dev = [e for e in events if isinstance(e.get("tid"), int) and e["tid"] >= DEVICE_TID]
    else:
        dev = [e for e in events if e.get("cat") in PEER_DEVICE_CATS]
    return [(e["name"], float(e["ts"]), float(e["dur"])) for e in dev], events


def analyse(path, side, steps, top):
    with open(path) as f:
        trace = json.load(f)
    dev, events = device_events(trace, side)
    if not events:
        raise RunFailed(f"{side}: the trace {path} holds no timed events", path)
    cat = "phase" if side == "frugal" else "user_annotation"
    spans = [float(e["dur"]) for e in events if e.get("cat") == cat and e["name"] == "step"]
    if len(spans) != steps:
        raise RunFailed(f"{side}: the trace {path} holds {len(spans)} step spans, not {steps}", path)
    busy = busy_us([(ts, ts + d) for _, ts, d in dev])
    by_kind, by_name = {}, {}
    for name, _, d in dev:
        k = kind_of(name)
        by_kind[k] = by_kind.get(k, 0.0) + d
        n = by_name.setdefault(name, [0, 0.0])
        n[0] += 1
        n[1] += d
    per = 1e3 * steps  # µs over the window -> ms per step
    return {
        "trace": path, "events": len(events), "device_events": len(dev), "steps": steps,
        "step_ms": sum(spans) / per,
        "device_busy_ms_per_step": busy / per,
        "device_idle_ms_per_step": (sum(spans) - busy) / per if dev else None,
        "device_events_per_step": len(dev) / steps,
        "device_ms_per_step_by_kind": {k: v / per for k, v in sorted(by_kind.items(), key=lambda x: -x[1])},
        "top_kernels": [{"name": n, "calls_per_step": c / steps, "ms_per_step": d / per, "kind": kind_of(n)}
                        for n, (c, d) in sorted(by_name.items(), key=lambda x: -x[1][1])[:top]],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "gpu_profile"), help="folder for gpu_profile.json")
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"), help="frugal built with CUDA")
    ap.add_argument("--device", default="cuda", help="cuda or cuda:N")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--batch", type=int, default=16, help="micro-batch of both sides")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps per side (after the warm-up)")
    ap.add_argument("--top", type=int, default=12, help="kernels listed per side")
    ap.add_argument("--keep-traces", action="store_true", help="copy the Chrome traces into --out")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile side")
    ap.add_argument("--smoke", action="store_true", help="on the CPU, tiny shape (tests the script itself)")
    a = ap.parse_args()
    if a.steps < 1:
        die("gpu_profile: --steps must be at least 1", 2)
    shape = SMOKE if a.smoke else GPT2
    if a.smoke:
        a.device, a.batch, a.dtype = "cpu", 4, "fp32"
    elif not torch.cuda.is_available():
        die(f"gpu_profile: no CUDA device is visible to PyTorch {torch.__version__}; `--smoke` tests "
            "the script on the CPU", 2)
    if not os.access(a.frugal, os.X_OK):
        die(f"gpu_profile: {a.frugal} is not an executable; build frugal first (make build)", 2)

    work = tempfile.mkdtemp(prefix="frugal-gpu-profile-")
    try:
        shards = os.path.join(work, "shards")
        make_shards(shards, shape["vocab"], 2_000_000 if not a.smoke else 200_000, shape["block"] * a.batch * 4)
        bench_args = argparse.Namespace(batch=a.batch, steps=a.steps, frugal=a.frugal, dry_run=False)
        # A fixed peak for MFU (not reported here) spares each frugal run its start-up matmul probe.
        b = Bench(bench_args, shape, a.device, shards, work, {a.dtype: 1e6, "datasheet_tflops": None})
        sides = {}
        # frugal: the window opens after the untimed steps and holds --steps steps.
        extra = [f"profile.capture_steps={a.steps}", f"profile.start_step={SKIP}"]
        args = b.frugal_args(a.dtype, "profiled", extra)
        t0 = time.time()
        run_cmd(args, what="frugal train")
        traces = sorted(glob.glob(os.path.join(work, "runs", "profiled", "profile", "trace-*.json")))
        if not traces:
            die(f"gpu_profile: frugal wrote no trace under {work}/runs/profiled/profile", 1)
        sides["frugal"] = analyse(traces[0], "frugal", a.steps, a.top)
        print(f"gpu_profile: frugal profiled in {time.time() - t0:.0f} s", file=sys.stderr)
        peer_trace = os.path.join(work, "peer-trace.json")
        args = b.peer_args(a.dtype) + ["--profile-trace", peer_trace, "--profile-steps", str(a.steps)]
        t0 = time.time()
        run_cmd(args, what="peer_gpt.py")
        sides["eager"] = analyse(peer_trace, "eager", a.steps, a.top)
        print(f"gpu_profile: eager profiled in {time.time() - t0:.0f} s", file=sys.stderr)
        paths = {"frugal": traces[0], "eager": peer_trace}
        if not (a.no_compile or a.smoke):
            compiled_trace = os.path.join(work, "compile-trace.json")
            args = b.peer_args(a.dtype, compile_=True) + ["--profile-trace", compiled_trace,
                                                          "--profile-steps", str(a.steps)]
            t0 = time.time()
            run_cmd(args, what="peer_gpt.py --compile")
            sides["compile"] = analyse(compiled_trace, "compile", a.steps, a.top)
            paths["compile"] = compiled_trace
            print(f"gpu_profile: torch.compile profiled in {time.time() - t0:.0f} s", file=sys.stderr)
        os.makedirs(a.out, exist_ok=True)
        if a.keep_traces:
            for side, path in paths.items():
                shutil.copy(path, os.path.join(a.out, f"trace-{side}.json"))
                sides[side]["trace"] = f"trace-{side}.json"
        else:
            for s in sides.values():
                s["trace"] = None  # in the temporary folder, removed
    except RunFailed as e:
        print(f"gpu_profile: {e.args[0]}\n{e.args[1]}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {"bench": "gpu_profile", "date": time.strftime("%Y-%m-%d"), "source": source_revision(ROOT),
              "device": a.device, "device_name": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "shape": shape, "batch": a.batch, "dtype": a.dtype, "smoke": a.smoke,
              "sides": sides}
    with open(os.path.join(a.out, "gpu_profile.json"), "w") as f:
        json.dump(result, f, indent=2)

    print(f"\n{result['device_name']}, {a.dtype}, micro-batch {a.batch}, {a.steps} profiled steps per side (ms per step)")
    print(f"{'':28}" + "".join(f"{side:>10}" for side in sides))
    for key, label in (("step_ms", "step"), ("device_busy_ms_per_step", "device busy"),
                       ("device_idle_ms_per_step", "device idle"), ("device_events_per_step", "device events")):
        print(f"{label:28}" + "".join(f"{'-' if s[key] is None else f'{s[key]:.2f}':>10}" for s in sides.values()))
    kinds = list(dict.fromkeys(k for s in sides.values() for k in s["device_ms_per_step_by_kind"]))
    for k in kinds:
        print(f"  {k:26}" + "".join(f"{s['device_ms_per_step_by_kind'].get(k, 0):>10.2f}" for s in sides.values()))
    for side in sides:
        if sides[side]["top_kernels"]:
            print(f"\n{side}: top kernels (ms per step, calls per step)")
            for t in sides[side]["top_kernels"]:
                print(f"  {t['ms_per_step']:8.3f} {t['calls_per_step']:7.1f}  [{t['kind']}] {t['name'][:110]}")
    if not any(s["device_events"] for s in sides.values()):
        print("\nno device events in any trace (a CPU run): every trace was made and read")
    print(f"\nresults: {os.path.join(a.out, 'gpu_profile.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
