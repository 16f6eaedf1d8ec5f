#!/usr/bin/env python3
"""Hugging Face GPT-2 in and out of frugal, checked against the reference `transformers` library.

1. Import: transformers makes small randomly initialised GPT-2 models (no download) with every
   parameter perturbed (so biases and LayerNorm weights are not the zeros and ones a mix-up would
   hide), saves them with save_pretrained, and frugal's logits for the same tokens
   (frugal_gpt_logits --hf, model.init_from's loader) equal transformers' within 1e-4 (fp32; the
   difference is the order of float sums in the two attention kernels). Two configs: tanh GELU
   (gelu_new) with the default epsilon, and exact GELU with epsilon 1e-2; and the first again with
   the old tensor names (no "transformer." prefix, attention mask buffers), as the original gpt2
   checkpoint on the hub has them.
2. Export: a short frugal run, `frugal export` -> GPT2LMHeadModel.from_pretrained -> the same
   logits as frugal's for the run's final weights (1e-4); its generation_config.json loads
   (GenerationConfig); a bf16 export loads as bf16.
3. Fine-tuning: transformers trains a model on a text until its loss is well below chance, saves
   it; `frugal train` with model.init_from = "hf:DIR" (lower learning rate, early stopping)
   starts at that loss, not at chance like a run from random weights, and finishes; its exported
   weights load in transformers again. A run with a shorter model.block than the source's
   n_positions exports all of the source's positions (the rows it did not train, the source's).
4. Refusals: a conflicting model key and a directory without model.safetensors exit 2 with
   messages naming the key or file.

Usage: hf_gpt2_check.py FRUGAL_BINARY FRUGAL_GPT_LOGITS. Exits 77 (skipped) when transformers is
not installed. Prints the logit differences it measured.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from interop_common import Check

try:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

TOL = 1e-4


CHECK = Check("hf_gpt2_check")
fail, run = CHECK.fail, CHECK.run


def hf_logits(model, tokens):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def frugal_logits(helper, tmp, tokens, hf=None, run_dir=None):
    out = os.path.join(tmp, "frugal_logits.safetensors")
    which = ["--hf", hf] if hf else ["--run", run_dir]
    run([helper] + which + ["--tokens", ",".join(map(str, tokens)), "--out", out])
    return load_file(out)["logits"]


def make_model(cfg, seed):
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def frugal_train(frugal, sets, expect=0):
    return run([frugal, "train", "--quiet"] + [x for s in sets for x in ("--set", s)], expect)


def steps(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if '"event":"step"' in line.replace(" ", "")]


def text_file(path, n=6000):
    """A text with structure a small model learns in a few hundred steps."""
    words = ["the cat", "a dog", "my bird", "one fox"]
    verbs = ["sat on", "ran to", "looked at", "slept by"]
    things = ["the mat.", "a tree.", "the door.", "my bed."]
    lines, i = [], 0
    while sum(len(x) + 1 for x in lines) < n:
        lines.append(f"{words[i % 4]} {verbs[(i // 4) % 4]} {things[(i // 16) % 4]}")
        i += 1
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return open(path, "rb").read()


def check_import(helper, tmp):
    diffs = {}
    tokens = [int(t) for t in torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(7))]
    cases = {
        "gelu_new, eps 1e-5": GPT2Config(vocab_size=300, n_positions=48, n_embd=64, n_layer=2, n_head=4,
                                          activation_function="gelu_new"),
        "gelu, eps 1e-2": GPT2Config(vocab_size=300, n_positions=40, n_embd=48, n_layer=3, n_head=3,
                                      activation_function="gelu", layer_norm_epsilon=1e-2),
    }
    for i, (name, cfg) in enumerate(cases.items()):
        model = make_model(cfg, seed=10 + i)
        d = os.path.join(tmp, f"hf{i}")
        model.save_pretrained(d)
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            fail(f"save_pretrained wrote {os.listdir(d)}, no model.safetensors")
        ref, got = hf_logits(model, tokens), frugal_logits(helper, tmp, tokens, hf=d)
        if got.shape != ref.shape:
            fail(f"{name}: frugal's logits have shape {tuple(got.shape)}, transformers' {tuple(ref.shape)}")
        diffs[name] = (got - ref).abs().max().item()
        if not diffs[name] <= TOL:
            fail(f"{name}: frugal's logits differ from transformers' by {diffs[name]:.2e} (max abs) > {TOL}")
    # The first model again with the hub's old names: no "transformer." prefix, mask buffers present.
    d0, old = os.path.join(tmp, "hf0"), os.path.join(tmp, "hf0-old")
    os.makedirs(old)
    t = load_file(os.path.join(d0, "model.safetensors"))
    renamed = {k.removeprefix("transformer."): v for k, v in t.items() if k != "lm_head.weight"}
    for layer in range(2):
        renamed[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(1, 1, 48, 48))
    save_file(renamed, os.path.join(old, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d0, "config.json")) as f, open(os.path.join(old, "config.json"), "w") as g:
        g.write(f.read())
    a = frugal_logits(helper, tmp, tokens, hf=d0)
    b = frugal_logits(helper, tmp, tokens, hf=old)
    if not torch.equal(a, b):
        fail("the same weights under the hub's old tensor names give other logits")
    return diffs, tokens


def check_export(frugal, helper, tmp, tokens):
    text = os.path.join(tmp, "export.txt")
    text_file(text, 3000)
    sets = [f"run.out_dir={tmp}", "run.name=export", "run.threads=1", "model.layers=2", "model.heads=2",
            "model.embd=32", "model.block=40", "model.vocab=300", "data.source=text:" + text,
            "data.micro_batch=4", "train.steps=5", "train.eval_every=0", "checkpoint.enabled=false"]
    frugal_train(frugal, sets)
    run_dir = os.path.join(tmp, "export")
    out = os.path.join(tmp, "exported")
    p = run([frugal, "export", run_dir, "--out", out, "--json"])
    info = json.loads(p.stdout.strip().splitlines()[-1])
    model = GPT2LMHeadModel.from_pretrained(out)
    if model.config.n_layer != 2 or model.config.vocab_size != 300 or model.config.activation_function != "gelu":
        fail(f"the exported config.json reads back as {model.config.to_dict()}")
    # generation_config.json is written and loads; byte-level text has no one end-of-document id.
    if "generation_config.json" not in info["files"]:
        fail(f"the export wrote {info['files']}, no generation_config.json")
    gen = GenerationConfig.from_pretrained(out)
    if gen.eos_token_id is not None or model.generation_config.eos_token_id is not None:
        fail(f"the byte-level run's generation_config.json names eos_token_id {gen.eos_token_id}")
    if sum(p.numel() for p in model.parameters()) != info["parameters"]:
        fail(f"transformers counts {sum(p.numel() for p in model.parameters())} parameters, frugal {info['parameters']}")
    ref, got = hf_logits(model, tokens), frugal_logits(helper, tmp, tokens, run_dir=run_dir)
    diff = (got - ref).abs().max().item()
    if not diff <= TOL:
        fail(f"exported model: transformers' logits differ from frugal's by {diff:.2e} > {TOL}")
    run([frugal, "export", run_dir, "--out", out], expect=2)  # never over an existing directory
    half = os.path.join(tmp, "exported-bf16")
    run([frugal, "export", run_dir, "--out", half, "--dtype", "bf16"])
    m16 = GPT2LMHeadModel.from_pretrained(half, dtype=torch.bfloat16)
    if m16.transformer.h[0].attn.c_attn.weight.dtype != torch.bfloat16:
        fail("the bf16 export did not load as bf16")
    return diff


def check_finetune(frugal, helper, tmp):
    text = os.path.join(tmp, "tune.txt")
    data = text_file(text)
    cfg = GPT2Config(vocab_size=300, n_positions=48, n_embd=64, n_layer=2, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(3)
    model = GPT2LMHeadModel(cfg)
    ids = torch.tensor(list(data))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(250):
        starts = torch.randint(0, len(ids) - 49, (16,), generator=g)
        batch = torch.stack([ids[s:s + 49] for s in starts])
        loss = model(batch[:, :-1], labels=batch[:, :-1]).loss  # transformers shifts the labels itself
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        starts = torch.randint(0, len(ids) - 49, (64,), generator=g)
        batch = torch.stack([ids[s:s + 49] for s in starts])
        python_loss = model(batch[:, :-1], labels=batch[:, :-1]).loss.item()
    chance = math.log(300)
    if python_loss > chance - 2:
        fail(f"transformers' own training reached only {python_loss:.3f} (chance {chance:.3f})")
    d = os.path.join(tmp, "pretrained")
    model.save_pretrained(d)
    common = [f"run.out_dir={tmp}", "run.threads=1", "data.source=text:" + text, "data.micro_batch=8",
              "train.steps=60", "train.eval_every=10", "train.eval_batches=4", "train.log_every=1",
              "train.warmup_steps=0", "checkpoint.enabled=false"]
    tuned = common + ["run.name=tuned", f"model.init_from=hf:{d}", "train.lr=1e-4", "early_stop.enabled=true",
                      "early_stop.metric=val_loss", "early_stop.patience=2"]
    frugal_train(frugal, tuned)
    scratch = common + ["run.name=scratch", "model.layers=2", "model.heads=4", "model.embd=64", "model.block=48",
                        "model.vocab=300", "model.activation=gelu_tanh", "train.lr=1e-4", "train.steps=2"]
    frugal_train(frugal, scratch)
    first_tuned = steps(os.path.join(tmp, "tuned"))[0]["loss"]
    first_scratch = steps(os.path.join(tmp, "scratch"))[0]["loss"]
    if abs(first_tuned - python_loss) > 0.3:
        fail(f"the fine-tuning run's first loss {first_tuned:.3f} is not the pretrained model's {python_loss:.3f}")
    if abs(first_scratch - chance) > 0.5:
        fail(f"the run from random weights starts at {first_scratch:.3f}, not near chance {chance:.3f}")
    with open(os.path.join(tmp, "tuned", "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(tmp, "tuned", "config.toml")) as f:
        toml = f.read()
    if "config.json n_layer" not in toml:
        fail("the run's config.toml does not name config.json as model.layers' origin")
    out = os.path.join(tmp, "tuned-hf")
    run([frugal, "export", os.path.join(tmp, "tuned"), "--out", out])
    GPT2LMHeadModel.from_pretrained(out)
    # A shorter context than the source's: the export keeps the source's 48 positions, the rows past
    # the run's 24 unchanged from the source, the first 24 the run's.
    frugal_train(frugal, common + ["run.name=short", f"model.init_from=hf:{d}", "model.block=24", "train.steps=3",
                                   "train.lr=1e-2", "train.eval_every=0", "train.eval_batches=1"])
    short = os.path.join(tmp, "short-hf")
    run([frugal, "export", os.path.join(tmp, "short"), "--out", short])
    exported = GPT2LMHeadModel.from_pretrained(short)
    wpe, source = exported.transformer.wpe.weight.detach(), model.transformer.wpe.weight.detach()
    if exported.config.n_positions != 48 or wpe.shape != source.shape or not torch.equal(wpe[24:], source[24:]):
        fail(f"the export of a run with model.block 24 over 48 positions has n_positions "
             f"{exported.config.n_positions} and position rows {tuple(wpe.shape)}, not the source's past row 24")
    if torch.equal(wpe[:24], source[:24]):
        fail("the export of the short run kept the source's first position rows, not the run's")
    return python_loss, first_tuned, first_scratch, summary


def check_refusals(frugal, tmp):
    d = os.path.join(tmp, "hf0")
    p = frugal_train(frugal, [f"run.out_dir={tmp}", "run.name=bad", f"model.init_from=hf:{d}", "model.layers=3"],
                     expect=2)
    if "model.layers = 3" not in p.stderr or "n_layer = 2" not in p.stderr:
        fail(f"a conflicting model.layers is not named with both values: {p.stderr[-800:]}")
    empty = os.path.join(tmp, "no-weights")
    os.makedirs(empty)
    with open(os.path.join(d, "config.json")) as f, open(os.path.join(empty, "config.json"), "w") as g:
        g.write(f.read())
    p = frugal_train(frugal, [f"run.out_dir={tmp}", "run.name=bad2", f"model.init_from=hf:{empty}"], expect=2)
    if "model.safetensors is missing" not in p.stderr:
        fail(f"a directory without model.safetensors is not named: {p.stderr[-800:]}")
    if os.path.exists(os.path.join(tmp, "bad")) or os.path.exists(os.path.join(tmp, "bad2")):
        fail("a refused run left a run directory")


def main():
    frugal, helper = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        diffs, tokens = check_import(helper, tmp)
        export_diff = check_export(frugal, helper, tmp, tokens)
        python_loss, first_tuned, first_scratch, summary = check_finetune(frugal, helper, tmp)
        check_refusals(frugal, tmp)
    import transformers
    print(f"hf_gpt2_check: transformers {transformers.__version__}; max |logit difference| (fp32, 40 tokens): "
          + ", ".join(f"import {k}: {v:.2e}" for k, v in diffs.items())
          + f", export -> from_pretrained: {export_diff:.2e} (tolerance {TOL})")
    print(f"hf_gpt2_check: fine-tuning from a transformers-trained model: its loss {python_loss:.3f}, frugal's first "
          f"step {first_tuned:.3f} (from random weights: {first_scratch:.3f}); stopped after {summary.get('steps')} "
          f"steps ({summary.get('stop_reason')}), final val_loss {summary.get('final_val_loss'):.3f}")


if __name__ == "__main__":
    main()
