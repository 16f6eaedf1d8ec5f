"""bench/gpu_profile.py reads both traces' device work the same way: frugal's device tracks (tid
from 1,000,000) and torch.profiler's kernel/memcpy/memset categories; busy time is the union of
overlapping intervals (two streams at once count once); each step's wall time comes from the
"step" spans; kernels are sorted into kinds by name; a trace with the wrong number of steps is
refused. Synthetic traces: no GPU needed."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from gpu_profile import analyse, busy_us, kind_of  # noqa: E402
from gpu_bench import RunFailed  # noqa: E402


def x(name, ts, dur, **kw):
    return dict(ph="X", name=name, ts=ts, dur=dur, **kw)


def write_trace(folder, name, events):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
    return path


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def expect(r, key, want, side):
    check(abs(r[key] - want) < 1e-9, f"{side} {key} {r[key]}, not {want}")


def main():
    check(busy_us([(0, 10), (5, 15), (20, 30), (22, 25)]) == 25, "overlapping intervals count once")
    check(busy_us([]) == 0, "no intervals, no busy time")
    for name, kind in (("sm90_xmma_gemm_bf16bf16_bf16f32", "matmul"), ("nvjet_tst_128x256", "matmul"),
                       ("flash_fwd_kernel", "attention"), ("pytorch_flash::flash_bwd_dq_dk_dv_loop", "attention"),
                       ("void at::native::(anonymous)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
                       ("Memcpy HtoD (Pinned -> Device)", "copies"),
                       ("void at::native::(anonymous)::vectorized_layer_norm_kernel<float>", "norm/softmax/loss"),
                       ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "other elementwise")):
        check(kind_of(name) == kind, f"{name} is {kind}, not {kind_of(name)}")
    # frugal: two steps of 10 ms; device work on two tracks, overlapping by 1 ms. The peer:
    # categories, not tracks, mark device work; steps are user annotations; runtime calls and
    # CPU ops are not device work.
    cases = [
        ("frugal", [x("step", 0, 10_000, cat="phase", tid=0), x("step", 10_000, 10_000, cat="phase", tid=0),
                    x("aten::mm", 100, 50, cat="op", tid=5),
                    x("sm90_xmma_gemm", 1_000, 4_000, cat="op", tid=1_000_007),
                    x("Memcpy HtoD", 4_000, 2_000, cat="op", tid=1_000_013),
                    x("sm90_xmma_gemm", 11_000, 4_000, cat="op", tid=1_000_007)],
         {"step_ms": 10.0, "device_busy_ms_per_step": 4.5, "device_idle_ms_per_step": 5.5, "device_events": 3},
         ("matmul", 4.0, "sm90_xmma_gemm", 1.0)),
        ("eager", [x("step", 0, 8_000, cat="user_annotation", tid=1),
                   x("step", 8_000, 8_000, cat="user_annotation", tid=1),
                   x("aten::mm", 100, 50, cat="cpu_op", tid=1),
                   x("flash_fwd_kernel", 500, 3_000, cat="kernel", tid=7),
                   x("Memset (Device)", 3_600, 400, cat="gpu_memset", tid=7),
                   x("cudaLaunchKernel", 200, 10, cat="cuda_runtime", tid=1)],
         {"step_ms": 8.0, "device_busy_ms_per_step": 1.7, "device_idle_ms_per_step": 6.3, "device_events": 2},
         ("attention", 1.5, "flash_fwd_kernel", 0.5)),
    ]
    with tempfile.TemporaryDirectory() as d:
        for side, events, want, (kind, kind_ms, top, top_calls) in cases:
            path = write_trace(d, side + ".json", events)
            r = analyse(path, side, 2, 5)
            for key, value in want.items():
                expect(r, key, value, side)
            expect(r["device_ms_per_step_by_kind"], kind, kind_ms, side)
            check(r["top_kernels"][0]["name"] == top and r["top_kernels"][0]["calls_per_step"] == top_calls,
                  f"{side}: the top kernel and its calls per step")
        try:
            analyse(path, "eager", 3, 5)
            check(False, "a trace with 2 steps was read as 3")
        except RunFailed as e:
            check("2 step spans, not 3" in e.args[0], e.args[0])
    print("gpu_profile_check: ok")


if __name__ == "__main__":
    main()
