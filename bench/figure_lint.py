"""The check that keeps hand-copied figures out of docs/levers.md, docs/tuning.md and README.md
(run by `bench/render_tables.py --check`, CTest `bench_tables`): every number with a unit of
measure (tok/s, samples/s, MB/s, GFLOP/s, ms, s, min, h, MB, GB, a speed-up like 1.3x, %, page
faults, 10.8k) must stand between bench marker comments, where bench/render_tables.py writes it
from the raw JSON, or be on the allow-list below: numbers that are not measurements (config
defaults, targets, formula constants, datasheet figures), each with its reason. An allow-list
entry that matches nothing is an error too, so the list cannot grow stale."""
import re

_NUM = r"(?<![\w.])[~≈]?\$?\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(_NUM + r"(?:"
                    r"\s?k?\s?(?:tok/s|tokens/s|tokens per second|samples/s|images/s|[KMGT]B/s|[GT]FLOP/s)"
                    r"|\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b"
                    r"|\s?(?:[KMGT]i?B|kB)\b"
                    r"|x\b"
                    r"|\s?%"
                    r"|\s?k?\s?(?:page )?faults"
                    r"|k\b"
                    r")|\$\d[\d,]*(?:\.\d+)?")

# (doc, phrase, why it is not a measurement). A figure is allowed where it lies inside an
# occurrence of a phrase of its doc.
ALLOW = [
    ("docs/levers.md", "one thread when it is at least 10% faster", "frugal doctor's rule (a constant in the code)"),
    ("docs/levers.md", "threshold to 32 MiB", "the mmap threshold reuse_freed sets (a constant in the code)"),
    ("docs/levers.md", "at least 1.5x faster", "precision auto's rule (a constant in the code)"),
    ("docs/levers.md", "C = 2 s", "a worked example of the Young/Daly formula"),
    ("docs/levers.md", "MTBF = 2 h give a save every ~170 s", "the same worked example"),
    ("docs/levers.md", "frugal at least 1.3x PyTorch eager and 1.0x `torch.compile`", "the targets"),
    ("docs/levers.md", "at least 90% of the machine's bf16/fp32 matmul ratio", "the target"),
    ("docs/levers.md", "on a 2.7 MB English", "the size the bench corpus is cut at (a bench setting)"),
    ("docs/gpu.md", "(H100 SXM and H200: 989 TFLOP/s bf16)", "the datasheet figure"),
    ("docs/levers.md", "`dist.bucket_mb`, 4 MB by default", "a config default"),
    ("docs/tuning.md", "`tune.min_speedup` (5%)", "a config default"),
    ("docs/tuning.md", "(5% by default)", "a config default"),
    ("docs/plan.md", "`plan.margin` (default 15%)", "a config default"),
    ("docs/search.md", "steps: 50% of training every trial to the end", "the schedule's arithmetic (8, 4, 2 trials)"),
    ("docs/search.md", "every 50 ms", "the search's polling interval (a constant in the code)"),
    ("docs/search.md", "read every 250 ms", "the same, for metrics.jsonl"),
    ("docs/plan.md", "widen 3x each way", "the rule for projections onto another machine (a constant in the code)"),
    ("docs/plan.md", "carry the 3x range above", "the same rule"),
    ("docs/plan.md", "`cpu-2vcpu` row, $0.08/h", "the price table's row (data/prices.toml)"),
    ("docs/data.md", "about 540 MB as RGB", "the decompression-bomb limit's size (arithmetic on a constant)"),
    ("docs/data.md", "a crafted 1 KB file", "an example of a crafted input"),
    ("docs/plan.md", "within 90% of G", "zero_advice's usable share of a GPU's memory (a constant in the code)"),
    ("docs/gpu.md", "default 480 s: 8 minutes", "gpu-check.sh's --budget default"),
    ("docs/gpu.md", "| ~3 min |", "the GPU check's expected step time, written before a run"),
    ("docs/gpu.md", "| ~15 s |", "the same"),
    ("docs/gpu.md", "| ~35 s |", "the same"),
    ("docs/gpu.md", "less 100 s", "gpu-check.sh's reserve after the benchmark (a constant in the script)"),
    ("docs/gpu.md", "2% for frugal's sides, 5% for", "gpu_bench.py's loss-parity tolerances (constants)"),
    ("docs/gpu.md", "at ~4.3 TB/s on an H200", "the H200's copy rate the expectations assume"),
    ("docs/levers.md", "within 5% of bf16's loss", "the tolerance of tests/train/fp8_run_test.cpp"),
    ("docs/gpu.md", "temporaries go, ~0.7 GB of traffic a step, under 1%)",
     "an estimate from the parameter count, not a measurement"),
    ("docs/gpu.md", "the moments and the update scratch (~1.5 GB) off",
     "dist.offload's expected figures (from the parameter count, PCIe and memory rates), written before the GPU run"),
    ("docs/gpu.md", "at ~3-6x the step time (each step copies ~1 GB to the host and ~0.5 GB back", "the same"),
    ("docs/gpu.md", "~30 ms, and the CPU's pass reads and writes ~3.5 GB, ~50-150 ms on 16 cores", "the same"),
]


def strip_markers(text):
    """The text with every marker's body blanked (line breaks kept, so line numbers hold)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"<!-- bench-table:(\w+) -->.*?<!-- /bench-table:\1 -->", blank, text, flags=re.S)
    return re.sub(r"<!-- bench:(\w+) -->.*?<!-- /bench:\1 -->", blank, text, flags=re.S)


def problems(doc, text, allow=None):
    """Lines 'DOC:LINE: figure "..." outside the bench markers ...' for every figure not allowed,
    and one per allow-list entry of `doc` that matches nothing."""
    allow = ALLOW if allow is None else allow
    phrases = [p for d, p, _ in allow if d == doc]
    used, out = set(), []
    for no, line in enumerate(strip_markers(text).split("\n"), 1):
        spans = []
        for p in phrases:
            for m in re.finditer(re.escape(p), line):
                spans.append((m.start(), m.end(), p))
        for m in FIGURE.finditer(line):
            hit = [p for s, e, p in spans if s <= m.start() and m.end() <= e]
            if hit:
                used.update(hit)
                continue
            out.append(f"{doc}:{no}: figure \"{m.group(0).strip()}\" outside the bench markers: render it from "
                       f"bench/results/ (bench/render_tables.py) or, if it is not a measurement, add it to "
                       f"bench/figure_lint.py's ALLOW with the reason")
    for p in phrases:
        if p not in used:
            out.append(f"{doc}: allow-list entry \"{p}\" (bench/figure_lint.py) matches no figure; remove it")
    return out


def self_test():
    """True when the check flags a planted figure of each kind and passes the same figures inside
    markers and on the allow-list."""
    planted = ("| 1 thread | 10.8k |\nfaster: 3.4x, 11.2 vs 38.3 ms; 655k page faults; 1,676k samples/s\n"
               "~2 s, ~1 min, 77 MB, ~4.6 GB, 0.08%, 286 MB/s, $0.08\n")
    if len(problems("x.md", planted, allow=[])) != 12:
        return False
    inside = ("<!-- bench-table:t -->\n| 1 thread | 10.8k |\n<!-- /bench-table:t -->\n"
              "a <!-- bench:s -->3.4x, 11 ms<!-- /bench:s --> b, at least 1.5x faster\n")
    return problems("x.md", inside, allow=[("x.md", "at least 1.5x faster", "")]) == []
