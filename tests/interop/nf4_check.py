#!/usr/bin/env python3
"""NF4 (lora.base_dtype = "nf4", docs/lora.md) checked against torchao's NF4Tensor.

1. Bit for bit: tensors of several shapes and dtypes (normal values at scales from 1e-3 to 10,
   rows of different magnitudes, outliers, values on the levels' midpoints, a block of zeros)
   quantised by frugal (frugal_gpt_logits --nf4) and by torchao.quantization.to_nf4 (block 64,
   scaler block 256, from the tensor in bf16): the same codes, int8 scales, bf16 factors, mean
   and dequantised bf16 weight, bit for bit (an all-zero block aside: torchao's 0 / 0 picks the
   level -1 times a zero scale, -0.0; frugal stores the level 0: the same values).
2. QLoRA's forward: a tiny random Llama made by transformers (every projection a whole number
   of torchao's blocks), with peft's adapter over all seven projections: frugal's logits over
   the NF4 base (lora.base_dtype = nf4) equal PeftModel's over a base whose projections hold
   torchao's dequantised NF4 values, within 1e-4.

Usage: nf4_check.py FRUGAL_BINARY FRUGAL_GPT_LOGITS. Exits 77 (skipped) when torchao, peft or
transformers is not installed. Prints the differences it measured.
"""
import os
import sys
import tempfile

from interop_common import Check

try:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file, save_file
    from torchao.quantization import to_nf4
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

hf_logging.set_verbosity_error()
CHECK = Check("nf4_check")
fail, run = CHECK.fail, CHECK.run
TOKENS = [5, 77, 31, 200, 9, 150, 42, 3, 255, 64, 18, 121]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LEVELS = [-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0, 0.0796, 0.1609, 0.2461, 0.3379,
          0.4407, 0.5626, 0.7230, 1.0]


def samples():
    g = torch.Generator().manual_seed(0)
    out = {}
    out["normal"] = torch.randn(128, 128, generator=g)
    out["scaled_rows"] = torch.randn(256, 192, generator=g) * torch.logspace(-3, 1, 256).unsqueeze(1)
    outliers = torch.randn(64, 512, generator=g) * 0.02
    outliers.view(-1)[::997] = 3.0
    out["outliers"] = outliers
    mid = torch.tensor([(a + b) / 2 for a, b in zip(LEVELS, LEVELS[1:])])
    ties = mid[torch.randint(0, 15, (128 * 128,), generator=g)].view(128, 128) * 0.5
    ties[:, 0] = 0.5  # every block's absmax 0.5: the midpoints stay midpoints after scaling
    out["midpoints"] = ties
    zeros = torch.randn(128, 256, generator=g)
    zeros.view(-1)[1024:1088] = 0
    out["zero_block"] = zeros
    out["bf16"] = (torch.randn(64, 256, generator=g) * 0.05).bfloat16()
    out["fp16"] = (torch.randn(64, 256, generator=g) * 0.05).half()
    return out


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype in (torch.bfloat16, torch.float16):
        return torch.equal(a.view(torch.int16), b.view(torch.int16))
    return torch.equal(a, b)


# Where a block is all zeros torchao divides 0 by 0 and stores the level the NaN selects (index 0,
# -1, times a scale of 0: -0.0); frugal stores the level 0.0 (index 7). The values are equal.
ZERO_VALUES = {"zero_block": (1024, 1088)}


def without_zero_block(name, field, t):
    if name not in ZERO_VALUES or field not in ("codes", "dequantized"):
        return t
    lo, hi = ZERO_VALUES[name]
    if field == "codes":
        lo, hi = lo // 2, hi // 2
    flat = t.reshape(-1)
    return torch.cat([flat[:lo], flat[hi:]])


def check_zero_block(name, got, ref):
    lo, hi = ZERO_VALUES[name]
    codes = got[f"{name}.codes"][lo // 2:hi // 2]
    if not bool((codes == 0x77).all()):
        fail(f"{name}: an all-zero block is not stored as the level 0 (0x77): {codes[:4].tolist()}")
    ours, theirs = got[f"{name}.dequantized"].reshape(-1)[lo:hi], ref.get_original_weight().reshape(-1)[lo:hi]
    if not bool((ours == 0).all()) or not bool((ours == theirs).all()):
        fail(f"{name}: an all-zero block does not come back as zeros")


def check_bits(helper, tmp):
    tensors = samples()
    src = os.path.join(tmp, "in.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, src)
    out = os.path.join(tmp, "nf4.safetensors")
    run([helper, "--nf4", src, "--out", out])
    got = load_file(out)
    for name, t in tensors.items():
        ref = to_nf4(t.bfloat16(), 64, 256)
        want = {"codes": ref.quantized_data, "scalers": ref.quantized_scalers, "factors": ref.quantization_factor,
                "mean": ref.scaler_mean.reshape(1), "dequantized": ref.get_original_weight()}
        for field, w in want.items():
            g = without_zero_block(name, field, got[f"{name}.{field}"])
            w = without_zero_block(name, field, w)
            if not same_bits(g, w.contiguous()):
                differ = "shape/dtype" if g.shape != w.shape or g.dtype != w.dtype else \
                    f"{int((g.float() != w.float()).sum())} of {w.numel()} differ"
                fail(f"{name}.{field}: frugal's {tuple(g.shape)} {g.dtype} vs torchao's {tuple(w.shape)} "
                     f"{w.dtype}: {differ}")
        if name in ZERO_VALUES:
            check_zero_block(name, got, ref)
        print(f"  {name} {tuple(t.shape)} {t.dtype}: codes, scales, factors, mean, dequantised: the same bits"
              + (" (the zero block's: 0.0 for torchao's -0.0)" if name in ZERO_VALUES else ""))


def check_qlora_forward(helper, tmp):
    cfg = LlamaConfig(vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg)
    base_dir = os.path.join(tmp, "base")
    base.save_pretrained(base_dir)
    torch.manual_seed(1)
    lcfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS, init_lora_weights=False)
    pm = get_peft_model(LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32), lcfg)
    adapter_dir = os.path.join(tmp, "adapter")
    pm.save_pretrained(adapter_dir)
    # The reference: every projection's weight replaced by torchao's NF4 values of it.
    ref = LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    quantised = 0
    with torch.no_grad():
        for name, mod in ref.named_modules():
            if name.split(".")[-1] in TARGETS:
                mod.weight.copy_(to_nf4(mod.weight.bfloat16(), 64, 256).get_original_weight().float())
                quantised += 1
    if quantised != 7 * cfg.num_hidden_layers:
        fail(f"quantised {quantised} projections, expected {7 * cfg.num_hidden_layers}")
    ref = PeftModel.from_pretrained(ref, adapter_dir).eval()
    with torch.no_grad():
        want = ref(torch.tensor([TOKENS])).logits[0].float()
    out = os.path.join(tmp, "logits.safetensors")
    run([helper, "--hf", base_dir, "--lora", adapter_dir, "--base-dtype", "nf4", "--tokens",
         ",".join(map(str, TOKENS)), "--out", out])
    got = load_file(out)["logits"]
    diff = (got - want).abs().max().item()
    # Against the unquantised base the logits move (else the check above could not fail).
    plain = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                                      adapter_dir).eval()
    with torch.no_grad():
        moved = (plain(torch.tensor([TOKENS])).logits[0].float() - want).abs().max().item()
    print(f"  QLoRA logits vs PeftModel over torchao's NF4 values: max |diff| {diff:.2e} (the unquantised base's "
          f"differ by {moved:.2e})")
    if diff > 1e-4:
        fail(f"QLoRA logits differ from PeftModel's over the NF4 values by {diff:.2e} (> 1e-4)")
    if moved < 1e-3:
        fail(f"NF4 moved the logits by only {moved:.2e}: the check cannot tell a quantised base from a plain one")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    torch.set_num_threads(1)
    helper = sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="frugal-nf4-") as tmp:
        check_bits(helper, tmp)
        check_qlora_forward(helper, tmp)
    print("nf4_check: OK")


if __name__ == "__main__":
    main()
