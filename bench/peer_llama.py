#!/usr/bin/env python3
"""The peer of frugal's Llama family: transformers' own LlamaForCausalLM, trained in the PyTorch 2.x
loop a practitioner writes today, on the same data, shape, batch, precision, optimizer settings and
learning-rate schedule as `frugal train --set model.arch=llama`:

  - the model is transformers.LlamaForCausalLM with attn_implementation="sdpa" (grouped heads
    through scaled_dot_product_attention), its own RMSNorm, rotary embedding and SwiGLU MLP;
  - the loss is the cross-entropy of its logits in fp32 against the next tokens (every position a
    target, as frugal's);
  - the optimizer is torch.optim.AdamW(fused=True), weight decay 0.1 on matrices, gradients
    clipped at 1.0, frugal's warm-up + cosine schedule (bench/peer_gpt.py's lr_at);
  - bf16 through torch.autocast; optionally torch.compile on the model (--compile).

Timing as bench/peer_gpt.py: the wall time between the ends of consecutive steps (each ends with
loss.item()), the median over the steps after --warmup; under --compile the first step compiles
and is never timed (compile_s). Batches are random windows of byte tokens of --text's training
split, built in the step but timed apart (data_ms_median). peak_rss_mb is the process's peak
resident memory (ru_maxrss), the memory figure comparable with frugal's summary.peak_rss_mb.

Prints one JSON object on the last line of stdout. Run it with the project's venv interpreter:

  .venv/bin/python bench/peer_llama.py --text corpus.txt --dtype bf16 --threads 2 --compile
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
warnings.filterwarnings("ignore", message="The given buffer is not writable")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import die, physical_cores  # noqa: E402
from peer_gpt import llama_flops_per_token, load_text, lr_at  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True, help="UTF-8 text file, byte-level tokens (frugal's text:PATH)")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary (the tokens are bytes; a larger one widens the head)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--mlp", type=int, default=688, help="SwiGLU width (intermediate_size)")
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (the first one compiles)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lr-warmup-steps", type=int, default=50)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = the physical cores")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.embd % a.heads or a.heads % a.kv_heads:
        ap.error("--heads must divide --embd and --kv-heads must divide --heads")
    if a.steps < 1 or a.warmup < 1:
        ap.error("--steps and --warmup must be at least 1")
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        die(f"peer_llama: {e} (scripts/install-deps.sh installs transformers into .venv)")
    hf_logging.set_verbosity_error()
    threads = a.threads or physical_cores()
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    data = load_text(a.text, a.val_fraction)
    offsets = torch.arange(a.block + 1)
    gen = torch.Generator().manual_seed(a.seed)

    def get_batch():
        ix = torch.randint(len(data) - a.block - 1, (a.batch,), generator=gen)
        w = data[ix[:, None] + offsets].to(torch.long)
        return w[:, :-1], w[:, 1:]

    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.embd, intermediate_size=a.mlp, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.block,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False)
    model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    model.train()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8, fused=True)
    forward = torch.compile(model) if a.compile else model
    amp = torch.bfloat16 if a.dtype == "bf16" else None
    total = a.warmup + a.steps
    times, data_s, losses = [], [], []
    t_prev = time.perf_counter()
    for step in range(total):
        t0 = time.perf_counter()
        x, y = get_batch()
        data_s.append(time.perf_counter() - t0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr_warmup_steps, a.lr, 0.1)
        with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
            logits = forward(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        t = time.perf_counter()
        times.append(t - t_prev)
        t_prev = t
    timed = times[a.warmup:]
    step_med = statistics.median(timed)
    tokens = a.batch * a.block
    print(json.dumps({
        "program": "transformers_llama_peer", "torch": torch.__version__,
        "transformers": __import__("transformers").__version__, "dtype": a.dtype, "compile": a.compile,
        "threads": threads, "attn_implementation": "sdpa",
        "model": {"layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads, "embd": a.embd, "mlp": a.mlp,
                  "block": a.block, "vocab": a.vocab, "tied": False},
        "batch": a.batch, "params": params,
        "flops_per_token": llama_flops_per_token(a.layers, a.embd, a.heads, a.kv_heads, a.mlp, a.vocab, a.block),
        "warmup_steps_untimed": a.warmup, "timed_steps": len(timed),
        "step_ms_median": 1e3 * step_med, "tokens_per_s_median": tokens / step_med,
        "first_step_s": times[0], "compile_s": max(0.0, times[0] - step_med) if a.compile else 0.0,
        "data_ms_median": 1e3 * statistics.median(data_s[a.warmup:]),
        "step_ms": [round(1e3 * t, 3) for t in timed], "final_loss": losses[-1],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
