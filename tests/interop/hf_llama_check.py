#!/usr/bin/env python3
"""Llama-family Hugging Face checkpoints in and out of frugal, checked against `transformers`.

1. Import: transformers makes tiny random models, every parameter perturbed (so no norm weight is
   the one a mix-up would hide), saved in shards (max_shard_size 50KB, with
   model.safetensors.index.json): Llama (grouped-query attention, llama3 rope scaling, untied
   head), Llama with attention biases and linear scaling, Llama with yarn scaling, Qwen2 (q/k/v
   biases, tied head), Qwen3 (q/k norms, a head width of its own), Mistral (a sliding window
   shorter than the sequence). For each: frugal's fp32 logits (model.init_from's loader,
   frugal_gpt_logits --hf) equal transformers' within 1e-4; the loss with labels and the gradient of
   one weight equal; 24 greedy tokens equal transformers' generate().
2. Layouts and dtypes: the llama3 model's config.json rewritten in the 4.x layout (top-level
   rope_theta, rope_scaling with "type") gives bitwise the same logits; the model saved in bf16
   and in fp16 gives transformers' logits for the same stored weights.
3. The hub cache: the directory laid out as huggingface_hub keeps it (blobs, a snapshot of
   symlinks, refs/main) under HF_HUB_CACHE is what model.init_from = "hf:org/name" trains from.
4. Fine-tune and export: a tokenizer made with `tokenizers` and a chat template, saved beside a
   Llama model; `frugal prepare --tokenizer hf:DIR/tokenizer.json`; a short `frugal train` from
   hf:DIR on those shards; `frugal sample` on the run; `frugal export --max-shard-size 60KB` ->
   AutoModelForCausalLM.from_pretrained gives frugal's logits for the run's weights (1e-4), in
   shards; AutoTokenizer.from_pretrained gives the same chat template; generation_config.json
   carries the model's token ids.
5. Refusals: a key that conflicts with config.json and a model_type frugal does not read exit 2,
   naming the key.

Usage: hf_llama_check.py FRUGAL_BINARY FRUGAL_GPT_LOGITS. Exits 77 (skipped) when transformers is
not installed. Prints the differences it measured.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from interop_common import Check

try:
    import torch
    from safetensors.torch import load_file
    from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                              Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
    from transformers.utils import logging as hf_logging
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

hf_logging.set_verbosity_error()
TOL = 1e-4
CHECK = Check("hf_llama_check")
fail, run = CHECK.fail, CHECK.run
COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)


def cases():
    llama3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    return {
        "llama (GQA, llama3, untied)": (LlamaConfig(**COMMON, rope_parameters=llama3), LlamaForCausalLM),
        "llama (biases, linear)": (LlamaConfig(**COMMON, attention_bias=True, tie_word_embeddings=True,
                                               rope_parameters={"rope_type": "linear", "rope_theta": 1e4,
                                                                "factor": 2.0}), LlamaForCausalLM),
        "llama (yarn)": (LlamaConfig(**COMMON, rope_parameters={"rope_type": "yarn", "rope_theta": 5000.0, "factor": 4.0,
                                                                "original_max_position_embeddings": 16}),
                         LlamaForCausalLM),
        "qwen2 (qkv biases, tied)": (Qwen2Config(**COMMON, tie_word_embeddings=True), Qwen2ForCausalLM),
        "qwen3 (qk norm, head_dim 24)": (Qwen3Config(**COMMON, head_dim=24), Qwen3ForCausalLM),
        "mistral (window 7)": (MistralConfig(**COMMON, sliding_window=7), MistralForCausalLM),
    }


def make_model(cfg, cls, seed):
    torch.manual_seed(seed)
    model = cls(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def frugal_outputs(helper, tmp, tokens, hf=None, run_dir=None, targets=None, grad=None, generate=0):
    out = os.path.join(tmp, "frugal_out.safetensors")
    args = [helper] + (["--hf", hf] if hf else ["--run", run_dir]) + ["--tokens", ",".join(map(str, tokens))]
    if targets:
        args += ["--targets", ",".join(map(str, targets)), "--grad", grad]
    if generate:
        args += ["--generate", str(generate)]
    run(args + ["--out", out])
    return load_file(out)


def check_import(helper, tmp, tokens):
    diffs = {}
    for i, (name, (cfg, cls)) in enumerate(cases().items()):
        model = make_model(cfg, cls, 10 + i)
        d = os.path.join(tmp, f"m{i}")
        model.save_pretrained(d, max_shard_size="50KB")
        if not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
            fail(f"{name}: save_pretrained wrote {sorted(os.listdir(d))}, no shards")
        ids = torch.tensor([tokens])
        out = model(ids, labels=ids)  # transformers shifts the labels itself
        out.loss.backward()
        ref_grad = dict(model.named_parameters())["model.layers.1.mlp.down_proj.weight"].grad
        with torch.no_grad():
            ref_gen = model.generate(ids[:, :8], max_new_tokens=24, min_new_tokens=24, do_sample=False)[0, 8:].tolist()
        got = frugal_outputs(helper, tmp, tokens[:-1], hf=d, targets=tokens[1:], grad="h1.mlp.down.weight")
        gen = frugal_outputs(helper, tmp, tokens[:8], hf=d, generate=24)["generated"].tolist()
        logit_diff = (got["logits"] - out.logits[0, :-1].detach()).abs().max().item()
        grad_diff = (got["grad"] - ref_grad).abs().max().item()
        loss_diff = abs(got["loss"].item() - out.loss.item())
        if not logit_diff <= TOL:
            fail(f"{name}: frugal's logits differ from transformers' by {logit_diff:.2e} > {TOL}")
        if not loss_diff <= TOL or not grad_diff <= TOL:
            fail(f"{name}: loss differs by {loss_diff:.2e}, down_proj's gradient by {grad_diff:.2e} (> {TOL})")
        if gen != ref_gen:
            fail(f"{name}: frugal's greedy tokens {gen} are not transformers' {ref_gen}")
        diffs[name] = (logit_diff, loss_diff, grad_diff)
    return diffs


def check_layouts_and_dtypes(helper, tmp, tokens):
    d = os.path.join(tmp, "m0")
    new = frugal_outputs(helper, tmp, tokens, hf=d)["logits"]
    old_dir = os.path.join(tmp, "m0-4x")
    shutil.copytree(d, old_dir)
    with open(os.path.join(old_dir, "config.json")) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type")
    cfg["rope_scaling"] = rope
    with open(os.path.join(old_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    old = frugal_outputs(helper, tmp, tokens, hf=old_dir)["logits"]
    if not torch.equal(new, old):
        fail("the 4.x layout of config.json (rope_theta + rope_scaling) gives other logits than the 5.x one")
    cfg, cls = cases()["qwen2 (qkv biases, tied)"]
    diffs = {}
    for dtype in (torch.bfloat16, torch.float16):
        model = make_model(cfg, cls, 30).to(dtype)
        dd = os.path.join(tmp, f"qwen-{dtype}")
        model.save_pretrained(dd)
        ref = AutoModelForCausalLM.from_pretrained(dd, dtype=torch.float32).eval()
        with torch.no_grad():
            want = ref(torch.tensor([tokens])).logits[0]
        got = frugal_outputs(helper, tmp, tokens, hf=dd)["logits"]
        diffs[str(dtype)] = (got - want).abs().max().item()
        if not diffs[str(dtype)] <= TOL:
            fail(f"a {dtype} checkpoint: frugal's logits differ by {diffs[str(dtype)]:.2e} > {TOL}")
    return diffs


def hub_cache(tmp, src):
    """src laid out as huggingface_hub's cache: blobs, a snapshot of symlinks, refs/main."""
    root = os.path.join(tmp, "hub", "models--org--tiny-llama")
    snap = os.path.join(root, "snapshots", "abc123")
    os.makedirs(os.path.join(root, "blobs"))
    os.makedirs(snap)
    os.makedirs(os.path.join(root, "refs"))
    for i, name in enumerate(sorted(os.listdir(src))):
        blob = os.path.join(root, "blobs", f"blob{i}")
        shutil.copy(os.path.join(src, name), blob)
        os.symlink(os.path.relpath(blob, snap), os.path.join(snap, name))
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write("abc123")
    return os.path.join(tmp, "hub")


def tokenizer_dir(d, specials=("<s>", "</s>", "<|im|>")):
    """A byte-level BPE with chat markers, saved beside the model with a chat template."""
    docs = [f"user asks about item {i} and the assistant answers {i * 7 % 13} times" for i in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=290, special_tokens=list(specials),
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    template = "{% for m in messages %}<|im|>{{ m['role'] }}\n{{ m['content'] }}</s>{% endfor %}"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", chat_template=template)
    fast.save_pretrained(d)
    with open(os.path.join(d, "docs.txt"), "w") as f:
        f.write("\n".join(docs) + "\n")
    return template, fast.eos_token_id


def check_finetune_and_export(frugal, helper, tmp, tokens):
    cfg, cls = cases()["llama (GQA, llama3, untied)"]
    src = os.path.join(tmp, "base")
    template, eos = tokenizer_dir(src)
    cfg.eos_token_id, cfg.bos_token_id = eos, eos - 1
    make_model(cfg, cls, 40).save_pretrained(src, max_shard_size="50KB")
    data = os.path.join(tmp, "ds")
    run([frugal, "prepare", os.path.join(src, "docs.txt"), "--tokenizer", f"hf:{src}/tokenizer.json", "--out", data,
         "--quiet"])
    env = dict(os.environ, HF_HUB_CACHE=hub_cache(tmp, src))
    sets = [f"run.out_dir={tmp}", "run.name=tuned", "run.threads=1", "model.init_from=hf:org/tiny-llama",
            "model.block=32", f"data.source=shards:{data}", "data.micro_batch=4", "train.steps=4",
            "train.eval_every=0", "train.lr=1e-3", "checkpoint.enabled=false"]
    p = subprocess.run([frugal, "train", "--quiet"] + [x for s in sets for x in ("--set", s)], capture_output=True,
                       text=True, env=env)
    if p.returncode != 0:
        fail(f"frugal train from the hub cache exited {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-2500:]}")
    run_dir = os.path.join(tmp, "tuned")
    with open(os.path.join(run_dir, "config.toml")) as f:
        if not re.search(r"^arch = ['\"]llama['\"]", f.read(), re.M):
            fail("the run's config.toml does not record model.arch = \"llama\"")
    run([frugal, "sample", run_dir, "--prompt", "user asks", "-n", "8"])
    out = os.path.join(tmp, "exported")
    info = json.loads(run([frugal, "export", run_dir, "--out", out, "--max-shard-size", "60KB", "--json"],
                          ).stdout.strip().splitlines()[-1])
    if "model.safetensors.index.json" not in info["files"] or info["model_type"] != "llama":
        fail(f"the export wrote {info['files']} as {info['model_type']}, expected llama shards with their index")
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    if type(model).__name__ != "LlamaForCausalLM" or model.config.rope_parameters["rope_type"] != "llama3":
        fail(f"the export reads back as {type(model).__name__} with {model.config.rope_parameters}")
    with torch.no_grad():
        want = model(torch.tensor([tokens[:32]])).logits[0]
    got = frugal_outputs(helper, tmp, tokens[:32], run_dir=run_dir)["logits"]
    diff = (got - want).abs().max().item()
    if not diff <= TOL:
        fail(f"exported model: transformers' logits differ from frugal's by {diff:.2e} > {TOL}")
    tok = AutoTokenizer.from_pretrained(out)
    if tok.chat_template != template:
        fail(f"the exported tokenizer's chat template is {tok.chat_template!r}, not the source's")
    with open(os.path.join(out, "generation_config.json")) as f:
        if json.load(f).get("eos_token_id") != eos:
            fail("generation_config.json does not carry the model's eos_token_id")
    # Data tokenised by another tokenizer (the same merges, the special tokens in another order):
    # its ids name other tokens than the checkpoint's embeddings learned; refused before any step.
    other = os.path.join(tmp, "other-tokenizer")
    tokenizer_dir(other, specials=("<|im|>", "<s>", "</s>"))
    other_data = os.path.join(tmp, "ds-other")
    run([frugal, "prepare", os.path.join(other, "docs.txt"), "--tokenizer", f"hf:{other}/tokenizer.json", "--out",
         other_data, "--quiet"])
    sets = [s.replace(f"shards:{data}", f"shards:{other_data}").replace("run.name=tuned", "run.name=other")
            for s in sets]
    p = subprocess.run([frugal, "train", "--quiet"] + [x for s in sets for x in ("--set", s)], capture_output=True,
                       text=True, env=env)
    if p.returncode != 2 or "was tokenised with" not in p.stderr or '"<|im|>"' not in p.stderr:
        fail(f"data of another tokenizer was not refused by token (exit {p.returncode}): {p.stderr[-800:]}")
    if os.path.exists(os.path.join(tmp, "other")):
        fail("the refused run left a run directory behind")
    return diff


def check_refusals(frugal, tmp):
    d = os.path.join(tmp, "m0")
    base = [f"run.out_dir={tmp}", "run.threads=1", f"model.init_from=hf:{d}", "train.steps=1"]
    p = run([frugal, "train", "--quiet", "--set", "run.name=r1"] + [x for s in base + ["model.kv_heads=4"]
                                                                   for x in ("--set", s)], expect=2)
    if "model.kv_heads = 4" not in p.stderr or "num_key_value_heads = 2" not in p.stderr:
        fail(f"a conflicting model.kv_heads was not named: {p.stderr[-800:]}")
    bad = os.path.join(tmp, "bad")
    shutil.copytree(d, bad)
    with open(os.path.join(bad, "config.json")) as f:
        cfg = json.load(f)
    cfg["model_type"] = "falcon"
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(cfg, f)
    p = run([frugal, "train", "--quiet", "--set", "run.name=r2", "--set", f"model.init_from=hf:{bad}",
             "--set", f"run.out_dir={tmp}"], expect=2)
    if '"model_type"' not in p.stderr or "falcon" not in p.stderr:
        fail(f"an unknown model_type was not named: {p.stderr[-800:]}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    frugal, helper = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tokens = [int(t) for t in torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(7))]
    with tempfile.TemporaryDirectory() as tmp:
        diffs = check_import(helper, tmp, tokens)
        dtype_diffs = check_layouts_and_dtypes(helper, tmp, tokens)
        export_diff = check_finetune_and_export(frugal, helper, tmp, tokens)
        check_refusals(frugal, tmp)
    for name, (logits, loss, grad) in diffs.items():
        print(f"hf_llama_check: {name}: logits {logits:.2e}, loss {loss:.2e}, gradient {grad:.2e}, 24 greedy equal")
    print(f"hf_llama_check: bf16/fp16 files {dtype_diffs}; export -> from_pretrained {export_diff:.2e} "
          f"(tolerance {TOL}); 4.x layout bitwise; hub cache; chat template kept")


if __name__ == "__main__":
    main()
