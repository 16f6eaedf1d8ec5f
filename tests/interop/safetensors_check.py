#!/usr/bin/env python3
"""frugal's .safetensors files against the reference `safetensors` library, both ways.

1. A short frugal run (bf16 checkpoint weights with fp32 masters) writes final/model.safetensors
   and checkpoint files; the library opens every one of them (header, dtypes, offsets, metadata),
   and each tensor has the shape the run's [model] config gives it and the dtype the config asks
   for (bf16 in the checkpoint, fp32 in final/ and the masters). The bf16 weights are the fp32
   masters rounded once to bf16 (what PyTorch's .to(bfloat16) gives).
2. The library writes the final weights again (its own tensor order and header layout), and
   `frugal sample --weights` on that file generates exactly the tokens it generates from frugal's
   own file.

Usage: safetensors_check.py FRUGAL_BINARY. Exits 77 (skipped) when the library is not installed.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)


def expected_shapes(m):
    """Parameter shapes of frugal's GPT for the [model] table of config.toml (docs/model.md)."""
    v, e, b = m["vocab"], m["embd"], m["block"]  # the head is tied to wte: no tensor of its own
    shapes = {"wte.weight": [v, e], "wpe.weight": [b, e], "ln_f.weight": [e], "ln_f.bias": [e]}
    for i in range(m["layers"]):
        p = f"h{i}."
        shapes.update({p + "ln1.weight": [e], p + "ln1.bias": [e], p + "ln2.weight": [e], p + "ln2.bias": [e],
                       p + "attn.qkv.weight": [3 * e, e], p + "attn.qkv.bias": [3 * e],
                       p + "attn.proj.weight": [e, e], p + "attn.proj.bias": [e],
                       p + "fc.weight": [4 * e, e], p + "fc.bias": [4 * e],
                       p + "fc_proj.weight": [e, 4 * e], p + "fc_proj.bias": [e]})
    return shapes


def fail(msg):
    print(f"safetensors_check: FAIL: {msg}")
    sys.exit(1)


def sample(frugal, run, weights):
    p = subprocess.run([frugal, "sample", run, "--prompt", "12+7=", "--max-tokens", "12", "--stop", "",
                        "--weights", weights, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"frugal sample --weights {weights} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])["tokens"]


def main():
    frugal = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        sets = ["run.out_dir=" + tmp, "run.threads=1", "model.layers=2", "model.heads=2", "model.embd=32",
                "model.block=16", "data.micro_batch=8", "data.arith_lines=2000", "train.steps=6",
                "train.eval_every=0", "train.answer_samples=0", "precision.mode=fp32",
                "checkpoint.every_steps=3", "checkpoint.weights_dtype=bf16", "checkpoint.exact_resume=true"]
        args = [frugal, "train", "--quiet"] + [x for s in sets for x in ("--set", s)]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"frugal train exited {p.returncode}: {p.stderr[-2000:]}")
        run = os.path.join(tmp, "demo")
        import tomllib
        with open(os.path.join(run, "config.toml"), "rb") as f:
            shapes = expected_shapes(tomllib.load(f)["model"])
        ck = os.path.join(run, "checkpoints", "step-00000006")
        files = {os.path.join(run, "final", "model.safetensors"): torch.float32,
                 os.path.join(ck, "model.safetensors"): torch.bfloat16,
                 os.path.join(ck, "master.safetensors"): torch.float32}
        loaded = {}
        for path, dtype in files.items():
            if not os.path.exists(path):
                fail(f"{path} was not written")
            t = load_file(path)  # raises on a malformed header, dtype or offset
            with safe_open(path, "pt") as f:
                f.metadata()  # the __metadata__ table must parse as str -> str
            if {k: list(v.shape) for k, v in t.items()} != shapes:
                fail(f"{path}: tensors {sorted((k, list(v.shape)) for k, v in t.items())} are not the model's "
                     f"{sorted(shapes.items())}")
            wrong = [k for k, v in t.items() if v.dtype != dtype]
            if wrong:
                fail(f"{path}: {wrong[:3]} are not {dtype}")
            loaded[path] = t
        masters, bf16 = loaded[os.path.join(ck, "master.safetensors")], loaded[os.path.join(ck, "model.safetensors")]
        for k in shapes:
            if not torch.equal(masters[k].to(torch.bfloat16), bf16[k]):
                fail(f"{k}: the bf16 weights are not the fp32 masters rounded to bf16")
        final = os.path.join(run, "final", "model.safetensors")
        resaved = os.path.join(tmp, "resaved.safetensors")
        t = loaded[final]
        save_file({k: t[k].contiguous() for k in sorted(t, reverse=True)}, resaved, metadata={"written_by": "safetensors"})
        a, b = sample(frugal, run, final), sample(frugal, run, resaved)
        if a != b or len(a) != 12:
            fail(f"frugal sample gives {a} from its own file but {b} from the library's")
        print(f"safetensors_check: {len(files)} files opened by safetensors {__import__('safetensors').__version__}, "
              f"{len(shapes)} tensors each as the config says; frugal reads the library's file: same 12 tokens")


if __name__ == "__main__":
    main()
