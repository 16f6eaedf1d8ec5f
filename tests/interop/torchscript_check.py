#!/usr/bin/env python3
"""A model written in Python (torch.jit.script), trained by frugal's loop (model.source =
"torchscript:FILE"), against the same module trained by PyTorch.

1. A table dataset: a CSV made here, `frugal prepare --format csv`; the training records are read
   back from the record shards (docs/formats/shards.md) in Python.
2. A module with parameters and buffers (Linear, BatchNorm1d, GELU, Linear) whose forward(x, y)
   returns the cross-entropy, scripted and saved. frugal trains it for 30 full-batch steps
   (micro_batch = every training record, so each step sees the whole split in some order), fp32,
   AdamW as frugal configures it (decay on matrices only, constant learning rate, no clipping);
   PyTorch trains the same scripted module from the same start on the same records with
   torch.optim.AdamW and the same groups. The losses agree step by step within 1e-4 (the
   order of float sums: frugal sees the records permuted).
3. frugal's final weights load into the Python module by their state_dict names (strict), and
   its parameters equal PyTorch's within 1e-4.
4. Exact resume: stopped at step 15 (--stop-at-step) and resumed, the final weights equal the
   uninterrupted run's bitwise.
5. bf16 autocast trains it too: finite losses, the last within 0.05 of fp32's.
6. A script whose forward takes only x is refused (exit 2) with a message naming the file.

Usage: torchscript_check.py FRUGAL_BINARY. Exits 77 (skipped) when torch is not importable.
"""
import glob
import json
import os
import struct
import sys
import tempfile

from interop_common import Check, read_shard

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

STEPS, LR, WD, B1, B2 = 30, 0.01, 0.1, 0.9, 0.99
TOL = 1e-4


CHECK = Check("torchscript_check")
fail, run = CHECK.fail, CHECK.run


class Net(torch.nn.Module):
    def __init__(self, features: int, classes: int):
        super().__init__()
        # No bias before the batch norm: its gradient would be zero up to rounding, and AdamW turns
        # rounding noise into full-size steps, so two correct trainers would disagree on it.
        self.body = torch.nn.Sequential(torch.nn.Linear(features, 32, bias=False), torch.nn.BatchNorm1d(32),
                                        torch.nn.GELU(), torch.nn.Linear(32, classes))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.body(x), y)


class OnlyX(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).sum()


def read_records(path, features):
    """The records of one uncompressed record shard: (labels, features) tensors."""
    labels, xs = [], []
    for i, r in enumerate(read_shard(path)):
        if len(r) != 8 + 4 * features:
            fail(f"{path}: record {i} has {len(r)} bytes")
        labels.append(struct.unpack_from("<q", r, 0)[0])
        xs.append(struct.unpack_from(f"<{features}f", r, 8))
    return torch.tensor(labels), torch.tensor(xs, dtype=torch.float32)


def frugal_train(frugal, sets, extra=(), expect=0):
    return run([frugal, "train", "--quiet", *extra] + [x for s in sets for x in ("--set", s)], expect)


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r["loss"] for r in rows if r.get("event") == "step"]


def python_training(script, x, y):
    net = torch.jit.load(script)
    decay = [p for p in net.parameters() if p.dim() >= 2]
    other = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=(B1, B2), eps=1e-8)
    net.train()
    out = []
    for _ in range(STEPS):
        loss = net(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out, net


def main():
    frugal = sys.argv[1]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        g = torch.Generator().manual_seed(5)
        features, classes, rows = 6, 3, 150
        xs = torch.randn(rows, features, generator=g)
        ys = (xs @ torch.randn(features, classes, generator=g)).argmax(1)
        csv = os.path.join(tmp, "table.csv")
        with open(csv, "w") as f:
            f.write(",".join(f"f{i}" for i in range(features)) + ",label\n")
            for r, lab in zip(xs.tolist(), ys.tolist()):
                f.write(",".join(f"{v:.6f}" for v in r) + f",{lab}\n")
        ds = os.path.join(tmp, "ds")
        run([frugal, "prepare", csv, "--out", ds, "--format", "csv", "--val-fraction", "0.2", "--quiet"])
        parts = [read_records(p, features) for p in sorted(glob.glob(os.path.join(ds, "train_*.frs")))]
        y_train = torch.cat([p[0] for p in parts])
        x_train = torch.cat([p[1] for p in parts])

        torch.manual_seed(11)
        script = os.path.join(tmp, "net.pt")
        torch.jit.script(Net(features, classes)).save(script)

        # fp32 by name: precision.mode = "auto" (the default) picks bf16 on a CPU whose bf16 matmuls
        # are fast (AVX-512 BF16), and the losses then differ from PyTorch's fp32 ones from step 1.
        common = [f"run.out_dir={tmp}", "run.threads=1", "precision.mode=fp32", f"model.source=torchscript:{script}",
                  f"data.source=records:{ds}", f"data.micro_batch={len(y_train)}", f"train.steps={STEPS}",
                  f"train.lr={LR}", "train.warmup_steps=0", "train.min_lr_ratio=1", f"train.weight_decay={WD}",
                  f"train.beta1={B1}", f"train.beta2={B2}", "train.grad_clip=0", "train.log_every=1",
                  "train.eval_every=0", "checkpoint.enabled=true", "checkpoint.every_steps=10"]
        frugal_train(frugal, common + ["run.name=fp32"])
        ours = losses(os.path.join(tmp, "fp32"))
        theirs, net = python_training(script, x_train, y_train)
        if len(ours) != STEPS:
            fail(f"frugal logged {len(ours)} steps, expected {STEPS}")
        worst = max(abs(a - b) for a, b in zip(ours, theirs))
        if not worst <= TOL:
            fail(f"losses differ by up to {worst:.2e} > {TOL}:\n frugal  {ours}\n pytorch {theirs}")
        if not theirs[-1] < theirs[0] - 0.2:
            fail(f"the module did not learn: {theirs[0]:.3f} -> {theirs[-1]:.3f}")

        final = load_file(os.path.join(tmp, "fp32", "final", "model.safetensors"))
        plain = Net(features, classes)
        plain.load_state_dict(final, strict=True)  # raises on a name or shape that differs
        sd = net.state_dict()
        pdiff = max((final[k].float() - sd[k].float()).abs().max().item() for k in sd)  # buffers too
        if not pdiff <= TOL:
            fail(f"frugal's final parameters differ from PyTorch's by {pdiff:.2e}")

        frugal_train(frugal, common + ["run.name=resumed"], extra=["--stop-at-step", "15"])
        frugal_train(frugal, common + ["run.name=resumed"], extra=["--resume", "auto"])
        again = load_file(os.path.join(tmp, "resumed", "final", "model.safetensors"))
        if set(again) != set(final) or any(not torch.equal(again[k], final[k]) for k in final):
            fail("the resumed run's final weights are not the uninterrupted run's")

        frugal_train(frugal, common + ["run.name=bf16", "precision.mode=bf16"])
        half = losses(os.path.join(tmp, "bf16"))
        if len(half) != STEPS or not all(v == v and abs(v) < 1e9 for v in half) or abs(half[-1] - ours[-1]) > 0.05:
            fail(f"bf16 losses {half} do not track fp32's {ours}")

        bad = os.path.join(tmp, "only_x.pt")
        torch.jit.script(OnlyX()).save(bad)
        p = frugal_train(frugal, [f"run.out_dir={tmp}", "run.name=bad", f"model.source=torchscript:{bad}",
                                  f"data.source=records:{ds}"], expect=2)
        if bad not in p.stderr or "forward must take (x, y)" not in p.stderr:
            fail(f"a forward without y is not refused by name: {p.stderr[-800:]}")

    print(f"torchscript_check: {STEPS} full-batch steps of a scripted Linear-BatchNorm-GELU-Linear ({len(y_train)} "
          f"records): max |loss difference| frugal vs PyTorch {worst:.2e}, parameters {pdiff:.2e} (tolerance {TOL}); "
          f"loss {ours[0]:.4f} -> {ours[-1]:.4f}; resumed at step 15: final weights bitwise equal; bf16 last loss "
          f"{half[-1]:.4f} vs fp32 {ours[-1]:.4f}")


if __name__ == "__main__":
    main()
