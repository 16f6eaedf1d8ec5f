#!/usr/bin/env python3
"""Regenerates every measured figure of docs/levers.md, docs/tuning.md and README.md from the raw
JSON under bench/results/, so no figure in them is copied by hand. Figures live between marker
comments, a table or paragraph on lines of its own, or a span inside a sentence:

    <!-- bench-table:NAME -->
    ... (replaced on every run)
    <!-- /bench-table:NAME -->

    ... prose <!-- bench:NAME -->(replaced)<!-- /bench:NAME --> prose ...

Each NAME is rendered from the newest bench/results/<date>/ folder holding the JSON it needs
(the compute-levers tables from the newest holding machine.json, all from that one run; GPU
tables from the newest holding gpu_machine.json); smoke runs and --quick passes are never
rendered unless --allow-quick. Text outside the markers is left alone, and `--check` also fails
when a number with a unit (tok/s, ms, MB, x, %, page faults, ...) stands outside the markers
and is not on the short allow-list of bench/figure_lint.py (config defaults, targets, formula
constants): a hand-copied figure cannot creep back.

  bench/render_tables.py                      # rewrite the three docs in place
  bench/render_tables.py --check              # exit 1 if a doc is not what the JSON gives, or
                                              # holds a figure outside the markers
  bench/render_tables.py --results bench/results/2026-11-25 --doc docs/levers.md
  bench/render_tables.py --results DIR --allow-quick --write-to DIR/docs   # leave the docs alone
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import figure_lint  # noqa: E402
from compute_levers import BF16_USABLE_RATIO, bf16_emulated  # noqa: E402
from gpu_targets import render_gpu_targets  # noqa: E402

RESULTS = os.path.join(HERE, "results")
DOCS = ["docs/levers.md", "docs/tuning.md", "docs/plan.md", "docs/search.md", "docs/gpu.md", "docs/reliability.md",
        "docs/lora.md", "docs/data.md", "README.md"]
MARKER = re.compile(r"<!-- bench-table:(\w+) -->.*?<!-- /bench-table:\1 -->|<!-- bench:(\w+) -->.*?<!-- /bench:\2 -->",
                    re.S)


class Results:
    """Finds each result file: in --results when given, else in the newest bench/results/<date>/
    that holds it (the compute_levers files: the folder of the newest machine.json)."""

    def __init__(self, folder=None, gpu_folder=None, allow_quick=False):
        self.folder, self.gpu_folder, self.allow_quick = folder, gpu_folder, allow_quick
        self.used = set()

    def _load(self, d, name):
        path = os.path.join(d, name + ".json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            j = json.load(f)
        if j.get("smoke") or (j.get("quick") and not self.allow_quick):
            return None
        return j

    def _newest(self, name):
        if not os.path.isdir(RESULTS):
            return None
        for d in sorted(os.listdir(RESULTS), reverse=True):
            path = os.path.join(RESULTS, d)
            if os.path.isdir(path) and self._load(path, name):
                return path
        return None

    def folder_of(self, name):
        if name.startswith("gpu_"):
            return self.gpu_folder or self._newest("gpu_machine")
        if name in COMPUTE_LEVERS:
            return self.folder or self._newest("machine")
        return self.folder or self._newest(name)

    def get(self, name):
        d = self.folder_of(name)
        j = self._load(d, name) if d else None
        if j:
            self.used.add(rel(d))
        return j

    def path(self, name):
        d = self.folder_of(name)
        return f"{rel(d)}/{name}.json" if d else f"bench/results/<date>/{name}.json"


# The files bench/compute_levers.py writes in one run (rendered together, from one folder).
COMPUTE_LEVERS = {"machine", "activation_checkpointing", "fused_adamw", "reuse_freed"} | {
    f"precision_{s}" for s in ("demo", "mid", "wide")} | {
    f"peer_{s}_{d}" for s in ("demo", "mid", "wide", "deep") for d in ("fp32", "bf16")}


def rel(path):
    return os.path.relpath(path, ROOT)


def n0(x):
    return "n/a" if x is None else f"{x:,.0f}"


def n1(x):
    return "n/a" if x is None else f"{x:,.1f}"


def r2(x):
    return "n/a" if x is None else f"{x:.2f}x"


def r1(x):
    return "n/a" if x is None else f"{x:.1f}x"


def pct(x, digits=0):
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def signed(x):
    return "n/a" if x is None else f"{100 * x:+.0f}%"


def ms(s):
    return f"{1e3 * s:,.0f} ms"


def met(ok):
    return "met" if ok else "**not met**"


def runs(xs, fmt=n0):
    return " / ".join(fmt(x) for x in xs)


def span(xs):
    """'a-b' of the smallest and largest, or one figure when they agree to the unit."""
    lo, hi = f"{min(xs):.0f}", f"{max(xs):.0f}"
    return lo if lo == hi else f"{lo}-{hi}"


def commit(j):
    src = j.get("source") or {}
    return f"{src.get('commit', 'unknown')[:12]}{' with local changes' if src.get('modified') else ''}"


def provenance(j, path):
    """'`COMMAND`, DATE, source C, raw JSON `PATH`' of a result file."""
    return f"`{j.get('command', '?')}`, {j['date']}, source {commit(j)}; raw JSON `{path}`"


def machine_line(j):
    """'CPU, N physical cores (load average a at the start, b at the end)' of a result file."""
    m = j.get("machine") or {}
    load, end = m.get("loadavg_1_5_15"), j.get("machine_end_loadavg_1_5_15")
    loads = ""
    if load:
        loads = f" (load average {load[0]:.1f} at the start" + (f", {end[0]:.1f} at the end)" if end else ")")
    return f"{m.get('cpu', 'unknown CPU')}, {m.get('physical_cores', '?')} physical cores{loads}"


def not_measured(what, how="`make bench` writes it."):
    return f"_Not measured yet: {what}. {how}_"


def not_measured_span(name):
    return f"(not measured yet: `make bench` writes {name}.json)"


# ---- compute_levers.py: machine, peer, precision, other levers ------------------------------

def render_machine(R):
    m = R.get("machine")
    if not m:
        return not_measured("no bench/results/<date>/machine.json")
    s, e = m["doctor_start"], m["doctor_end"]
    ps, pe = m["python_matmul_start"], m["python_matmul_end"]
    lines = [
        f"Measured {m['date']} by `{m.get('command', 'bench/compute_levers.py')}` (raw JSON: "
        f"`{os.path.dirname(R.path('machine'))}/`, alternating rounds: {m['repeats']}"
        f"{', quick' if m.get('quick') else ''}; source {commit(m)}; {m['bench_seconds'] / 60:.0f} min).",
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
    if bf16_unusable(m):
        lines[-1] = f"bf16 rows skipped on this machine: {bf16_unusable(m)}."
    c = m.get("corpus")
    if c:
        src = "; ".join(f"{x['source']} {x['bytes']:,} B" for x in c["sources"])
        lines += ["", f"English corpus of the `mid` shape (`bench/english_text.py`): {c['bytes']:,} bytes, "
                      f"SHA-256 `{c['sha256'][:16]}…` ({src})."]
    return "\n".join(lines)


def render_peer(R):
    rows, notes = [], []
    for shape in ("demo", "mid", "wide", "deep"):
        for dtype in ("fp32", "bf16"):
            p = R.get(f"peer_{shape}_{dtype}")
            if not p:
                continue
            m = p["model"]
            th = p["threads"]
            comp = "n/a" if "compile_tokens_per_s" not in p else (
                f"{n0(p['compile_tokens_per_s'])} ({th['compile']} thr.; compile {span(p['compile_s'])} s)")
            vs_c = "n/a" if "ratio_vs_compile" not in p else (
                f"{r2(p['ratio_vs_compile'])} ({met(p['targets']['vs_compile_met'])})")
            ceiling = "n/a" if "ceiling_vs_eager" not in p else (
                f"{r2(p['ceiling_vs_eager'])} ({p['matmul_floor']['floor_ms_median']:.0f} of "
                f"{p['matmul_floor']['eager_step_ms_median']:.0f} ms)")
            rows.append(f"| {shape} ({m['layers']}x{m['heads']}x{m['embd']}, block {m['block']}, batch "
                        f"{m['batch']}, {p['data']}) | {dtype} | {n0(p['frugal_tokens_per_s'])} ({th['frugal']} thr.) "
                        f"| {n0(p['eager_tokens_per_s'])} ({th['eager']} thr.) | {comp} | "
                        f"{r2(p['ratio_vs_eager'])} ({met(p['targets']['vs_eager_met'])}) | {vs_c} | {ceiling} |")
            per = f"{shape} {dtype}: frugal {runs(p['frugal_runs'])}; eager {runs(p['eager_runs'])}"
            if "ratio_vs_eager_rounds" in p:
                per += f"; frugal / eager per round {', '.join(r2(x) for x in p['ratio_vs_eager_rounds'])}"
            if "compile_runs" in p:
                per += f"; compiled {runs(p['compile_runs'])}"
            if "eager_reuse_freed_runs" in p:
                per += (f"; eager with frugal's malloc settings {runs(p['eager_reuse_freed_runs'])} "
                        f"(median {n0(p['eager_reuse_freed_tokens_per_s'])})")
            if "matmul_floor" in p:
                per += f"; matmul floor (ms per step) {', '.join(f'{x:.0f}' for x in p['matmul_floor']['floor_runs_ms'])}"
            notes.append(f"- {per}")
    if not rows:
        return not_measured("no bench/results/<date>/peer_*.json")
    head = ["| shape | dtype | frugal tok/s | PyTorch eager tok/s | torch.compile tok/s | frugal / eager (target "
            "1.3x) | frugal / compile (target 1.0x) | ceiling over eager (matmul floor of eager's step) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    why = ("frugal / eager and frugal / compile: the median over the alternating rounds of each round's ratio "
           "(the sides of a round run back to back, on the same state of a shared machine). "
           "The ceiling is eager's step time over the step's matmuls alone (`bench/matmul_floor.py`, the same "
           "linear and head products at eager's thread count, alternating with the sides): no loop that runs those products "
           "through the same BLAS can be faster than eager by more. n/a: measured before the floor was.")
    return "\n".join(head + rows + ["", why, "", "Per run (tokens/s, in the order they ran):", ""] + notes)


def bf16_unusable(m):
    """Why the bench's machine has no bf16 rows, or None: the skip its run recorded, or, for a run
    that recorded none (asked for no bf16 rows), the same test on the doctor's figures."""
    if not m:
        return None
    if m.get("bf16_skipped"):
        return m["bf16_skipped"]["reason"]
    s = m.get("doctor_start") or {}
    if "bf16_speedup" in s and s["bf16_speedup"] < BF16_USABLE_RATIO:
        return bf16_emulated(s)
    return None


def mfu_of_best_peak(m, p, dt):
    """Model FLOP utilisation of a precision row against the faster of the doctor's two n = 1024
    matmul rates (the run's start and end): a shared core measured slow at one of them would put
    the MFU over 100%. Files without the doctor's figures keep the MFU they were written with."""
    peaks = [(m or {}).get(k, {}).get(f"matmul_{dt}_gflops") for k in ("doctor_start", "doctor_end")]
    peaks = [x for x in peaks if x]
    if not peaks or not p.get("flops_per_token"):
        return p.get(f"mfu_{dt}")
    return p[f"{dt}_tokens_per_s"] * p["flops_per_token"] / (max(peaks) * 1e9)


def render_precision(R):
    m = R.get("machine")
    rows = []
    for shape in ("demo", "mid", "wide"):
        p = R.get(f"precision_{shape}")
        if not p:
            continue
        t = (m or {}).get("bf16_target", {}).get(shape)
        share = f"{pct(t['fraction_of_matmul_ratio'])} ({met(t['met'])})" if t else "n/a (no target)"
        mfu = [mfu_of_best_peak(m, p, dt) for dt in ("fp32", "bf16")]
        rows.append(f"| {shape} (embd {p['model']['embd']}) | {n0(p['fp32_tokens_per_s'])} | "
                    f"{n0(p['bf16_tokens_per_s'])} | {r2(p['speedup'])} | {share} | "
                    f"{pct(mfu[0])} / {pct(mfu[1])} |")
    if not rows and bf16_unusable(m):
        return f"Not measured in this run: {bf16_unusable(m)}."
    if not rows:
        return not_measured("no bench/results/<date>/precision_*.json")
    ratio = r2(m["matmul_bf16_over_fp32"]) if m else "n/a"
    head = [f"| shape | fp32 tok/s | bf16 tok/s | bf16 speed-up | share of the matmul ratio {ratio} "
            "(target 90%) | MFU fp32 / bf16 (of the doctor's best matmul rate) |",
            "| --- | --- | --- | --- | --- | --- |"]
    return "\n".join(head + rows)


def render_levers(R):
    rows = []
    a = R.get("activation_checkpointing")
    if a:
        rows.append(f"| activation checkpointing, 12 blocks, fp32 | {n0(a['peak_tensor_mb_none'])} MB, "
                    f"{n0(a['step_ms_none'])} ms/step | {n0(a['peak_tensor_mb_blocks'])} MB, "
                    f"{n0(a['step_ms_blocks'])} ms/step | {signed(-a['memory_saved'])} memory, "
                    f"{signed(a['time_overhead'])} time |")
    f = R.get("fused_adamw")
    if f:
        rows.append(f"| AdamW step, {f['params'] / 1e6:.1f}M parameters (`bench/optimizer_bench.cpp`) | "
                    f"torch_adamw {f['optimizer_ms_torch']:.1f} ms | fused_adamw {f['optimizer_ms_fused']:.1f} ms | "
                    f"{r2(f['speedup'])} |")
    r = R.get("reuse_freed")
    if r:
        rows.append(f"| `memory.reuse_freed`, demo fp32 (page faults per run) | off: {n0(r['page_faults_off'])} | "
                    f"on: {n0(r['page_faults_on'])} | {r2(r['speedup'])} tok/s |")
    if not rows:
        return not_measured("no lever results in bench/results/<date>/")
    return "\n".join(["| lever | baseline | lever on | effect |", "| --- | --- | --- | --- |"] + rows)


def render_reuse_freed(R):
    r = R.get("reuse_freed")
    if not r:
        return not_measured_span("reuse_freed")
    s = r["speedup"]
    verdict = ("no speed difference this machine can resolve" if abs(s - 1) < 0.05 else
               f"{'faster' if s > 1 else 'slower'} by {abs(100 * (s - 1)):.0f}%")
    return (f"in `make bench` ({r['date']}, {r['repeats']} alternating pairs of demo runs, fp32; "
            f"`{R.path('reuse_freed')}`): {n0(r['page_faults_off'])} page faults per run with `reuse_freed = false`, "
            f"{n0(r['page_faults_on'])} with the default ({signed(r['page_faults_on'] / r['page_faults_off'] - 1)}), "
            f"and throughput {r2(s)}, {verdict}")


def render_fused_adamw(R):
    f = R.get("fused_adamw")
    if not f:
        return not_measured_span("fused_adamw")
    return (f"{r2(f['speedup'])} faster than `torch::optim::AdamW` for a {f['params'] / 1e6:.1f}M-parameter GPT on "
            f"this CPU ({f['optimizer_ms_fused']:.1f} vs {f['optimizer_ms_torch']:.1f} ms per step, medians of "
            f"alternating rounds; {f['date']}, `{R.path('fused_adamw')}`)")


# ---- the other CPU benchmarks ---------------------------------------------------------------

def render_threads(R):
    t = R.get("threads")
    if not t:
        return not_measured("no bench/results/<date>/threads.json", "`bench/threads_bench.py` writes it.")
    m = t["model"]
    lines = [f"Measured by {provenance(t, R.path('threads'))}; {machine_line(t)}. Demo GPT ({m['layers']} layers x "
             f"{m['embd']} wide, block {m['block']}, micro-batch {m['batch']}), fp32, {t['steps_timed']} timed steps "
             f"per run, medians of {t['repeats']} alternating rounds:", "",
             "| setting | tokens/s (median) | per run |", "| --- | --- | --- |"]
    for s in t["settings"]:
        # Results measured while frugal set passive workers for every process call that row
        # "(what frugal does)"; frugal now sets them only for ranks that share a machine.
        label = s["label"].replace(" (what frugal does)", " (what frugal sets for ranks that share a machine)")
        lines.append(f"| {label} | {n0(s['tokens_per_s'])} | {runs(s['runs'])} |")
    if "passive_over_default_policy" in t:
        lines += ["", f"Passive workers against the default wait policy: {r2(t['passive_over_default_policy'])}; "
                      f"against one thread: {r2(t['passive_over_one_thread'])}."]
    return "\n".join(lines)


def render_checkpoint_stall(R):
    c = R.get("checkpoint_stall")
    if not c:
        return not_measured("no bench/results/<date>/checkpoint_stall.json", "`bench/checkpoint_stall.py` writes it.")
    s, a = c["modes"]["sync"], c["modes"]["async"]
    lines = [f"Measured by {provenance(c, R.path('checkpoint_stall'))}; {machine_line(c)}. GPT 8 layers, embd 256, "
             f"{c['params'] / 1e6:.1f}M parameters, {s['bytes'] / 1e6:,.0f} MB per checkpoint with AdamW moments, "
             f"a save every {c['every_steps']} of {c['steps']} steps ({s['saves']} saves per run), fp32; medians of "
             f"{c['repeats']} alternating rounds:", "",
             "| mode | trainer stall per save (mean / max) | write time per save | run wall time |",
             "| --- | --- | --- | --- |",
             f"| sync | {ms(s['stall_s_mean'])} / {ms(s['stall_s_max'])} | {ms(s['write_s_mean'])} | "
             f"{s['wall_s']:.1f} s |",
             f"| async | {ms(a['stall_s_mean'])} / {ms(a['stall_s_max'])} | {ms(a['write_s_mean'])} (in the "
             f"background) | {a['wall_s']:.1f} s |"]
    return "\n".join(lines)


def render_checkpoint_wall(R):
    c = R.get("checkpoint_stall")
    if not c:
        return not_measured_span("checkpoint_stall")
    s, a = c["modes"]["sync"]["wall_s"], c["modes"]["async"]["wall_s"]
    return f"total wall time of the runs above: {s:.1f} s sync, {a:.1f} s async ({signed(a / s - 1)})"


def render_smoke_time(R):
    d = R.get("demo_run")
    if not d:
        return not_measured_span("demo_run")
    return (f"{d['smoke_s']:.1f} s for the demo model from start to exit (median of {d['repeats']}; "
            f"{d['date']}, `{R.path('demo_run')}`)")


def render_loader(R):
    j = R.get("loader")
    if not j:
        return not_measured("no bench/results/<date>/loader.json", "`bench/loader_bench.py` writes it.")
    c, t, d = j["loader_bench"], j["torch"], j["data_wait"]
    lines = [f"Measured by {provenance(j, R.path('loader'))}; {machine_line(j)}"
             f"{'' if j.get('root') else '; not as root, so without the cold-cache rows'}. One shuffled epoch of "
             f"{c['records']:,} image records (3x32x32 uint8 + int64 label, {c['record_bytes']:,} bytes), batch "
             f"{c['batch']}, {c['workers']} workers, prefetch 4; medians of {c['rounds']} alternating rounds:", "",
             "| path | samples/s (median) | shard vs this path |", "|---|---|---|",
             f"| raw record bytes from one record shard, page cache warm | {n0(c['raw_shard_samples_per_s_median'])} | |",
             f"| raw record bytes from {c['records']:,} small files (open/read/close in C++), page cache warm | "
             f"{n0(c['raw_files_samples_per_s_median'])} | {r1(c['raw_shard_vs_small_files'])} |",
             f"| training batches (float ({c['batch']}, 3, 32, 32) + labels) from the shard, `RecordSource` | "
             f"{n0(c['source_shard_samples_per_s_median'])} | |",
             f"| the same batches from the small files (C++, same conversion), page cache warm | "
             f"{n0(c['source_files_samples_per_s_median'])} | {r1(c['source_shard_vs_small_files'])} |",
             f"| the same small files through a PyTorch `DataLoader` (map-style Dataset, 2 workers; PyTorch "
             f"{t['torch_version']}), against the shard's batches in the same rounds ({n0(t['frugal_source_shard_samples_per_s_median'])}) | "
             f"{n0(t['torch_dataloader_small_files_samples_per_s_median'])} | {r1(t['shard_vs_torch_dataloader'])} |"]
    cold = "cold_raw_shard_samples_per_s_median" in c
    if cold:
        lines += [f"| first epoch from disk (page cache dropped): raw bytes from the shard | "
                  f"{n0(c['cold_raw_shard_samples_per_s_median'])} | |",
                  f"| first epoch from disk: raw bytes from the small files | "
                  f"{n0(c['cold_raw_files_samples_per_s_median'])} | {r1(c['cold_raw_shard_vs_small_files'])} |"]
    lines += ["", f"Against the target (at least 10x the small-file path): the PyTorch `DataLoader` over the same "
                  f"files is {r1(t['shard_vs_torch_dataloader'])} slower than the shard"
              + (f", and a first epoch from disk {r1(c['cold_raw_shard_vs_small_files'])} (one open and a random read "
                 f"per sample, against a memory map read ahead in large pages)" if cold else "")
              + f". The strongest possible small-file reader (C++, no per-file allocation, every file already in "
                f"RAM) narrows the gap to {r1(c['raw_shard_vs_small_files'])} on raw bytes and "
                f"{r1(c['source_shard_vs_small_files'])} on finished batches, where both paths spend most of their "
                f"time converting pixels to float."]
    lines += ["", f"Data wait in training (same run): the demo GPT on token shards ({d['data']}, {d['steps']} steps) "
                  f"waited for data {pct(d['fp32']['data_wait_fraction'], 2)} of step time in fp32 "
                  f"({n0(d['fp32']['tokens_per_s'])} tok/s) and {pct(d['bf16']['data_wait_fraction'], 2)} in bf16 "
                  f"({n0(d['bf16']['tokens_per_s'])} tok/s), against a target of 2%."]
    k1, k2 = "image_prepare_decode_images_per_s_threads_{}_median", "image_prepare_total_images_per_s_threads_{}_median"
    lines += ["", f"`prepare` throughput, 1 vs 2 threads (medians of {c['rounds']} alternating rounds): "
                  f"`--format images` ({c['image_prepare_images']:,} {c['image_prepare_source']}) decoded "
                  f"{n0(c[k1.format(1)])} vs {n0(c[k1.format(2)])} images/s ({n0(c[k2.format(1)])} vs "
                  f"{n0(c[k2.format(2)])} images/s end to end, shard writing included)"]
    if "corpus_mb" in c:
        b, sp = "prepare_bytes_{}_mb_per_s_threads_{}", "prepare_sentencepiece_4000_{}_mb_per_s_threads_{}"
        lines[-1] += (f"; the byte tokenizer tokenised a {c['corpus_mb']:.1f} MB corpus at "
                      f"{n0(c[b.format('tokenise', 1)])} vs {n0(c[b.format('tokenise', 2)])} MB/s "
                      f"({n0(c[b.format('total', 1)])} vs {n0(c[b.format('total', 2)])} MB/s end to end: reading, "
                      f"hashing and writing included); SentencePiece ({c.get('sentencepiece_vocab', 4000)} pieces) "
                      f"{n1(c[sp.format('tokenise', 1)])} vs {n1(c[sp.format('tokenise', 2)])} MB/s.")
    else:
        lines[-1] += "."
    return "\n".join(lines)


def render_dist(R):
    j = R.get("dist")
    if not j:
        return not_measured("no bench/results/<date>/dist.json", "`bench/dist_bench.py` writes it.")
    r = j["runs"]
    lines = [f"Measured by {provenance(j, R.path('dist'))}; {machine_line(j)}. {j['params'] / 1e6:.2f}M parameters, "
             f"fp32, {j['steps']} steps, medians of {j['repeats']} alternating rounds:", "",
             "| run | step ms | communication (ms/step) | communication / step time | AdamW state per rank |"
             + (" training state per rank (parameters + gradients + moments) |" if "zero2" in r else ""),
             "| --- | --- | --- | --- | --- |" + (" --- |" if "zero2" in r else "")]
    for name in [n for n in ("single", "dp", "zero", "zero2", "zero3", "zero3_keep") if n in r]:
        v = r[name]
        if "comm_fraction" in v:
            parts = [f"{'reduce' if name in ('zero2', 'zero3', 'zero3_keep') else 'all-reduce'} wait "
                     f"{v['allreduce_wait_ms_per_step']:.1f}"]
            if v.get("zero_gather_ms_per_step"):
                parts.append(f"parameter all-gather {v['zero_gather_ms_per_step']:.1f}")
            parts.append(f"agreement {v['agree_ms_per_step']:.1f}")
            comm = f"{v['comm_ms_per_step']:.1f} ({', '.join(parts)})"
            frac = pct(v["comm_fraction"], 1)
        else:
            comm = frac = "—"
        state = f"{v['optimizer_state_mb_per_rank']:.2f} MB"
        if name == "zero":
            state += f" ({j['zero1_state_ratio']:.2f} x)"
        total = ""
        if "zero2" in r:
            total = (f" {v['state_total_mb_per_rank']:.2f} MB ({v['state_parameters_mb_per_rank']:.2f} + "
                     f"{v['state_gradients_mb_per_rank']:.2f} + {v['state_optimizer_mb_per_rank']:.2f}) |")
        lines.append(f"| {v['label']} | {n0(v['step_ms'])} | {comm} | {frac} | {state} |{total}")
    b = r["dp"].get("buckets")
    if b:
        lines += ["", f"Gradients went in {b} all-reduce buckets per step."]
    if "zero2_over_zero1_step_time" in j:
        ratio = j["zero2_over_zero1_step_time"]
        met = "met" if ratio <= j["zero2_over_zero1_step_time_target"] else "not met"
        lines += ["", f"ZeRO-2's step time is {ratio:.2f}x ZeRO-1's (median of the per-round ratios; target at most "
                      f"{j['zero2_over_zero1_step_time_target']:.2f}x: {met}); one rank holds "
                      f"{j['zero2_state_ratio']:.2f}x the training state of plain data parallel."]
    if "zero3_over_zero1_step_time" in j:
        ratio = j["zero3_over_zero1_step_time"]
        met = "met" if ratio <= j["zero3_over_zero1_step_time_target"] else "not met"
        lines += ["", f"ZeRO-3's step time is {ratio:.2f}x ZeRO-1's (target at most "
                      f"{j['zero3_over_zero1_step_time_target']:.2f}x: {met}); one rank holds "
                      f"{j['zero3_state_ratio']:.2f}x the training state of plain data parallel (its parameter "
                      "all-gather column includes the blocks' gathers, two per block and micro-batch)."]
    if "zero3_keep_over_zero3_step_time" in j:
        k, z = r["zero3_keep"], r["zero3"]
        lines += ["", f"With `dist.reshard_after_forward = false` (each block kept whole from its forward to its "
                      f"backward), ZeRO-3's step time is {j['zero3_keep_over_zero3_step_time']:.2f}x the default's, "
                      f"with {k['block_gathers_per_step']:.0f} block gathers a step instead of "
                      f"{z['block_gathers_per_step']:.0f}; the largest rank's peak of live tensor memory is "
                      f"{k['peak_tensor_mb_per_rank']:.1f} MB against {z['peak_tensor_mb_per_rank']:.1f} MB."]
    return "\n".join(lines)


def render_stacked_levers(R):
    j = R.get("stacked_levers")
    if not j:
        return not_measured("no bench/results/<date>/stacked_levers.json", "`bench/stacked_levers.py` writes it.")
    p = j["price"]
    lines = [f"Measured by {provenance(j, R.path('stacked_levers'))}; {machine_line(j)}. Data: {j['data']}; "
             f"{j['steps_timed']} timed steps per run, all rows alternating, medians of {j['repeats']} rounds; $ at "
             f"`{p['instance']}` in `{p['table']}` ({p['provider']}, on-demand ${p['usd_per_hour']:.2f}/h)."]
    for s in j["shapes"]:
        m = s["model"]
        lines += ["", f"**{s['shape']}** ({m['layers']} layers x {m['heads']} heads x {m['embd']} wide, block "
                      f"{m['block']}, micro-batch {m['batch']}):", "",
                  "| configuration (each row adds one lever) | tokens/s | vs row above | peak tensor MB | "
                  "$ per 1M tokens |", "| --- | --- | --- | --- | --- |"]
        for r in s["rows"]:
            vs = "—" if "speedup_vs_previous" not in r else (
                f"{r2(r['speedup_vs_previous'])} tok/s, {signed(r['memory_vs_previous'])} memory")
            lever = f" (`{r['lever']}`)" if r["lever"] != "baseline" else ""
            lines.append(f"| {r['label']}{lever} | {n0(r['tokens_per_s'])} | {vs} | {n1(r['peak_tensor_mb'])} | "
                         f"${r['usd_per_million_tokens']:.3g} |")
        lines += ["", f"Last row against the baseline: {r2(s['speedup_total'])} tokens/s; the fastest row "
                      f"(\"{s['fastest_row']}\") {r2(s['fastest_speedup_vs_baseline'])}."]
    lines += ["", "Not in this CPU table (they need a GPU): " + "; ".join(j["gpu_only_levers"]) + "."]
    return "\n".join(lines)


# ---- docs/tuning.md and README.md -----------------------------------------------------------

def render_dynamic_batching(R):
    j = R.get("dynamic_batching")
    if not j:
        return not_measured("no bench/results/<date>/dynamic_batching.json", "`bench/dynamic_batching.py` writes it.")
    s = j["strategies"]
    lines = [f"Measured by {provenance(j, R.path('dynamic_batching'))}; {machine_line(j)}. {j['documents']} "
             f"documents ({j['documents_source']}), {j['document_tokens']:,} document tokens, block {j['block']}, "
             f"{j['rows_per_batch']} rows per batch, {j['model']}; target tokens/s are medians of {j['repeats']} "
             f"rounds (the strategies in turn):", "",
             "| strategy | batches | padding fraction | target tokens | target tokens/s (median; per round) |",
             "| --- | --- | --- | --- | --- |"]
    for name, v in s.items():
        lines.append(f"| {name} | {v['batches']} | {v['padding_fraction']:.3f} | {v['target_tokens']:,} | "
                     f"{n0(v['target_tokens_per_s'])} ({', '.join(n0(x) for x in v['target_tokens_per_s_runs'])}) |")
    lines += ["", f"The padding fractions are exact and do not depend on the machine. Packing computes "
                  f"{pct(j['positions_pack_over_pad'])} and bucketing {pct(j['positions_bucket_over_pad'])} of the "
                  f"positions naive padding computes, and at this document-length distribution they train on "
                  f"{r1(j['speedup_pack_over_pad'])} (packing) and {r1(j['speedup_bucket_over_pad'])} (bucketing) "
                  f"the useful tokens per second of padding."]
    return "\n".join(lines)


def render_demo_rss(R):
    d = R.get("demo_run")
    if not d:
        return not_measured_span("demo_run")
    s = d["summary"]
    return (f"the demo run of `bench/demo_run.py` peaked at {n0(s['peak_rss_mb'])} MB resident against "
            f"{n1(s['peak_tensor_mb'])} MB of tensors; {d['date']}")


def render_demo_time(R):
    d = R.get("demo_run")
    if not d:
        return not_measured_span("demo_run")
    s = d["summary"]
    return (f"{s['steps']} steps in {d['train_process_s']:.0f} s from start to exit ({n0(s['tokens_per_s'])} tok/s, "
            f"{s['precision']}; {d['machine']['cpu']}, {d['machine']['physical_cores']} cores; {d['date']}, "
            f"`{R.path('demo_run')}`)")


def render_first_run(R):
    d = R.get("first_run")
    if not d:
        return not_measured_span("first_run")
    m, sec = divmod(round(d["make_demo_s"]), 60)
    bm, bs = divmod(round(d["build_and_rest_s"]), 60)
    return (f"`make demo` in a fresh clone took {m}:{sec:02d} ({d['venv_run_s']} s for `.venv/` with "
            f"{d.get('installer', 'pip')}, {bm}:{bs:02d} to build, {d['demo_train_wall_s']:.0f} s to train; the Debian "
            f"packages were already installed, no package cache, no ccache; {d['machine']['cpu']}, "
            f"{d['machine']['physical_cores']} cores; {d['date']}, "
            f"`{R.path('first_run')}`); `make test` then adds {d['make_test_adds_install_s']:.0f} s of installs")


def render_venv_size(R):
    d = R.get("demo_run")
    if not d or not d.get("venv_bytes"):
        return not_measured_span("demo_run")
    return f"{d['venv_bytes'] / 1e9:.1f} GB on disk"


def render_tune_demo(R):
    j = R.get("tune_demo")
    if not j:
        return not_measured("no bench/results/<date>/tune_demo.json", "`bench/tune_demo.py` writes it.")
    u = j["unbounded"]
    return "\n".join([f"The demo config with a short probe, measured by {provenance(j, R.path('tune_demo'))}; "
                      f"{machine_line(j)}:", "", f"`{u['command']}`", "", "```", u["console"], "```"])


def render_tune_demo_notes(R):
    j = R.get("tune_demo")
    if not j:
        return not_measured("no bench/results/<date>/tune_demo.json", "`bench/tune_demo.py` writes it.")
    u, b = j["unbounded"]["report"], j["default_bound"]["report"]
    ran = [c for c in u["candidates"] if c.get("ran")]
    losses = [c["loss"] for c in ran]
    spread = (max(losses) - min(losses)) / min(losses)
    probe = next((s.split("=")[1] for s in j["unbounded"]["sets"] if s.startswith("tune.probe_steps=")), "?")
    text = (f"The probe losses of the {len(ran)} candidates agree within {spread:.1e} (relative) after {probe} "
            f"steps")
    chosen = next(c for c in u["candidates"] if c["label"] == u["chosen"])
    ref = next((c for c in u["candidates"] if c["label"].startswith("fp32 recompute=none")), None)
    verb = "stays" if "(as configured)" in chosen["label"] else "is chosen"
    if ref and ref is not chosen and chosen.get("check_loss") and ref.get("check_loss"):
        d = abs(chosen["check_loss"] - ref["check_loss"]) / ref["check_loss"]
        text += (f"; after the loss check's steps `{chosen['label']}` is within {100 * d:.2g}% of fp32's loss, "
                 f"so it {verb}")
    else:
        text += f"; `{u['chosen']}` {verb}"
    skipped = [c for c in b["candidates"] if not c.get("ran")]
    last = [ln for ln in j["default_bound"]["console"].splitlines() if ln.startswith("tuning took")]
    text += (f". With the default bound, the same command without `tune.max_fraction=1` ran "
             f"{len(b['candidates']) - len(skipped)} of the {len(b['candidates'])} candidates in {b['rounds']} "
             f"round(s)")
    if skipped:
        text += f" and skipped {len(skipped)} (`{skipped[0]['note']}`)"
    text += f"; it reported `{b['loss_check']}`" if b.get("loss_check") else ""
    text += (f" and `{last[0]}`" if last else "")
    text += (f": a demo run projected at {b['projected_run_s']:.0f} s leaves tuning little room.")
    return text


def render_gpu(R):
    m = R.get("gpu_machine")
    if not m:
        return not_measured("no GPU results", "On a CUDA machine: `.venv/bin/python bench/gpu_bench.py` "
                            "(writes bench/results/<date>/gpu_*.json), then `bench/render_tables.py`.")
    d = os.path.dirname(R.path("gpu_machine"))
    s = m["shape"]
    gpt2 = (s["layers"], s["heads"], s["embd"], s["vocab"], s["block"]) == (12, 12, 768, 50257, 1024)
    lines = [f"Measured {m['date']} on {m['device_name']} (raw JSON: `{d}/gpu_*.json`): "
             f"{'the GPT-2 124M shape' if gpt2 else 'GPT'} ({s['layers']} layers, {s['heads']} heads, {s['embd']} wide, "
             f"vocabulary {s['vocab']}, block "
             f"{s['block']}), micro-batch {m['batch']}, {m['steps_timed']} timed steps, alternating rounds: "
             f"{m['repeats']}; matmul {m.get('matmul', {}).get('n', 8192)}^3 measured bf16 {m['matmul_bf16_tflops']:.0f} "
             f"TFLOP/s, fp16 {m['matmul_fp16_tflops']:.0f} TFLOP/s; datasheet "
             f"{m['datasheet_tflops'] if m.get('datasheet_tflops') else 'n/a'} TFLOP/s "
             f"({m.get('datasheet_source') or 'unknown GPU'}).", "",
             "| run | tokens/s | MFU (measured peak) | MFU (datasheet) | peak tensor MB | data wait |",
             "| --- | --- | --- | --- | --- | --- |"]
    for dt in ("bf16", "fp16"):
        g = R.get(f"gpu_{dt}")
        if not g:
            continue
        for side, v in g["sides"].items():
            extra = f" (compile {v['compile_s']:.0f} s)" if v.get("compile_s") else ""
            if dt == "fp16" and v.get("skipped_steps") and v["skipped_steps"][0] is not None:
                extra += f" (skipped steps {', '.join(str(x) for x in v['skipped_steps'])})"
            lines.append(f"| {dt} {side}{extra} | {n0(v['tokens_per_s'])} | {pct(v['mfu_measured_peak'], 1)} | "
                         f"{pct(v['mfu_datasheet'], 1)} | {n0(v.get('peak_tensor_mb'))} | "
                         f"{pct(v['data_wait_fraction'], 2)} |")
    lines += ["", "Sides: `frugal` is frugal on ATen's operators (`model.kernels = \"aten\"`); `frugal_kernels` on its "
                  "CUDA kernels, which `model.kernels = \"auto\"` runs on a one-process GPU run; `_graphs` adds "
                  "`train.cuda_graphs`, `_fp8` `precision.mode = \"fp8\"`; `eager` and `compile` are the same model "
                  "in plain PyTorch (`bench/peer_gpt.py`)."]
    ratios = []
    for dt in ("bf16", "fp16"):
        g = R.get(f"gpu_{dt}")
        sides = g["sides"] if g else {}
        if "frugal" not in sides:
            continue
        for peer, label in (("eager", "PyTorch eager"), ("eager_padded", "PyTorch eager with the head padded by hand"),
                            ("compile", "torch.compile"),
                            ("compile_max_autotune", "torch.compile mode \"max-autotune\""),
                            ("frugal_unpadded", "frugal with model.head_multiple = 1")):
            if peer in sides and sides[peer]["tokens_per_s"]:
                ratios.append(f"{dt} {sides['frugal']['tokens_per_s'] / sides[peer]['tokens_per_s']:.2f}x {label}")
    if ratios:
        lines += ["", "frugal's tokens/s against: " + ", ".join(ratios) + "."]
    g = R.get("gpu_bf16")
    kern = g["sides"] if g and "frugal_kernels" in g["sides"] else None
    if kern:
        against = [f"{kern['frugal_kernels']['tokens_per_s'] / kern[p]['tokens_per_s']:.2f}x {label}"
                   for p, label in (("frugal", "frugal on ATen"), ("eager", "PyTorch eager"), ("compile", "torch.compile"),
                                    ("compile_max_autotune", "torch.compile mode \"max-autotune\""))
                   if p in kern and kern[p]["tokens_per_s"]]
        lines += ["", "frugal on its CUDA kernels (model.kernels = frugal), bf16, against: " + ", ".join(against) + "."]
    lines += render_gpu_llama_offload(R)
    y = R.get("gpu_sync_every")
    if y:
        n = y["sync_every"]
        lines += ["", f"| loss read every {n} steps, bf16 (timed over windows of {n} steps) | tokens/s | "
                      "MFU (measured peak) |", "| --- | --- | --- |"]
        for side, v in y["sides"].items():
            how = f"train.log_every = {n}" if side.startswith("frugal") else f"loss.item() every {n} steps"
            lines.append(f"| {side} ({how}) | {n0(v['tokens_per_s'])} | {pct(v['mfu_measured_peak'], 1)} |")
        if y.get("frugal_over_eager"):
            lines += ["", f"frugal's tokens/s against PyTorch eager, both reading the loss every {n} steps: "
                          f"{y['frugal_over_eager']:.2f}x."]
    a = R.get("gpu_activation_checkpointing")
    if a:
        lines += ["", "| activation checkpointing, bf16 | peak tensor MB, none -> on | step ms, none -> on |",
                  "| --- | --- | --- |"]
        for side, v in a["sides"].items():
            lines.append(f"| {side} | {n0(v['peak_tensor_mb_none'])} -> {n0(v['peak_tensor_mb_ckpt'])} | "
                         f"{n0(v['step_ms_none'])} -> {n0(v['step_ms_ckpt'])} ({signed(v['time_overhead'])}) |")
    c = R.get("gpu_checkpoint_stall")
    if c:
        each = any(v.get("stall_s_each") for v in c["modes"].values() if isinstance(v, dict))
        lines += ["", f"| checkpoint every {c['every_steps']} steps, bf16 | trainer stall per save (mean / max) | "
                      + ("stall of each save, in order (first round) | " if each else "")
                      + "write per save | checkpoint size |", "| --- | --- | --- | --- |" + (" --- |" if each else "")]
        for mode in [x for x in ("sync", "async") if x in c["modes"]]:
            v = c["modes"][mode]
            listed = v.get("stall_s_each") or []
            per_save = ((", ".join(f"{1e3 * x:,.0f}" for x in listed) + " ms" if listed else "n/a") + " | ") if each else ""
            lines.append(f"| {mode} | {1e3 * v['stall_s_mean']:.0f} ms / {1e3 * v['stall_s_max']:.0f} ms | {per_save}"
                         f"{1e3 * v['write_s_mean']:.0f} ms | {v['bytes'] / 1e6:,.0f} MB |")
    failed = m.get("failures") or []
    if failed:
        lines += ["", "Failed runs (left out of the rows above): " + "; ".join(
            f"round {f['round']} {f['row']} {f['side']} ({f['error']})" for f in failed) + "."]
    return "\n".join(lines)


def render_gpu_llama_offload(R):
    """The Llama row (its own table: another model's FLOPs) and the optimizer-offload row, where measured."""
    lines = []
    g = R.get("gpu_llama")
    if g and g.get("sides"):
        s = g["shape"]
        lines += ["", f"The Llama shape ({s['layers']} layers, {s['heads']} heads with {s['kv_heads']} key/value heads, "
                      f"{s['embd']} wide, SwiGLU {s['mlp']}, untied head, vocabulary {s['vocab']}), bf16:", "",
                  "| run | tokens/s | step ms | MFU (measured peak) | peak tensor MB |", "| --- | --- | --- | --- | --- |"]
        for side, v in g["sides"].items():
            lines.append(f"| llama {side} | {n0(v['tokens_per_s'])} | {v['step_ms_median']:.1f} | "
                         f"{pct(v['mfu_measured_peak'], 1)} | {n0(v.get('peak_tensor_mb'))} |")
        sides = g["sides"]
        against = [f"{side} {sides[side]['tokens_per_s'] / sides[p]['tokens_per_s']:.2f}x {label}"
                   for side in ("frugal", "frugal_kernels") if side in sides
                   for p, label in (("eager", "PyTorch eager"), ("compile", "torch.compile")) if p in sides]
        if against:
            lines += ["", "Llama, frugal's tokens/s against: " + ", ".join(against) + "."]
    o = R.get("gpu_offload")
    if o and {"on_device", "offload"} <= set(o.get("sides", {})):
        a, b = o["sides"]["on_device"], o["sides"]["offload"]
        lines += ["", f"The optimizer in host memory (`dist.offload = \"optimizer\"`, frugal on ATen, bf16): step "
                      f"{a['step_ms_median']:.1f} -> {b['step_ms_median']:.1f} ms "
                      f"(x{b['step_ms_median'] / a['step_ms_median']:.2f}), peak tensor memory "
                      f"{n0(a.get('peak_tensor_mb'))} -> {n0(b.get('peak_tensor_mb'))} MB "
                      f"({n0(a['peak_tensor_mb'] - b['peak_tensor_mb'])} MB less)."]
    m = R.get("gpu_machine")
    missing = sorted({f"{x['row']} {x['side']}" for x in (m or {}).get("skipped") or []
                      if x["side"] not in (R.get("gpu_" + x["row"]) or {}).get("sides", {})})
    if missing:
        lines += ["", "Not measured in this run (its time budget ran out first): " + ", ".join(missing) + "."]
    return lines


def render_gpu_kernels(R):
    k = R.get("gpu_kernel_bench")
    if not k:
        return not_measured("no GPU kernel results", "On a CUDA machine: `scripts/gpu-check.sh` (or `build/kernel_bench "
                            "--json bench/results/<date>-gpu-<card>/gpu_kernel_bench.json`), then `bench/render_tables.py`.")
    lines = [f"Measured on {k['device_name']} (raw JSON: `{R.path('gpu_kernel_bench')}`): {k['rows']:,} rows "
             f"(micro-batch 16 x block 1024), {k['embd']} wide, vocabulary {k['vocab']} padded to {k['vocab_padded']}; "
             f"medians of {k['reps']} timed calls, inputs rotating over 4 sets; the memory floor is this GPU's "
             f"device-to-device copy, {k['copy_gb_per_s']:,.0f} GB/s here.", "",
             "| kernel | frugal ms | ATen ms | speed-up | frugal GB/s | of the copy rate |", "| --- | --- | --- | --- | --- | --- |"]
    for c in k["cases"]:
        lines.append(f"| {c['case']} | {c['frugal_ms']:.3f} | {c['aten_ms']:.3f} | {c['speedup']:.2f}x | "
                     f"{c['frugal_gb_per_s']:,.0f} | {pct(c['of_copy_rate'], 0)} |")
    return "\n".join(lines)


def render_plan_accuracy(R):
    p = R.get("plan_accuracy")
    if not p:
        return not_measured("no bench/results/<date>/plan_accuracy.json", "`bench/plan_accuracy.py` writes it.")
    lines = [f"Measured by `bench/plan_accuracy.py`, {p['date']}, source {commit(p)}; raw JSON "
             f"`{R.path('plan_accuracy')}`; {p['machine'].get('physical_cores', '?')} physical cores; priced at "
             f"{p['price']}:", "",
             "| shape | steps | projected s (low-high) | measured s | error of the central | projected $ | measured $ | probe |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in p["rows"]:
        ps, pu = r["projected_s"], r["projected_usd"]
        lines.append(f"| {r['shape']} #{r['repeat']} | {r['steps']} | {ps['central']:.1f} ({ps['low']:.1f}-{ps['high']:.1f}) | "
                     f"{r['measured_s']:.1f} | {r['error_pct']:+.1f}% | ${pu['central']:.3g} | ${r['measured_usd']:.3g} | "
                     f"{r['probe_s']:.1f} s |")
    lines.append("")
    for shape, s in p["summary"].items():
        lines.append(f"- {shape}: {s['within_range']} of {s['runs']} measured times inside the projected range "
                     f"(+-{s['median_half_width_pct']:.0f}%); the central projection off by {s['median_abs_error_pct']:.1f}% "
                     f"(median) and {s['max_abs_error_pct']:.1f}% (max).")
    return "\n".join(lines)


def render_search(R):
    j = R.get("search")
    if not j:
        return not_measured("no bench/results/<date>/search.json", "`bench/search_bench.py` writes it.")
    lines = [f"Measured by {provenance(j, R.path('search'))}; {machine_line(j)}:", "",
             "| seed | side | trial-steps | trials' time (s) | wall (s) | winner | its val_loss |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
    for s in j["searches"]:
        for side, label in (("halving", "halving"), ("full", "every trial to the end")):
            r = s[side]
            winner = r["best"]
            if side == "halving":
                winner += " (" + ", ".join(f"{k.split('.')[-1]} {v}" for k, v in sorted(r["best_values"].items())) + ")"
            lines.append(f"| {s['seed']} | {label} | {r['trial_steps']} | {r['trial_s']:.1f} | {r['wall_s']:.1f} | "
                         f"{winner} | {r['best_metric']:.4f} |")
    f = j["fraction_of_full"]
    regrets = [s["regret"] for s in j["searches"]]
    lines += ["", f"Over the {len(j['searches'])} searches, halving used {pct(f['trial_steps'])} of the trial-steps, "
                  f"{pct(f['trial_s'])} of the trials' training time and {pct(f['wall_s'])} of the wall time "
                  f"({j['halving_wall_s']:.0f} s against {j['full_wall_s']:.0f} s). It picked the same winner as the "
                  f"full runs in {j['agree']} of {j['of']} searches (largest regret, the winner's loss minus the best "
                  f"full run's: {max(regrets):.4g})."]
    return "\n".join(lines)


def render_reliability(R):
    j = R.get("reliability")
    if not j:
        return not_measured("no bench/results/<date>/reliability.json", "`bench/reliability.py` writes it.")
    k, e, f, t = j["kills"], j["enospc"], j["flood"], j["sigterm"]
    lines = [f"Measured by {provenance(j, R.path('reliability'))}; {machine_line(j)}.", "",
             "| what was done to a run | what it came to |", "| --- | --- |"]
    random_kills = sum(c["kills"] for c in k["chains"] if c["mode"] != "inside writes")
    lines.append(f"| SIGKILL at random steps, then `--resume auto` ({random_kills} kills in chains of 10, checkpoints "
                 f"sync and async alternately), and one kill after each of the 8 stages of a checkpoint write; "
                 f"{k['threads']}, beside {k['competing_busy_processes']} busy process(es) | {k['kills']} kills: "
                 f"{k['bitwise_chains']} of {k['of_chains']} chains end bitwise the uninterrupted run (final weights "
                 f"byte for byte, metrics.jsonl minus timing) |")
    if "skipped" in e:
        lines.append(f"| the disk fills up mid-run | not measured: {e['skipped']} |")
    else:
        lines.append(f"| the disk fills up mid-run ({len(e['runs'])} runs on tmpfs of "
                     f"{min(r['tmpfs_kb'] for r in e['runs'])}-{max(r['tmpfs_kb'] for r in e['runs'])} kB) | the disk "
                     f"filled in {e['disk_filled']}; the newest complete checkpoint was the one `--resume auto` continued "
                     f"from in {len(e['runs']) - e['bad_newest']} of {len(e['runs'])} (bad newest checkpoints: "
                     f"{e['bad_newest']}) |")
    if "skipped" in f:
        lines.append(f"| idle connections to the live dashboard | not measured: {f['skipped']} |")
    else:
        lines.append(f"| {f['connections_open']:,} idle connections to the live dashboard | "
                     f"{f['steps_during_flood']} steps trained in {f['window_s']:.0f} s of it, against "
                     f"{f['steps_before_flood']} in the {f['window_s']:.0f} s before; SIGTERM then exit {f['exit']} after "
                     f"{f['sigterm_to_exit_s']:.2f} s |")
    other = [x for x in t["samples"] if x["exit"] != 75]
    said = (f"{len(t['samples']) - len(other)} of {len(t['samples'])} exit 75 with a checkpoint"
            + ("" if not other else "; " + ", ".join(
                f"the one at {x['delay_s'] * 1e3:.0f} ms after exec {'was killed by the signal' if x['exit'] < 0 else 'exited ' + str(x['exit'])}"
                for x in other)))
    lines.append(f"| SIGTERM at a random moment in the first 2.5 s (start-up, steps, evaluations, checkpoint writes), "
                 f"{len(t['samples'])} times | worst signal-to-exit {t['max_sigterm_to_exit_s']:.2f} s; {said} |")
    return "\n".join(lines)


def render_time_to_loss(R):
    j = R.get("time_to_loss")
    if not j:
        return not_measured("no bench/results/<date>/time_to_loss.json", "`bench/time_to_loss.py` writes it.")
    by_shape = j.get("by_shape", {})
    if len(by_shape) > 1:  # shapes measured in separate passes (--merge)
        at_most = "; ".join(f"{k}: at most {v['max_steps']} steps, evaluated every {v.get('eval_every', j['eval_every'])}, "
                            f"{v['date']}, source {v['source']['commit'][:12]}, "
                            f"{v['bench_seconds'] / 60:.0f} min, Newton-Schulz in {v.get('newton_schulz', 'fp32')}"
                            for k, v in by_shape.items())
    else:
        at_most = f"at most {j['max_steps']} steps, evaluated every {j['eval_every']}"
    methods = {k: v.get("step_time", "mean over all steps (the warm-up in it)") for k, v in by_shape.items()} or \
        {"": "mean over all steps (the warm-up in it)"}
    if len(set(methods.values())) == 1:
        step_time = f"each run's {next(iter(methods.values()))}"
    else:
        step_time = "; ".join(f"{k}: each run's {m}" for k, m in methods.items())
    lines = [f"Measured by {provenance(j, R.path('time_to_loss'))}; {machine_line(j)}. Target: validation loss "
             f"{j['target_loss']} (nats per byte of English text, {j['corpus']['bytes']:,} bytes) ({at_most}); each "
             f"side at the best learning rate of its "
             f"sweep on the first seed, medians over the seeds that reached the target; ms per step: "
             f"{step_time}, evaluations left out:", "",
             "| shape | tokens a step | side | lr | reached | tokens to target | wall s to target | ms per step |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    labels = {"adamw_cosine": "AdamW + cosine", "muon_wsd": "Muon + WSD"}
    for row in j["table"]:
        for side in ("adamw_cosine", "muon_wsd"):
            r = row[side]
            tok = n0(r["median_tokens_to_target"]) if r["median_tokens_to_target"] else "-"
            wall = n0(r["median_wall_s_to_target"]) if r["median_wall_s_to_target"] else "-"
            sh = j["shapes"][row["shape"]]
            per_step = n0(sh["batch"] * sh["block"] * sh.get("accum", 1))
            lines.append(f"| {row['shape']} | {per_step} | {labels[side]} | {r['lr']:g} | {r['reached']} of {r['seeds']} | {tok} | "
                         f"{wall} | {n0(r['median_step_ms'])} |")
    lines.append("")
    for row in j["table"]:
        ratio = row["token_ratio_adamw_over_muon"]
        said = (f"AdamW needs {ratio:.2f}x the tokens Muon needs" if ratio else
                "the token ratio is not defined (a side did not reach the target)")
        lines.append(f"- {row['shape']}: {said} (target: 1.25x or more); Muon's step takes "
                     f"{row['step_time_ratio_muon_over_adamw']:.2f}x AdamW's (target: at most 1.10x).")
    return "\n".join(lines)


def render_muon_step(R):
    j = R.get("muon_step")
    if not j:
        return not_measured("no bench/results/<date>/muon_step.json", "`bench/muon_step.py` writes it.")
    lines = [f"Measured by {provenance(j, R.path('muon_step'))}; {machine_line(j)}. The mid shape, {j['steps']} "
             f"steps a run, Newton-Schulz in {j['newton_schulz']}; medians of {j['repeats']} alternating rounds of "
             f"each run's median step time over its log windows after the first (the warm-up left out):", "",
             "| train.accum | tokens a step | AdamW ms per step | Muon ms per step | of which Muon's optimizer | "
             "Muon / AdamW |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in j["table"]:
        a, m = row["fused_adamw"], row["muon"]
        lines.append(f"| {row['accum']} | {n0(m['tokens_per_step'])} | {a['median_step_ms']:.0f} | "
                     f"{m['median_step_ms']:.0f} | {m['median_optimizer_ms']:.1f} | "
                     f"{row['step_time_ratio_muon_over_adamw']:.2f}x |")
    return "\n".join(lines)


def render_tracker_overhead(R):
    j = R.get("tracker_overhead")
    if not j:
        return not_measured("no bench/results/<date>/tracker_overhead.json", "`bench/tracker_overhead.py` writes it.")
    lines = [f"Measured by {provenance(j, R.path('tracker_overhead'))}; {machine_line(j)}. Every run logs at every "
             f"step (train.log_every = 1), the MLflow side to a real `mlflow server` on loopback; medians of "
             f"{j['repeats']} alternating rounds of summary.json's tokens/s, and of the process's wall time from "
             f"start to exit:", "",
             "| shape | steps | trackers | tokens/s | vs off | vs off, paired by round | trainer thread, µs per log "
             "step | MLflow server CPU s | process s |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in j["table"]:
        for side in j["sides"]:
            r = row[side]
            lines.append(f"| {row['shape']} | {row['steps_config']} | {side} | {n0(r['median_tokens_per_s'])} | "
                         f"{r['throughput_vs_off']:.3f}x | {r.get('median_paired_ratio', 0):.3f}x | "
                         f"{n0(r.get('median_tracker_us_per_log_step', 0))} | "
                         f"{r.get('median_server_cpu_s', 0):.2f} | {r['median_process_s']:.2f} |")
    return "\n".join(lines)


def render_llama(R):
    f32, b16, mem = R.get("llama_speed_fp32"), R.get("llama_speed_bf16"), R.get("llama_memory")
    if not (f32 or b16 or mem):
        return not_measured("no bench/results/<date>/llama_speed_*.json", "`bench/llama_bench.py` writes them.")
    first = f32 or b16 or mem
    m = first["model"]
    lines = [f"Measured by {provenance(first, R.path('llama_speed_fp32' if f32 else 'llama_memory'))}; "
             f"{machine_line(dict(first, machine=first.get('machine_facts')))}. The Llama shape: {m['layers']} layers x {m['embd']} wide, {m['heads']} heads, "
             f"{m['kv_heads']} key/value heads, SwiGLU {m['mlp']}, block {m['block']}, an untied head, micro-batch "
             f"{m['batch']} of English bytes; transformers' LlamaForCausalLM (SDPA, fused AdamW) in the same loop "
             f"settings; each side at its fastest thread count; medians of the alternating rounds' ratios:", "",
             "| precision | frugal tok/s | transformers eager | transformers + torch.compile | frugal / eager | "
             "frugal / compile | target |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for j, target in ((f32, "fp32: >= 1.0x the best PyTorch side"), (b16, "bf16: >= 1.3x eager")):
        if not j:
            continue
        lines.append(f"| {j['dtype']} | {n0(j['frugal_tokens_per_s'])} | {n0(j.get('eager_tokens_per_s'))} | "
                     f"{n0(j.get('compile_tokens_per_s'))} | {r2(j.get('ratio_vs_eager'))} | "
                     f"{r2(j.get('ratio_vs_compile'))} | {target}: {met(j['targets']['met'])} |")
    if mem:
        lines += ["", f"Memory at a vocabulary of {mem['vocab']:,} (fp32, {mem['tokens_per_micro_batch']:,} tokens a "
                      f"micro-batch, whose fp32 logits alone are {n0(mem['fp32_logits_mb'])} MB; {mem['steps']} steps, "
                      f"medians of alternating runs; raw JSON `{R.path('llama_memory')}`): peak resident memory "
                      f"frugal {n0(mem['frugal_peak_rss_mb'])} MB against transformers "
                      f"{n0(mem['transformers_peak_rss_mb'])} MB ({r2(mem['frugal_over_transformers'])}, "
                      f"{n0(mem['saved_mb'])} MB less); frugal's peak of live tensors "
                      f"{n0(mem['frugal_peak_tensor_mb'])} MB."]
    return "\n".join(lines)


def render_lora(R):
    j = R.get("lora")
    if not j:
        return not_measured("no bench/results/<date>/lora.json", "`bench/lora_bench.py` writes it.")
    m, sides, t = j["model"], j["sides"], j["targets"]
    lines = [f"Measured by {provenance(j, R.path('lora'))}; {machine_line(dict(j, machine=j.get('machine_facts')))}. "
             f"A Llama-family shape ({m['layers']} layers x {m['embd']} wide, {m['heads']} heads, {m['kv_heads']} "
             f"key/value heads, SwiGLU {m['mlp']}, block {m['block']}, micro-batch {m['batch']} of English bytes), "
             f"{j['precision']}, fine-tuned for {j['steps']} steps from a base trained {j['base_steps']} steps; "
             f"step times are medians of {j['repeats']} alternating rounds:", "",
             "| run | trainable | optimizer + gradients | checkpoint | adapted base weights | step | val loss after the "
             "same tokens |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    labels = (("full", "full fine-tune"), ("lora", "LoRA r=16 (bf16 base)"), ("dora", "DoRA r=16"),
              ("qlora", "QLoRA r=16 (NF4 base)"))
    for name, label in labels:
        if name not in sides:
            continue
        s = sides[name]
        og = s["optimizer_state_mb"] + s["grad_mb"]
        share = "" if name == "full" else f" ({s['optimizer_and_grad_share']:.1%})"
        ck = "" if name == "full" else f" ({s['checkpoint_share']:.1%})"
        step = "" if name == "full" else f" ({s['step_time_ratio']:.2f}x)"
        base = "trained" if name == "full" else "—" if s.get("base_mb") is None else f"{s['base_mb']:.1f} MB" + (
            f" ({s['base_share']:.2f}x)" if "base_share" in s else "")
        lines.append(f"| {label} | {s['trainable_params']:,} | {og:.2f} MB{share} | {s['checkpoint_bytes'] / 1e6:.2f} MB{ck} "
                     f"| {base} | {s['step_ms']:.1f} ms{step} | {s['final_val_loss']:.4f} |")
    lora = sides["lora"]
    lines += ["", f"Targets for LoRA: optimizer + gradients <= {t['optimizer_and_grad_share']:.0%} of the full run's: "
                  f"{met(lora['targets_met']['optimizer_and_grad_share'])}; checkpoint <= {t['checkpoint_share']:.0%}: "
                  f"{met(lora['targets_met']['checkpoint_share'])}; step time <= {t['step_time_ratio']}x: "
                  f"{met(lora['targets_met']['step_time_ratio'])}."]
    if "qlora" in sides:
        lines[-1] += (f" For QLoRA: base weights <= {t['base_share']}x the bf16 base's: "
                      f"{met(sides['qlora']['targets_met']['base_share'])}.")
    return "\n".join(lines)


def render_packing(R):
    j = R.get("packing")
    if not j:
        return not_measured("no bench/results/<date>/packing.json", "`bench/packing_bench.py` writes it.")
    names = {"pad": "pad", "pack": "pack", "pack_unmasked": "pack, no mask"}
    lines = [f"Measured by {provenance(j, R.path('packing'))}; {machine_line(j)}. {j['rows_per_batch']} rows a "
             f"batch, {j['model']}; medians of {j['repeats']} rounds (the modes in turn, {j['steps']} steps each):",
             "", "| data | block | data.packing | target share of positions | step | target tokens/s (median; "
                 "per round) |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    for name, d in j["datasets"].items():
        for k, v in d["modes"].items():
            lines.append(f"| {name.split(',')[0]} | {d.get('block', j.get('block'))} | {names[k]} | "
                         f"{pct(v['target_fraction'])} | {ms(v['step_ms'] / 1e3)} | "
                         f"{n0(v['target_tokens_per_s'])} "
                         f"({', '.join(n0(x) for x in v['target_tokens_per_s_runs'])}) |")
    lines.append("")
    for name, d in j["datasets"].items():
        lines.append(f"- {name} ({d['documents']:,} documents, {d['document_tokens']:,} tokens; {d['lengths']}): "
                     f"packing trains {r2(d['pack_over_pad'])} the target tokens per second of padding (target "
                     f">= 2.5x: {met(d['targets_met']['pack_over_pad'])}); with the document mask it runs at "
                     f"{r2(1 - d['mask_cost'])} the speed of the same rows without it (per round: "
                     f"{', '.join(f'{1 - x:.2f}x' for x in d['mask_cost_runs'])}; target >= 0.90x, a cost of at most "
                     f"10%: {met(d['targets_met']['mask_cost'])}).")
    lines += ["", "Ratios are taken per round (the modes side by side), then the median; the machine's speed drifts "
                  "between rounds, so the ratios, not the absolute rates, are the result. On the CPU the mask is one "
                  "compare per score and costs nothing measurable (where the masked rows ran faster, exactly-zero "
                  "probabilities in place of tiny, possibly subnormal ones are a plausible cause, not an established "
                  "one). What packing gains is what padding wastes: short "
                  "documents in a long row (single-turn instructions) waste most of it; long multi-turn chats fill "
                  "much of a 1,024-position row, and gain more as the row grows."]
    return "\n".join(lines)


RENDERERS = {"packing": render_packing, "lora": render_lora, "llama": render_llama, "muon_step": render_muon_step, "tracker_overhead": render_tracker_overhead, "time_to_loss": render_time_to_loss, "reliability": render_reliability, "search": render_search, "plan_accuracy": render_plan_accuracy, "machine": render_machine, "peer": render_peer, "precision": render_precision,
             "levers": render_levers, "gpu": render_gpu, "gpu_kernels": render_gpu_kernels, "gpu_targets": render_gpu_targets, "threads": render_threads, "reuse_freed": render_reuse_freed,
             "fused_adamw": render_fused_adamw, "checkpoint_stall": render_checkpoint_stall,
             "checkpoint_wall": render_checkpoint_wall, "smoke_time": render_smoke_time, "loader": render_loader,
             "dist": render_dist, "stacked_levers": render_stacked_levers,
             "dynamic_batching": render_dynamic_batching, "demo_rss": render_demo_rss, "demo_time": render_demo_time,
             "venv_size": render_venv_size, "first_run": render_first_run, "tune_demo": render_tune_demo, "tune_demo_notes": render_tune_demo_notes}


def render_doc(text, doc, R):
    """The doc with every marker's body rendered; raises SystemExit on an unknown name or a span
    body that would hold a line break."""
    found = []

    def replace(mt):
        block = mt.group(1) is not None
        name = mt.group(1) or mt.group(2)
        if name not in RENDERERS:
            raise SystemExit(f"render_tables: {doc}: unknown figure '{name}' (known: {', '.join(sorted(RENDERERS))})")
        found.append(name)
        body = RENDERERS[name](R)
        if block:
            return f"<!-- bench-table:{name} -->\n{body}\n<!-- /bench-table:{name} -->"
        if "\n" in body:
            raise SystemExit(f"render_tables: {doc}: '{name}' renders several lines; use a bench-table marker")
        return f"<!-- bench:{name} -->{body}<!-- /bench:{name} -->"

    return MARKER.sub(replace, text), found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doc", action="append", default=None,
                    help=f"a doc to render (repeatable; default: {', '.join(DOCS)})")
    ap.add_argument("--results", default=None, help="take every CPU result from this folder (default: the newest "
                                                    "folder holding each file)")
    ap.add_argument("--gpu-results", default=None, help="GPU results folder (default: the newest with gpu_machine.json)")
    ap.add_argument("--allow-quick", action="store_true", help="render results of --quick passes too")
    ap.add_argument("--write-to", default=None, help="write the rendered docs under this folder instead of in place")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a doc is out of date or holds a figure outside the markers")
    a = ap.parse_args()
    for path in (a.results, a.gpu_results):
        if path and not os.path.isdir(path):
            print(f"render_tables: results folder '{path}' does not exist", file=sys.stderr)
            return 2
    R = Results(a.results, a.gpu_results, a.allow_quick)
    docs = a.doc or [os.path.join(ROOT, d) for d in DOCS]
    failed = False
    if a.check and not figure_lint.self_test():
        print("render_tables: the figure check does not flag a planted figure; bench/figure_lint.py is broken",
              file=sys.stderr)
        failed = True
    for doc in docs:
        text = open(doc).read()
        new, found = render_doc(text, rel(doc), R)
        if not found:
            print(f"render_tables: {rel(doc)} has no <!-- bench-table:NAME --> or <!-- bench:NAME --> markers",
                  file=sys.stderr)
            return 2
        if a.check:
            if new != text:
                print(f"render_tables: {rel(doc)} differs from what bench/results/ gives; run bench/render_tables.py",
                      file=sys.stderr)
                failed = True
            for line in figure_lint.problems(rel(os.path.abspath(doc)), text):
                print(f"render_tables: {line}", file=sys.stderr)
                failed = True
            continue
        out = doc if not a.write_to else os.path.join(a.write_to, rel(os.path.abspath(doc)))
        if out != doc or new != text:
            os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
            with open(out, "w") as f:
                f.write(new)
        print(f"render_tables: {rel(out) if out.startswith(ROOT) else out}: {len(found)} figures "
              f"({', '.join(found)}){'' if new != text else ' (unchanged)'}")
    if not a.check:
        print(f"render_tables: from {', '.join(sorted(R.used)) or '(no results)'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
