#!/usr/bin/python3
"""The peer: the same GPT, data, batch and precision as `frugal train`, written as an idiomatic
PyTorch training loop (what a practitioner would write). bench/compute_levers.py runs it beside
frugal, alternating, and compares median per-step throughput.

Run with Debian's /usr/bin/python3 (torch 1.13). Prints one JSON object.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(embd)
        self.qkv = nn.Linear(embd, 3 * embd)
        self.proj = nn.Linear(embd, embd)
        self.ln2 = nn.LayerNorm(embd)
        self.fc = nn.Linear(embd, 4 * embd)
        self.fc_proj = nn.Linear(4 * embd, embd)
        self.drop = nn.Dropout(dropout)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return self.drop(self.proj((att @ v).transpose(1, 2).reshape(B, T, C)))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.drop(self.fc_proj(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, embd, dropout=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, embd)
        self.wpe = nn.Embedding(block, embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(embd, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embd)
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
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T)))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-skip", type=int, default=3, help="steps excluded from the median")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    data = torch.frombuffer(bytearray(open(a.text, "rb").read()), dtype=torch.uint8).long()
    model = GPT(256, a.block, a.layers, a.heads, a.embd)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(1337)
    times, losses = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        ix = torch.randint(len(data) - a.block - 1, (a.batch,), generator=gen)
        x = torch.stack([data[i:i + a.block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.block] for i in ix])
        lr = a.lr * min(1.0, (step + 1) / 50)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    per_step = [a.batch * a.block / t for t in times[a.warmup_skip:]]
    print(json.dumps({"program": "pytorch_peer", "precision": a.precision, "threads": a.threads,
                      "tokens_per_s_median": statistics.median(per_step),
                      "step_ms_median": 1e3 * statistics.median(times[a.warmup_skip:]),
                      "final_loss": losses[-1], "torch": torch.__version__}))


if __name__ == "__main__":
    main()
