#!/usr/bin/env python3
"""The peer: the GPT that `frugal train` trains (same architecture, initialisation, data, batch,
optimizer settings, learning-rate schedule and precision), written as a PyTorch 2.x training loop
the way a practitioner writes one today:

  - attention is F.scaled_dot_product_attention(is_causal=True): no mask is built per step;
  - the optimizer is torch.optim.AdamW(fused=True) (one fused kernel per step, CPU and CUDA);
  - bf16/fp16 through torch.autocast, fp16 with torch.amp.GradScaler;
  - optionally torch.compile on the model (--compile);
  - optionally the output head's matmuls at the vocabulary rounded up (--head-multiple 64: the
    weight padded with zero rows for the product, the logits sliced back; frugal's
    model.head_multiple), by hand as a practitioner who knows the trick writes it;
  - --arch llama: frugal's Llama family instead (model.arch = "llama"), in plain PyTorch as
    well: nn.RMSNorm, rotary positions, grouped-query attention through SDPA (enable_gqa),
    SwiGLU (transformers' model is bench/peer_llama.py's; this one needs only torch).

Timing: the wall time between the ends of consecutive steps (each step ends with loss.item(),
which also waits for the GPU), the same window as frugal's per-step elapsed_s in metrics.jsonl;
the median over the steps after --warmup. Under --compile the first step compiles: it is
reported as first_step_s / compile_s and is never inside the timed window. With --sync-every N
the loss is read (and the device waited for) only every N steps, as in a loop that logs every N
steps: the host queues the next steps while the GPU still runs earlier ones. Each step of a window
of N then counts at the window's mean, over the windows that start after --warmup (frugal's
train.log_every = N, timed between its log lines).

Prints one JSON object on the last line of stdout. Run it with the project's venv interpreter
(.venv/bin/python: the PyTorch wheel frugal is built against), e.g.

  .venv/bin/python bench/peer_gpt.py --text corpus.txt --dtype bf16 --threads 2 --compile
  .venv/bin/python bench/peer_gpt.py --shards DIR --vocab 50257 --layers 12 --heads 12 \\
      --embd 768 --block 1024 --batch 8 --device cuda --dtype bf16 --compile

Data: --text PATH trains on byte tokens of the file's first (1 - --val-fraction) part, as
frugal's data.source = "text:PATH" does; --shards DIR reads llm.c token files (*_train_*.bin,
256 int32 header words with magic 20240520, then uint16 tokens), as frugal's "shards:DIR" does.
Batches are random windows (nanoGPT's get_batch), built on the host in the training thread;
the time spent building them is reported as data_ms_median / data_wait_fraction. With
--prebuilt-batches every step's batch is built and copied to the device before the first step,
so no step's time holds data work (what the GPU benchmark's throughput rows compare).
"""
import argparse
import glob
import json
import math
import mmap
import os
import resource
import statistics
import struct
import sys
import time
import warnings

# The wheel warns at import when NumPy is absent; nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
# Read-only memory maps of token files are never written to; torch warns about them anyway.
warnings.filterwarnings("ignore", message="The given buffer is not writable")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import die, physical_cores  # noqa: E402

LLMC_MAGIC = 20240520
LLMC_HEADER_BYTES = 256 * 4


class Block(nn.Module):
    """Pre-LN transformer block: causal self-attention and a GELU MLP (exact erf GELU, as
    frugal's fused GELU computes), each added to the residual stream."""

    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(embd)
        self.qkv = nn.Linear(embd, 3 * embd)
        self.proj = nn.Linear(embd, embd)
        self.ln2 = nn.LayerNorm(embd)
        self.fc = nn.Linear(embd, 4 * embd)
        self.fc_proj = nn.Linear(4 * embd, embd)
        self.drop = nn.Dropout(dropout)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        return self.drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.drop(self.fc_proj(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """frugal's reference GPT (src/model/gpt.cpp): learned positions, pre-LN blocks, final
    LayerNorm, output head tied to the token embedding, GPT-2 initialisation."""

    def __init__(self, vocab, block, layers, heads, embd, dropout=0.0, checkpoint_blocks=False, head_multiple=1):
        super().__init__()
        self.checkpoint_blocks = checkpoint_blocks
        self.head_pad = -(-vocab // head_multiple) * head_multiple - vocab
        self.wte = nn.Embedding(vocab, embd)
        self.wpe = nn.Embedding(block, embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(embd, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embd)
        # N(0, 0.02), residual projections (attention proj, MLP fc_proj) N(0, 0.02/sqrt(2L)),
        # biases zero, LayerNorms ones/zeros: the same rule, by the same names, as frugal.
        for name, p in self.named_parameters():
            if "ln" in name:
                continue
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "proj.weight" in name:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for b in self.blocks:
            if self.checkpoint_blocks and self.training:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        if self.head_pad:
            vocab = self.wte.weight.size(0)
            logits = F.linear(self.ln_f(x), F.pad(self.wte.weight, (0, 0, 0, self.head_pad)))[..., :vocab]
        else:
            logits = F.linear(self.ln_f(x), self.wte.weight)
        # The loss in fp32, as frugal computes it.
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


class LlamaBlock(nn.Module):
    """A Llama block as frugal's (src/model/llama/llama.cpp) and transformers' compute it: RMSNorm,
    grouped-query attention with rotary positions (rotate-half), SwiGLU MLP from one packed
    gate/up product; no biases."""

    def __init__(self, embd, heads, kv_heads, mlp, eps):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, embd // heads
        self.attn_norm = nn.RMSNorm(embd, eps=eps)
        self.qkv = nn.Linear(embd, (heads + 2 * kv_heads) * self.d, bias=False)
        self.proj = nn.Linear(heads * self.d, embd, bias=False)
        self.mlp_norm = nn.RMSNorm(embd, eps=eps)
        self.gate_up = nn.Linear(embd, 2 * mlp, bias=False)
        self.down = nn.Linear(mlp, embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, K, d = self.heads, self.kv_heads, self.d
        q, k, v = self.qkv(self.attn_norm(x)).split([H * d, K * d, K * d], dim=-1)
        q, k, v = (t.view(B, T, n, d).transpose(1, 2) for t, n in ((q, H), (k, K), (v, K)))

        def rope(t):
            t1, t2 = t.chunk(2, dim=-1)
            return t * cos + torch.cat((-t2, t1), dim=-1) * sin

        y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=K != H)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, H * d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    """frugal's Llama family (model.arch = "llama"): token embedding, Llama blocks, final RMSNorm,
    an untied output head; weights N(0, 0.02)."""

    def __init__(self, vocab, block, layers, heads, kv_heads, embd, mlp, theta=10000.0, eps=1e-5,
                 checkpoint_blocks=False):
        super().__init__()
        self.checkpoint_blocks = checkpoint_blocks
        self.embed = nn.Embedding(vocab, embd)
        self.blocks = nn.ModuleList([LlamaBlock(embd, heads, kv_heads, mlp, eps) for _ in range(layers)])
        self.norm = nn.RMSNorm(embd, eps=eps)
        self.lm_head = nn.Linear(embd, vocab, bias=False)
        d = embd // heads
        inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        angles = torch.outer(torch.arange(block, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat((angles, angles), dim=-1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((angles, angles), dim=-1).sin(), persistent=False)
        for name, p in self.named_parameters():
            if "norm" not in name:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        x, cos, sin = self.embed(idx), self.cos[:T], self.sin[:T]
        for b in self.blocks:
            if self.checkpoint_blocks and self.training:
                x = torch.utils.checkpoint.checkpoint(b, x, cos, sin, use_reentrant=False)
            else:
                x = b(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def llama_flops_per_token(layers, embd, heads, kv_heads, mlp, vocab, block):
    """frugal's formula for the Llama family (docs/model.md): 6 x matmul weights (head included) +
    12 x layers x block x heads x head_dim for the attention products."""
    d = embd // heads
    matmuls = layers * ((heads + 2 * kv_heads) * d * embd + heads * d * embd + 3 * mlp * embd) + vocab * embd
    return 6.0 * matmuls + 12.0 * layers * block * heads * d


def flops_per_token(layers, embd, vocab, block):
    """Training FLOPs per token, frugal's formula (docs/model.md): 6 x matmul parameters (head
    included) + 12 x layers x block x embd for the attention products."""
    return 6.0 * (layers * 12.0 * embd * embd + vocab * embd) + 12.0 * layers * block * embd


def lr_at(step, total, warmup, peak, min_ratio):
    """frugal's schedule (include/frugal/train/lr_schedule.h): linear warm-up, cosine to a floor."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    floor = peak * min_ratio
    decay = total - warmup
    if decay <= 1:
        return peak
    progress = min(1.0, (step - warmup) / (decay - 1))
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def load_text(path, val_fraction):
    """Byte tokens of the file's training split: all but its last val_fraction (frugal's split)."""
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        die(f"peer_gpt: cannot read --text '{path}': {e.strerror}")
    n_train = len(raw) - int(len(raw) * val_fraction)
    return torch.frombuffer(bytearray(raw[:n_train]), dtype=torch.uint8)


def load_llmc_train(directory):
    """The concatenated *_train_*.bin files of an llm.c dataset, memory-mapped (uint16 tokens)."""
    files = sorted(glob.glob(os.path.join(directory, "*_train_*.bin")))
    if not files:
        die(f"peer_gpt: no llm.c '*_train_*.bin' files in '{directory}'")
    parts = []
    for path in files:
        with open(path, "rb") as f:
            header = struct.unpack("<3i", f.read(12))
            if header[0] != LLMC_MAGIC or header[1] != 1:
                die(f"peer_gpt: '{path}' is not an llm.c version-1 token file (magic {header[0]}, "
                    f"version {header[1]})")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        parts.append(torch.frombuffer(mm, dtype=torch.uint16, offset=LLMC_HEADER_BYTES, count=header[2]))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="UTF-8 text file, byte-level tokens (frugal's text:PATH)")
    src.add_argument("--shards", help="folder of llm.c token files (frugal's shards:DIR)")
    ap.add_argument("--val-fraction", type=float, default=0.1, help="text: held-out tail, as data.val_fraction")
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary (256 for bytes, 50257 for GPT-2 tokens)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32, help="sequences per step (frugal's data.micro_batch)")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--arch", choices=["gpt", "llama"], default="gpt",
                    help="gpt: frugal's reference GPT; llama: its Llama family (untied head, no dropout)")
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0 = --heads)")
    ap.add_argument("--mlp-width", type=int, default=0, help="llama: the SwiGLU width (0 = 8/3 x --embd)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", "--warmup-skip", type=int, default=3, dest="warmup",
                    help="untimed steps first (the first one compiles under --compile)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lr-warmup-steps", type=int, default=50, help="learning-rate warm-up steps (train.warmup_steps)")
    ap.add_argument("--dtype", "--precision", choices=["fp32", "bf16", "fp16"], default="fp32", dest="dtype",
                    help="fp32, or autocast to bf16 / fp16 (fp16 with torch.amp.GradScaler)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=int, default=0,
                    help="intra-op threads; 0 = the physical cores (bench/compute_levers.py sweeps 1..cores)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--head-multiple", type=int, default=1,
                    help="the output head's matmuls at the vocabulary rounded up to a multiple of this "
                         "(zero rows for the product only, as frugal's model.head_multiple); 1 = off")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode (default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs)")
    ap.add_argument("--activation-checkpointing", action="store_true",
                    help="torch.utils.checkpoint around every block (recompute in backward)")
    ap.add_argument("--no-tf32", action="store_true", help="CUDA fp32 matmuls without TF32 (frugal's precision.tf32=false)")
    ap.add_argument("--prebuilt-batches", action="store_true",
                    help="build every step's batch on the device before the first step (no data work is timed)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--profile-trace", default=None,
                    help="write a Chrome trace of --profile-steps steps after the warm-up (torch.profiler, "
                         "CPU and, on a GPU, CUDA activities) to this path; those steps' times include "
                         "the profiler's cost")
    ap.add_argument("--profile-steps", type=int, default=5, help="steps in the --profile-trace window")
    ap.add_argument("--sync-every", type=int, default=1,
                    help="read the loss (loss.item(), which waits for the device) every N steps, as a loop that "
                         "logs every N steps does; timing is then per window of N steps (frugal's train.log_every)")
    a = ap.parse_args()
    if a.sync_every < 1:
        ap.error("--sync-every must be at least 1")
    if a.sync_every > 1 and a.profile_trace:
        ap.error("--profile-trace times single steps: use it with --sync-every 1")
    if a.embd % a.heads:
        ap.error(f"--heads {a.heads} must divide --embd {a.embd}")
    if a.steps < 1 or a.warmup < 1:
        ap.error("--steps and --warmup must be at least 1 (the first step is never timed)")
    if a.head_multiple < 1:
        ap.error(f"--head-multiple {a.head_multiple} must be at least 1 (1 = off)")
    if a.profile_trace and not 1 <= a.profile_steps <= a.steps:
        ap.error(f"--profile-steps {a.profile_steps} must be between 1 and --steps {a.steps}")

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"peer_gpt: --device {a.device} but no CUDA device is available", file=sys.stderr)
        return 2
    threads = a.threads or physical_cores()
    torch.set_num_threads(threads)
    if device.type == "cuda":
        if device.index is None:  # "cuda": the current device, as frugal's run.device = "cuda" means
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        # frugal's precision.tf32 default; PyTorch's own default leaves fp32 matmuls in full fp32.
        torch.backends.cuda.matmul.allow_tf32 = not a.no_tf32
        torch.backends.cudnn.allow_tf32 = not a.no_tf32
    torch.manual_seed(a.seed)

    data = load_text(a.text, a.val_fraction) if a.text else load_llmc_train(a.shards)
    if len(data) <= a.block + 1:
        die(f"peer_gpt: {len(data)} training tokens, a window needs --block + 1 = {a.block + 1}")
    offsets = torch.arange(a.block + 1)
    gen = torch.Generator().manual_seed(a.seed)
    pin = device.type == "cuda"

    def get_batch():
        ix = torch.randint(len(data) - a.block - 1, (a.batch,), generator=gen)
        w = data[ix[:, None] + offsets].to(torch.long)
        x, y = w[:, :-1], w[:, 1:]
        if pin:
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    kv_heads = a.kv_heads or a.heads
    mlp = a.mlp_width or 8 * a.embd // 3
    if a.arch == "llama":
        if a.heads % kv_heads:
            ap.error(f"--kv-heads {kv_heads} must divide --heads {a.heads}")
        model = Llama(a.vocab, a.block, a.layers, a.heads, kv_heads, a.embd, mlp,
                      checkpoint_blocks=a.activation_checkpointing).to(device)
    else:
        model = GPT(a.vocab, a.block, a.layers, a.heads, a.embd, a.dropout, a.activation_checkpointing,
                    a.head_multiple).to(device)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8, fused=True)
    step_fn = torch.compile(model, mode=None if a.compile_mode == "default" else a.compile_mode) if a.compile else model
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.dtype)
    scaler = torch.amp.GradScaler(device.type) if a.dtype == "fp16" else None
    total = a.warmup + a.steps

    prebuilt = [get_batch() for _ in range(total)] if a.prebuilt_batches else None
    times, data_s, losses = [], [], []
    windows = []  # (steps, seconds) between consecutive loss reads
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    t_prev = time.perf_counter()
    prof = None
    for step in range(total):
        if a.profile_trace and step == a.warmup:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        span = None
        if prof is not None:  # each profiled step as one span in the trace (frugal's trace has its "step" phase)
            span = torch.profiler.record_function("step")
            span.__enter__()
        t0 = time.perf_counter()
        x, y = prebuilt[step] if prebuilt else get_batch()
        data_s.append(time.perf_counter() - t0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr_warmup_steps, a.lr, 0.1)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = step_fn(x, y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        opt.zero_grad(set_to_none=True)
        if span is not None:
            span.__exit__(None, None, None)
        if (step + 1) % a.sync_every != 0 and step != total - 1:
            continue  # the device is not waited for: the next step queues behind this one
        losses.append(loss.item())  # the window's end: waits for the device
        t = time.perf_counter()
        n = (step + 1) - (sum(w for w, _ in windows) if windows else 0)
        windows.append((n, t - t_prev))
        times.extend([(t - t_prev) / n] * n)  # each step of the window at the window's mean
        t_prev = t
        if prof is not None and step == a.warmup + a.profile_steps - 1:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(a.profile_trace)
            prof = None
            t_prev = time.perf_counter()  # the trace's export is no step's time

    # Timed: the windows that start after the warm-up (with --sync-every 1, the steps after it).
    timed, start, first_timed = [], 0, None
    for n, sec in windows:
        if start >= a.warmup:
            timed.extend([sec / n] * n)
            first_timed = start if first_timed is None else first_timed
        start += n
    if not timed:
        sys.exit(f"peer_gpt.py: no timed window: --steps {a.steps} must be at least --sync-every {a.sync_every}")
    step_med = statistics.median(timed)
    tokens = a.batch * a.block
    fpt = (llama_flops_per_token(a.layers, a.embd, a.heads, kv_heads, mlp, a.vocab, a.block) if a.arch == "llama"
           else flops_per_token(a.layers, a.embd, a.vocab, a.block))
    out = {
        "program": "pytorch_peer", "torch": torch.__version__, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": a.dtype, "precision": a.dtype, "compile": a.compile, "head_multiple": a.head_multiple,
        "compile_mode": a.compile_mode if a.compile else None, "threads": threads,
        "activation_checkpointing": a.activation_checkpointing,
        "model": {"arch": a.arch, "layers": a.layers, "heads": a.heads, "embd": a.embd, "block": a.block,
                  "vocab": a.vocab, **({"kv_heads": kv_heads, "mlp_width": mlp} if a.arch == "llama" else {})},
        "batch": a.batch, "params": params, "flops_per_token": fpt,
        "warmup_steps_untimed": a.warmup, "timed_steps": len(timed),
        "step_ms_median": 1e3 * step_med,
        "tokens_per_s_median": tokens / step_med,
        "tokens_per_s_window": tokens * len(timed) / sum(timed),
        # The first step's time (with --sync-every N > 1, the first window's, over its N steps).
        "first_step_s": times[0] if a.sync_every == 1 else None,
        "first_window_s": windows[0][1], "first_window_steps": windows[0][0],
        # Compilation happens inside the first step; what it (its window) added over normal steps.
        "compile_s": max(0.0, windows[0][1] - windows[0][0] * step_med) if a.compile else 0.0,
        "data_ms_median": 1e3 * statistics.median(data_s[first_timed:]),
        "data_wait_fraction": sum(data_s[first_timed:]) / sum(timed),
        "step_ms": [round(1e3 * t, 3) for t in timed],
        "sync_every": a.sync_every, "prebuilt_batches": a.prebuilt_batches,
        "final_loss": losses[-1],
        "loss_scale": scaler.get_scale() if scaler else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
    }
    if device.type == "cuda":
        out["peak_tensor_mb"] = torch.cuda.max_memory_allocated(device) / 1e6
        out["peak_reserved_mb"] = torch.cuda.max_memory_reserved(device) / 1e6
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
