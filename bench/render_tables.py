#!/usr/bin/env python3
"""Regenerates the benchmark tables of docs/levers.md from the raw JSON under bench/results/, so
no figure in them is copied by hand. Each table lives between two marker comments:

    <!-- bench-table:NAME -->
    ... (replaced on every run)
    <!-- /bench-table:NAME -->

NAME is one of: machine, peer, precision, levers (from the newest bench/results/<date>/ that
holds a machine.json, written by bench/compute_levers.py) and gpu (from the newest one that
holds a gpu_machine.json, written by bench/gpu_bench.py; smoke runs are never rendered). Text
outside the markers is left alone.

  bench/render_tables.py                      # rewrite docs/levers.md in place
  bench/render_tables.py --check              # exit 1 if docs/levers.md is not what the JSON gives
  bench/render_tables.py --results bench/results/2026-11-23 --doc docs/levers.md
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


def load(d, name):
    path = os.path.join(d, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        j = json.load(f)
    return None if j.get("smoke") else j


def newest(marker):
    """The newest results/<date>/ folder that holds `marker` (and is not a smoke run)."""
    if not os.path.isdir(RESULTS):
        return None
    for d in sorted(os.listdir(RESULTS), reverse=True):
        path = os.path.join(RESULTS, d)
        if os.path.isdir(path) and load(path, marker):
            return path
    return None


def rel(path):
    return os.path.relpath(path, ROOT)


def n0(x):
    return "n/a" if x is None else f"{x:,.0f}"


def r2(x):
    return "n/a" if x is None else f"{x:.2f}x"


def pct(x, digits=0):
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def signed(x):
    return "n/a" if x is None else f"{100 * x:+.0f}%"


def met(ok):
    return "met" if ok else "**not met**"


def runs(xs):
    return " / ".join(n0(x) for x in xs)


def span(xs):
    """'a-b' of the smallest and largest, or one figure when they agree to the unit."""
    lo, hi = f"{min(xs):.0f}", f"{max(xs):.0f}"
    return lo if lo == hi else f"{lo}-{hi}"


def not_measured(what, how):
    return f"_Not measured yet: {what}. {how}_"


def render_machine(d):
    m = load(d, "machine") if d else None
    if not m:
        return not_measured("no bench/results/<date>/machine.json", "`make bench` writes it.")
    s, e = m["doctor_start"], m["doctor_end"]
    ps, pe = m["python_matmul_start"], m["python_matmul_end"]
    lines = [
        f"Measured {m['date']} by `{m.get('command', 'bench/compute_levers.py')}` (raw JSON: `{rel(d)}/`, "
        f"alternating rounds: {m['repeats']}{', quick' if m.get('quick') else ''}; source "
        f"{(m.get('source') or {}).get('commit', 'unknown')[:12]}"
        f"{' with local changes' if (m.get('source') or {}).get('modified') else ''}).",
        "",
        f"Machine: {s['cpu']}, {m['physical_cores']} physical cores ({s['logical_cpus']} logical), "
        f"AVX-512 BF16 {'yes' if s.get('avx512_bf16') else 'no'}, AMX {'yes' if s.get('amx_bf16') else 'no'}; "
        f"PyTorch {ps['torch']} for the peer, LibTorch {s['torch_version']} in frugal {s.get('frugal_version')}.",
        "",
        "| matmul n = 1024 | fp32 GFLOP/s | bf16 GFLOP/s | bf16 / fp32 |",
        "| --- | --- | --- | --- |",
        f"| `frugal doctor`, start / end | {n0(s['matmul_fp32_gflops'])} / {n0(e['matmul_fp32_gflops'])} | "
        f"{n0(s['matmul_bf16_gflops'])} / {n0(e['matmul_bf16_gflops'])} | "
        f"{r2(s['bf16_speedup'])} / {r2(e['bf16_speedup'])} |",
        f"| PyTorch from Python (`bench/matmul_peak.py`), start / end | {n0(ps['gflops']['fp32'])} / "
        f"{n0(pe['gflops']['fp32'])} | {n0(ps['gflops']['bf16'])} / {n0(pe['gflops']['bf16'])} | "
        f"{r2(ps['bf16_over_fp32'])} / {r2(pe['bf16_over_fp32'])} |",
        "",
        f"The bf16 target below is judged against {r2(m['matmul_bf16_over_fp32'])}, the median of the doctor's "
        f"two ratios.",
    ]
    c = m.get("corpus")
    if c:
        src = "; ".join(f"{x['source']} {x['bytes']:,} B" for x in c["sources"])
        lines += ["", f"English corpus of the `mid` shape (`bench/english_text.py`): {c['bytes']:,} bytes, "
                      f"SHA-256 `{c['sha256'][:16]}…` ({src})."]
    return "\n".join(lines)


def render_peer(d):
    rows, notes = [], []
    if d:
        for shape in ("demo", "mid", "wide", "deep"):
            for dtype in ("fp32", "bf16"):
                p = load(d, f"peer_{shape}_{dtype}")
                if not p:
                    continue
                m = p["model"]
                th = p["threads"]
                comp = "n/a" if "compile_tokens_per_s" not in p else (
                    f"{n0(p['compile_tokens_per_s'])} ({th['compile']} thr.; compile {span(p['compile_s'])} s)")
                vs_c = "n/a" if "ratio_vs_compile" not in p else (
                    f"{r2(p['ratio_vs_compile'])} ({met(p['targets']['vs_compile_met'])})")
                rows.append(f"| {shape} ({m['layers']}x{m['heads']}x{m['embd']}, block {m['block']}, batch "
                            f"{m['batch']}, {p['data']}) | {dtype} | {n0(p['frugal_tokens_per_s'])} ({th['frugal']} thr.) "
                            f"| {n0(p['eager_tokens_per_s'])} ({th['eager']} thr.) | {comp} | "
                            f"{r2(p['ratio_vs_eager'])} ({met(p['targets']['vs_eager_met'])}) | {vs_c} |")
                per = f"{shape} {dtype}: frugal {runs(p['frugal_runs'])}; eager {runs(p['eager_runs'])}"
                if "compile_runs" in p:
                    per += f"; compiled {runs(p['compile_runs'])}"
                if "eager_reuse_freed_runs" in p:
                    per += (f"; eager with frugal's malloc settings {runs(p['eager_reuse_freed_runs'])} "
                            f"(median {n0(p['eager_reuse_freed_tokens_per_s'])})")
                notes.append(f"- {per}")
    if not rows:
        return not_measured("no bench/results/<date>/peer_*.json", "`make bench` writes them.")
    head = ["| shape | dtype | frugal tok/s | PyTorch eager tok/s | torch.compile tok/s | frugal / eager (target "
            "1.3x) | frugal / compile (target 1.0x) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    return "\n".join(head + rows + ["", "Per run (tokens/s, in the order they ran):", ""] + notes)


def render_precision(d):
    m = load(d, "machine") if d else None
    rows = []
    if d:
        for shape in ("demo", "mid", "wide"):
            p = load(d, f"precision_{shape}")
            if not p:
                continue
            t = (m or {}).get("bf16_target", {}).get(shape)
            share = f"{pct(t['fraction_of_matmul_ratio'])} ({met(t['met'])})" if t else "n/a (no target)"
            rows.append(f"| {shape} (embd {p['model']['embd']}) | {n0(p['fp32_tokens_per_s'])} | "
                        f"{n0(p['bf16_tokens_per_s'])} | {r2(p['speedup'])} | {share} | "
                        f"{pct(p['mfu_fp32'])} / {pct(p['mfu_bf16'])} |")
    if not rows:
        return not_measured("no bench/results/<date>/precision_*.json", "`make bench` writes them.")
    ratio = r2(m["matmul_bf16_over_fp32"]) if m else "n/a"
    head = [f"| shape | fp32 tok/s | bf16 tok/s | bf16 speed-up | share of the matmul ratio {ratio} "
            "(target 90%) | MFU fp32 / bf16 |", "| --- | --- | --- | --- | --- | --- |"]
    return "\n".join(head + rows)


def render_levers(d):
    rows = []
    if d:
        a = load(d, "activation_checkpointing")
        if a:
            rows.append(f"| activation checkpointing, 12 blocks, fp32 | {n0(a['peak_tensor_mb_none'])} MB, "
                        f"{n0(a['step_ms_none'])} ms/step | {n0(a['peak_tensor_mb_blocks'])} MB, "
                        f"{n0(a['step_ms_blocks'])} ms/step | {signed(-a['memory_saved'])} memory, "
                        f"{signed(a['time_overhead'])} time |")
        f = load(d, "fused_adamw")
        if f:
            rows.append(f"| AdamW step, {f['params'] / 1e6:.1f}M parameters (`bench/optimizer_bench`) | "
                        f"torch_adamw {f['optimizer_ms_torch']:.1f} ms | fused_adamw {f['optimizer_ms_fused']:.1f} ms | "
                        f"{r2(f['speedup'])} |")
        r = load(d, "reuse_freed")
        if r:
            rows.append(f"| `memory.reuse_freed`, demo fp32 (page faults per run) | off: {n0(r['page_faults_off'])} | "
                        f"on: {n0(r['page_faults_on'])} | {r2(r['speedup'])} tok/s |")
    if not rows:
        return not_measured("no lever results in bench/results/<date>/", "`make bench` writes them.")
    return "\n".join(["| lever | baseline | lever on | effect |", "| --- | --- | --- | --- |"] + rows)


def render_gpu(d):
    m = load(d, "gpu_machine") if d else None
    if not m:
        return not_measured("no GPU results", "On a CUDA machine: `.venv/bin/python bench/gpu_bench.py` "
                            "(writes bench/results/<date>/gpu_*.json), then `bench/render_tables.py`.")
    s = m["shape"]
    gpt2 = (s["layers"], s["heads"], s["embd"], s["vocab"], s["block"]) == (12, 12, 768, 50257, 1024)
    lines = [f"Measured {m['date']} on {m['device_name']} (raw JSON: `{rel(d)}/gpu_*.json`): "
             f"{'the GPT-2 124M shape' if gpt2 else 'GPT'} ({s['layers']} layers, {s['heads']} heads, {s['embd']} wide, vocabulary {s['vocab']}, block "
             f"{s['block']}), micro-batch {m['batch']}, {m['steps_timed']} timed steps, alternating rounds: "
             f"{m['repeats']}; matmul {m.get('matmul', {}).get('n', 8192)}^3 measured bf16 {m['matmul_bf16_tflops']:.0f} TFLOP/s, fp16 "
             f"{m['matmul_fp16_tflops']:.0f} TFLOP/s; datasheet "
             f"{m['datasheet_tflops'] if m.get('datasheet_tflops') else 'n/a'} TFLOP/s "
             f"({m.get('datasheet_source') or 'unknown GPU'}).", "",
             "| run | tokens/s | MFU (measured peak) | MFU (datasheet) | peak tensor MB | data wait |",
             "| --- | --- | --- | --- | --- | --- |"]
    for dt in ("bf16", "fp16"):
        g = load(d, f"gpu_{dt}")
        if not g:
            continue
        for side, v in g["sides"].items():
            extra = f" (compile {v['compile_s']:.0f} s)" if v.get("compile_s") else ""
            if dt == "fp16" and v.get("skipped_steps") and v["skipped_steps"][0] is not None:
                extra += f" (skipped steps {', '.join(str(x) for x in v['skipped_steps'])})"
            lines.append(f"| {dt} {side}{extra} | {n0(v['tokens_per_s'])} | {pct(v['mfu_measured_peak'], 1)} | "
                         f"{pct(v['mfu_datasheet'], 1)} | {n0(v.get('peak_tensor_mb'))} | "
                         f"{pct(v['data_wait_fraction'], 2)} |")
    a = load(d, "gpu_activation_checkpointing")
    if a:
        lines += ["", "| activation checkpointing, bf16 | peak tensor MB, none -> on | step ms, none -> on |",
                  "| --- | --- | --- |"]
        for side, v in a["sides"].items():
            lines.append(f"| {side} | {n0(v['peak_tensor_mb_none'])} -> {n0(v['peak_tensor_mb_ckpt'])} | "
                         f"{n0(v['step_ms_none'])} -> {n0(v['step_ms_ckpt'])} ({signed(v['time_overhead'])}) |")
    c = load(d, "gpu_checkpoint_stall")
    if c:
        lines += ["", f"| checkpoint every {c['every_steps']} steps, bf16 | trainer stall per save (mean / max) | "
                      "write per save | checkpoint size |", "| --- | --- | --- | --- |"]
        for mode in ("sync", "async"):
            v = c["modes"][mode]
            lines.append(f"| {mode} | {1e3 * v['stall_s_mean']:.0f} ms / {1e3 * v['stall_s_max']:.0f} ms | "
                         f"{1e3 * v['write_s_mean']:.0f} ms | {v['bytes'] / 1e6:,.0f} MB |")
    return "\n".join(lines)


RENDERERS = {"machine": render_machine, "peer": render_peer, "precision": render_precision,
             "levers": render_levers, "gpu": render_gpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "levers.md"))
    ap.add_argument("--results", default=None, help="CPU results folder (default: the newest with machine.json)")
    ap.add_argument("--gpu-results", default=None, help="GPU results folder (default: the newest with gpu_machine.json)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the doc is out of date")
    a = ap.parse_args()
    cpu = a.results or newest("machine")
    gpu = a.gpu_results or newest("gpu_machine")
    for path in (a.results, a.gpu_results):
        if path and not os.path.isdir(path):
            print(f"render_tables: results folder '{path}' does not exist", file=sys.stderr)
            return 2
    for path in (a.results, a.gpu_results):
        if path and not load(path, "machine") and not load(path, "gpu_machine"):
            print(f"render_tables: '{path}' holds no machine.json or gpu_machine.json that is not a smoke run; "
                  "its tables say 'not measured'", file=sys.stderr)
    text = open(a.doc).read()
    found = []

    def replace(mt):
        name = mt.group(1)
        if name not in RENDERERS:
            raise SystemExit(f"render_tables: {a.doc}: unknown table '{name}' (known: {', '.join(RENDERERS)})")
        found.append(name)
        body = RENDERERS[name](gpu if name == "gpu" else cpu)
        return f"<!-- bench-table:{name} -->\n{body}\n<!-- /bench-table:{name} -->"

    new = re.sub(r"<!-- bench-table:(\w+) -->.*?<!-- /bench-table:\1 -->", replace, text, flags=re.S)
    if not found:
        print(f"render_tables: {a.doc} has no <!-- bench-table:NAME --> markers", file=sys.stderr)
        return 2
    if a.check:
        if new != text:
            print(f"render_tables: {rel(a.doc)} differs from what {rel(cpu) if cpu else 'bench/results'} gives; "
                  "run bench/render_tables.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        with open(a.doc, "w") as f:
            f.write(new)
    print(f"render_tables: {rel(a.doc)}: {', '.join(found)} from {rel(cpu) if cpu else '(no CPU results)'}"
          f"{'; gpu from ' + rel(gpu) if gpu else ''}{'' if new != text else ' (unchanged)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
