#!/usr/bin/env python3
"""LoRA and DoRA adapters in and out of frugal, checked against `peft` (docs/lora.md).

For a tiny random Llama (grouped-query attention, q/k/v biases) and a tiny random GPT-2, each made
by transformers, and for LoRA and DoRA:
1. Import: an adapter made by peft over all the projections (init_lora_weights=False, so B is not
   zero; DoRA's magnitudes perturbed) and loaded by frugal (lora.init_from, frugal_gpt_logits
   --lora) gives PeftModel's fp32 logits within 1e-4.
2. Training: 20 steps of `frugal train` from that adapter and 20 steps of PeftModel with
   torch.optim.AdamW from the same start, on the same batch (a text file whose training split is
   one window), give the same losses step by step (1e-4).
3. Export: `frugal export RUN --adapter` loads into PeftModel strictly (the adapter's keys are
   exactly PeftModel's, every tensor frugal's) with the run's logits; `frugal export RUN` (merged)
   equals PeftModel's merge_and_unload() of that adapter, tensor by tensor (1e-5), and its logits.
4. One target, a bf16 base (the defaults): the exported adapter's target_modules is a list that
   PeftModel loads (a string would be PEFT's regular expression, matching no module), and the
   merged export is merge_and_unload() over the base as stored (fp32 here), not over the bf16 copy
   training held (1e-5; the bf16 rounding alone is ~1e-4).
5. A peft adapter whose target_modules is a regular expression (a string) loads as PeftModel
   reads it: the same modules, the same logits (1e-4).
6. The default targets ("all-linear"), Llama and GPT-2: the exported adapter's target_modules
   lists the projections themselves (PEFT takes "all-linear" only as a string), PeftModel adapts
   exactly the modules frugal did, and gives the run's logits (1e-4).
7. Refusals: an adapter with per-module ranks, a [lora] rank that contradicts the adapter's, and a
   target_modules pattern that matches no module, exit 2 naming the field.

Usage: peft_check.py FRUGAL_BINARY FRUGAL_GPT_LOGITS. Exits 77 (skipped) when peft is not
installed. Prints the differences it measured.
"""
import json
import os
import subprocess
import sys
import tempfile

from interop_common import Check

try:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

hf_logging.set_verbosity_error()
TOL = 1e-4
CHECK = Check("peft_check")
fail, run = CHECK.fail, CHECK.run
BLOCK = 16
# At 1e-2, Adam's first steps on gradients that are all but zero amplify rounding: the two
# implementations then part by ~1e-4 after a dozen steps (measured), though either is right.
LR = 1e-3
TOKENS = [5, 77, 31, 200, 9, 150, 42, 3, 255, 64, 18, 121]
LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GPT2_TARGETS = ["c_attn", "c_proj", "c_fc"]


def families():
    llama = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                        attention_bias=True, tie_word_embeddings=False)
    gpt2 = GPT2Config(vocab_size=300, n_positions=BLOCK, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return {"llama": (llama, LlamaForCausalLM, LLAMA_TARGETS), "gpt2": (gpt2, GPT2LMHeadModel, GPT2_TARGETS)}


def make_base(cfg, cls, d):
    torch.manual_seed(0)
    model = cls(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(d)
    return d


def load_base(cls, d):
    return cls.from_pretrained(d, dtype=torch.float32).eval()


def make_adapter(cls, base_dir, targets, dora, d):
    torch.manual_seed(1)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, init_lora_weights=False,
                     use_dora=dora, fan_in_fan_out=cls is GPT2LMHeadModel)
    pm = get_peft_model(load_base(cls, base_dir), cfg)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_magnitude_vector" in n:
                p.mul_(1 + 0.1 * torch.rand_like(p))
    pm.save_pretrained(d)
    return d


def peft_logits(model):
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].float()


def frugal_logits(helper, tmp, hf=None, lora=None, run_dir=None):
    out = os.path.join(tmp, "logits.safetensors")
    args = [helper, "--tokens", ",".join(map(str, TOKENS)), "--out", out]
    args += ["--hf", hf] + (["--lora", lora] if lora else []) if hf else ["--run", run_dir]
    run(args)
    return load_file(out)["logits"]


def train_text(path):
    """A text file whose training split (its first half, data.val_fraction = 0.5) is exactly one
    window of BLOCK + 1 bytes: every training batch holds that window."""
    data = bytes((i * 37 + 11) % 95 + 32 for i in range(BLOCK + 1)) * 2
    with open(path, "wb") as f:
        f.write(data)
    return list(data[:BLOCK + 1])


def check_training(frugal, cls, base_dir, adapter_dir, tmp, name):
    text = os.path.join(tmp, "one-window.txt")
    window = train_text(text)
    sets = [f"run.out_dir={tmp}", f"run.name={name}", "run.threads=1", f"model.init_from=hf:{base_dir}",
            f"lora.init_from={adapter_dir}", "lora.base_dtype=fp32", f"data.source=text:{text}", "data.val_fraction=0.5", "data.micro_batch=2",
            f"model.block={BLOCK}", "train.steps=20", f"train.lr={LR}", "train.warmup_steps=0", "train.min_lr_ratio=1",
            "train.weight_decay=0", "train.grad_clip=0", "train.beta1=0.9", "train.beta2=0.99", "train.log_every=1",
            "train.eval_every=0", "train.eval_batches=1", "checkpoint.enabled=false", "precision.mode=fp32"]
    args = [frugal, "train", "--quiet"]
    for s in sets:
        args += ["--set", s]
    run(args)
    with open(os.path.join(tmp, name, "metrics.jsonl")) as f:
        got = [json.loads(line)["loss"] for line in f if '"loss"' in line and '"step"' in line]
    pm = PeftModel.from_pretrained(load_base(cls, base_dir), adapter_dir, is_trainable=True)
    pm.train()
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=LR, betas=(0.9, 0.99), eps=1e-8,
                            weight_decay=0.0)
    x = torch.tensor([window[:-1]] * 2)
    y = torch.tensor([window[1:]] * 2)
    want = []
    for _ in range(20):
        logits = pm(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        want.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    if len(got) != 20:
        fail(f"{name}: frugal logged {len(got)} step losses, expected 20")
    diff = max(abs(a - b) for a, b in zip(got, want))
    if not diff <= TOL or not want[-1] < want[0] - 0.05:
        fail(f"{name}: frugal's losses {got[:3]}..{got[-1]} against peft's {want[:3]}..{want[-1]}: "
             f"differ by {diff:.2e} (tolerance {TOL}), or peft's did not fall")
    return os.path.join(tmp, name), diff


def check_export(frugal, helper, cls, base_dir, run_dir, tmp, name):
    out = os.path.join(tmp, name + "-adapter")
    run([frugal, "export", run_dir, "--adapter", "--out", out])
    pm = PeftModel.from_pretrained(load_base(cls, base_dir), out).eval()
    stored = load_file(os.path.join(out, "adapter_model.safetensors"))
    held = get_peft_model_state_dict(pm)
    if set(stored) != set(held):
        fail(f"{name}: the exported adapter's keys are not PeftModel's: {sorted(set(stored) ^ set(held))[:6]}")
    for k, t in stored.items():
        if not torch.equal(t, held[k].float()):
            fail(f"{name}: PeftModel holds another {k} than the file")
    ran = frugal_logits(helper, tmp, run_dir=run_dir)
    d_adapter = (peft_logits(pm) - ran).abs().max().item()
    if not d_adapter <= TOL:
        fail(f"{name}: PeftModel over frugal's exported adapter differs from the run's logits by {d_adapter:.2e}")
    merged_dir = os.path.join(tmp, name + "-merged")
    run([frugal, "export", run_dir, "--out", merged_dir])
    ours = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    theirs = pm.merge_and_unload().eval()
    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    d_merged = 0.0
    for k, t in sd_theirs.items():
        if k.endswith(".attn.bias") or k.endswith(".masked_bias"):
            continue
        if k not in sd_ours:
            fail(f"{name}: the merged export has no {k}")
        d_merged = max(d_merged, (sd_ours[k].float() - t.float()).abs().max().item())
    d_logits = (peft_logits(ours) - peft_logits(theirs)).abs().max().item()
    if not d_merged <= 1e-5 or not d_logits <= TOL:
        fail(f"{name}: the merged export differs from merge_and_unload() by {d_merged:.2e} (weights), "
             f"{d_logits:.2e} (logits)")
    return d_adapter, d_merged


def train_and_export_adapter(frugal, base_dir, tmp, name, lora_set):
    """A 4-step LoRA run `name` on the base (with `lora_set`, e.g. its targets) and its adapter
    exported; returns the run directory, the adapter directory and its target_modules."""
    text = os.path.join(tmp, "one-window.txt")
    train_text(text)
    sets = [f"run.out_dir={tmp}", f"run.name={name}", "run.threads=1", f"model.init_from=hf:{base_dir}",
            "lora.rank=4", lora_set, f"data.source=text:{text}", "data.val_fraction=0.5",
            "data.micro_batch=2", f"model.block={BLOCK}", "train.steps=4", "train.lr=1e-2", "train.warmup_steps=0",
            "train.eval_every=0", "train.eval_batches=1", "checkpoint.enabled=false", "precision.mode=fp32"]
    args = [frugal, "train", "--quiet"]
    for s in sets:
        args += ["--set", s]
    run(args)
    run_dir, out = os.path.join(tmp, name), os.path.join(tmp, name + "-adapter")
    run([frugal, "export", run_dir, "--adapter", "--out", out])
    with open(os.path.join(out, "adapter_config.json")) as f:
        return run_dir, out, json.load(f)["target_modules"]


def check_one_target(frugal, base_dir, tmp):
    name = "llama-q-bf16"
    run_dir, out, targets = train_and_export_adapter(frugal, base_dir, tmp, name, "lora.targets=q_proj")
    if targets != ["q_proj"]:
        fail(f"{name}: the exported adapter's target_modules is {targets!r}, not the list ['q_proj']")
    pm = PeftModel.from_pretrained(load_base(LlamaForCausalLM, base_dir), out).eval()
    adapted = sorted(n for n, m in pm.named_modules() if n.endswith("q_proj") and hasattr(m, "lora_A"))
    if len(adapted) != 2:
        fail(f"{name}: PeftModel adapted {adapted} from the exported adapter, expected both layers' q_proj")
    merged_dir = os.path.join(tmp, name + "-merged")
    run([frugal, "export", run_dir, "--out", merged_dir])
    ours = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).state_dict()
    theirs = pm.merge_and_unload().state_dict()
    base = load_base(LlamaForCausalLM, base_dir).state_dict()
    q = [k for k in theirs if k.endswith("q_proj.weight")]
    if not min((theirs[k] - base[k]).abs().max().item() for k in q) > 1e-3:
        fail(f"{name}: the trained adapters leave q_proj as it was: the merge checks nothing")
    d = max((ours[k].float() - theirs[k].float()).abs().max().item() for k in q)
    if not d <= 1e-5:
        fail(f"{name}: the merged q_proj weights differ from merge_and_unload() over the stored base by {d:.2e}")
    return d


def check_all_linear(frugal, helper, fam, cls, targets, base_dir, tmp):
    name = f"{fam}-all-linear"
    run_dir, out, written = train_and_export_adapter(frugal, base_dir, tmp, name, "lora.base_dtype=fp32")
    if not isinstance(written, list) or sorted(written) != sorted(targets):
        fail(f"{name}: the exported adapter's target_modules is {written!r}, not the list of {targets}")
    pm = PeftModel.from_pretrained(load_base(cls, base_dir), out).eval()
    stored = load_file(os.path.join(out, "adapter_model.safetensors"))
    held = get_peft_model_state_dict(pm)
    if set(stored) != set(held):
        fail(f"{name}: PeftModel adapts other modules than frugal: {sorted(set(stored) ^ set(held))[:6]}")
    if not max(t.abs().max().item() for k, t in stored.items() if "lora_B" in k) > 0:
        fail(f"{name}: the trained adapters are zero: the logits check nothing")
    d = (peft_logits(pm) - frugal_logits(helper, tmp, run_dir=run_dir)).abs().max().item()
    if not d <= TOL:
        fail(f"{name}: PeftModel over the exported adapter differs from the run's logits by {d:.2e}")
    return d


def check_regex_targets(helper, base_dir, tmp):
    adapter = make_adapter(LlamaForCausalLM, base_dir, r".*\.(q_proj|v_proj)", False,
                           os.path.join(tmp, "llama-regex-peft"))
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        if not isinstance(json.load(f)["target_modules"], str):
            fail("peft did not save a pattern's target_modules as a string: the check tests nothing")
    pm = PeftModel.from_pretrained(load_base(LlamaForCausalLM, base_dir), adapter).eval()
    d = (frugal_logits(helper, tmp, hf=base_dir, lora=adapter) - peft_logits(pm)).abs().max().item()
    if not d <= TOL:
        fail(f"an adapter with a target_modules pattern: frugal's logits differ from PeftModel's by {d:.2e}")
    return d


def check_refusals(frugal, base_dir, adapter_dir, tmp):
    bad = os.path.join(tmp, "bad-adapter")
    os.makedirs(bad)
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    cfg["rank_pattern"] = {"q_proj": 8}
    with open(os.path.join(bad, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    common = [frugal, "train", "--quiet", "--set", f"run.out_dir={tmp}", "--set", f"model.init_from=hf:{base_dir}",
              "--set", "train.steps=2", "--set", "run.name=refused"]
    p = run(common + ["--set", f"lora.init_from={bad}"], expect=2)
    if "rank_pattern" not in p.stderr:
        fail(f"an adapter with per-module ranks is not refused by name: {p.stderr[-600:]}")
    p = run(common + ["--set", f"lora.init_from={adapter_dir}", "--set", "lora.rank=8"], expect=2)
    if "lora.rank = 8" not in p.stderr or "r = 4" not in p.stderr:
        fail(f"a rank that contradicts the adapter's is not named with both values: {p.stderr[-600:]}")
    cfg.pop("rank_pattern")
    cfg["target_modules"] = "q_proj"  # PEFT: a whole-name pattern, which no module's full name matches
    with open(os.path.join(bad, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    p = run(common + ["--set", f"lora.init_from={bad}"], expect=2)
    if "regular expression" not in p.stderr or "\"q_proj\"" not in p.stderr:
        fail(f"a target_modules pattern that matches no module is not refused by name: {p.stderr[-600:]}")


def main():
    frugal, helper = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        for fam, (cfg, cls, targets) in families().items():
            base_dir = make_base(cfg, cls, os.path.join(tmp, fam))
            for dora in (False, True):
                name = f"{fam}-{'dora' if dora else 'lora'}"
                adapter = make_adapter(cls, base_dir, targets, dora, os.path.join(tmp, name + "-peft"))
                pm = PeftModel.from_pretrained(load_base(cls, base_dir), adapter).eval()
                d_in = (frugal_logits(helper, tmp, hf=base_dir, lora=adapter) - peft_logits(pm)).abs().max().item()
                if not d_in <= TOL:
                    fail(f"{name}: frugal's logits over peft's adapter differ from PeftModel's by {d_in:.2e}")
                run_dir, d_train = check_training(frugal, cls, base_dir, adapter, tmp, name)
                d_adapter, d_merged = check_export(frugal, helper, cls, base_dir, run_dir, tmp, name)
                print(f"{name}: import {d_in:.1e}, 20 training losses {d_train:.1e}, exported adapter {d_adapter:.1e}, "
                      f"merged weights {d_merged:.1e}")
        d_one = check_one_target(frugal, os.path.join(tmp, "llama"), tmp)
        d_regex = check_regex_targets(helper, os.path.join(tmp, "llama"), tmp)
        print(f"one target over a bf16 base: merged q_proj {d_one:.1e}; a target_modules pattern: logits {d_regex:.1e}")
        for fam, (_, cls, targets) in families().items():
            d_all = check_all_linear(frugal, helper, fam, cls, targets, os.path.join(tmp, fam), tmp)
            print(f"{fam}, the default targets (all-linear): exported adapter {d_all:.1e}")
        check_refusals(frugal, os.path.join(tmp, "llama"), os.path.join(tmp, "llama-lora-peft"), tmp)
    print("peft_check: OK")


if __name__ == "__main__":
    main()
