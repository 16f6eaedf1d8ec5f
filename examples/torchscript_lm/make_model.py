#!/usr/bin/env python3
"""Writes a character-level language model, written in PyTorch and compiled with
torch.jit.script, for `frugal train` (model.source = "torchscript:FILE").

The contract frugal trains against (docs/library.md, "A model written in Python"): forward(x, y)
takes the batch of data.source (here text:FILE, byte tokens: x and y are int64 (batch, block),
y the next byte of each position) and returns the batch's mean loss as a 0-dim tensor. frugal
owns everything else: the optimizer over the module's parameters, precision, accumulation,
clipping, checkpoints and exact resume, data parallelism, the budget and the reports.

  python examples/torchscript_lm/make_model.py OUT.pt [--embd 128] [--hidden 256] [--seed 0]
"""
import argparse

import torch
import torch.nn.functional as F


class CharGru(torch.nn.Module):
    def __init__(self, vocab: int, embd: int, hidden: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embd)
        self.rnn = torch.nn.GRU(embd, hidden, batch_first=True)
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(x))
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the TorchScript file to write")
    ap.add_argument("--vocab", type=int, default=256, help="token ids the data holds (256: bytes)")
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = torch.jit.script(CharGru(a.vocab, a.embd, a.hidden))
    model.save(a.out)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out}: CharGru({a.vocab}, {a.embd}, {a.hidden}), {params:,} parameters")


if __name__ == "__main__":
    main()
