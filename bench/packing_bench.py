#!/usr/bin/env python3
"""Packing chat data (docs/data.md, data.packing): useful (target) tokens per second with
data.packing = "pack" against "pad", and what the document mask costs: "pack" against the same
packed rows without positions (attention across documents, positions running on), by
build/packing_bench (bench/packing_bench.cpp: DocumentSource's batches through make_causal_lm's
model, forward, backward and AdamW, as `frugal train` runs them).

The data: two datasets of --conversations conversations each, with the length spreads of the two
kinds of fine-tuning data users bring (SPREADS below: single-turn instructions, Alpaca- and
Dolly-like; multi-turn chats, ShareGPT- and UltraChat-like, a few past the block), their words
drawn from the bench's English corpus
(bench/english_text.py); a byte-level BPE tokenizer of 2,048 tokens trained on that corpus with
`tokenizers` and saved by transformers with a ChatML template whose assistant turns are
{% generation %} blocks; `frugal prepare --format chat --max-tokens block+1` (truncate) turns them
into a documents dataset, the loss mask on the assistant turns. The chats are measured at --block
and at twice it (multi-turn chats are usually trained with longer rows). Each invocation of the binary runs
the three modes in turn, rotating the order each round; ratios are taken per round, their medians
reported. Targets (the chat-data issue): pack >= 2.5x pad's target tokens/s; the mask costs <= 10%
of packing without it.

Writes bench/results/<date>/packing.json; bench/render_tables.py renders docs/data.md's table.

  .venv/bin/python bench/packing_bench.py [--build build] [--rounds 3] [--quick] [--arch llama]
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import ROOT, common_fields, die, median, results_dir, run, save_result, shown  # noqa: E402

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
MODES = ["pad", "pack", "pack_unmasked"]


def corpus(path):
    if not os.path.exists(path):
        run([sys.executable, os.path.join(HERE, "english_text.py"), "--out", path], "english_text")
    with open(path, encoding="utf-8") as f:
        return f.read()


# The two length spreads (words per message: log-normal medians, sigma 0.8): single-turn
# instructions as Alpaca- and Dolly-style sets hold them, and multi-turn chats as ShareGPT- and
# UltraChat-style sets do.
SPREADS = {
    "instructions": {"turns": [1], "user": 20, "assistant": 60, "longer_block": False,
                     "what": "single-turn instructions: user log-normal median 20 words, answer median 60, sigma 0.8"},
    "chats": {"turns": [1, 1, 2, 2, 3, 4], "user": 25, "assistant": 90, "longer_block": True,
              "what": "1-4 turns: user log-normal median 25 words, answers median 90, sigma 0.8"},
}


def conversations(words, n, seed, spread):
    rng = random.Random(seed)

    def text(median_words):
        k = max(1, int(rng.lognormvariate(math.log(median_words), 0.8)))
        start = rng.randrange(0, len(words) - k)
        return " ".join(words[start:start + k])

    out = []
    for _ in range(n):
        chat = []
        for _ in range(rng.choice(spread["turns"])):
            chat += [{"role": "user", "content": text(spread["user"])},
                     {"role": "assistant", "content": text(spread["assistant"])}]
        out.append({"messages": chat})
    return out


def make_tokenizer(text, folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text[i:i + 4096] for i in range(0, min(len(text), 1_000_000), 4096)],
                            trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|endoftext|>", "<|im_start|>",
                                                                                 "<|im_end|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(folder)


def measure_spread(a, frugal, binary, tmp, text, name, spread, block):
    """Prepares one spread's conversations for rows of `block` positions and runs the binary
    --rounds times over them."""
    src = os.path.join(tmp, name + ".jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for c in conversations(text.split(), a.conversations, 5, spread):
            f.write(json.dumps(c) + "\n")
    ds = os.path.join(tmp, f"{name}-{block}")
    run([frugal, "prepare", src, "--out", ds, "--format", "chat", "--tokenizer",
         "hf:" + os.path.join(tmp, "tok", "tokenizer.json"), "--max-tokens", str(block + 1),
         "--val-fraction", "0.01", "--quiet"], "prepare")
    with open(os.path.join(ds, "manifest.json")) as f:
        counts = json.load(f)["counts"]
    rounds = []
    for r in range(a.rounds):
        order = MODES[r % 3:] + MODES[:r % 3]
        p = run([binary, "--data", ds, "--arch", a.arch, "--block", str(block), "--rows", str(a.rows),
                 "--steps", str(a.steps), "--order", ",".join(order)], "packing_bench")
        rounds.append(json.loads(p.stdout))
    first = rounds[0]
    out = {k: first[k] for k in ("documents", "document_tokens", "threads", "model")}
    out["block"], out["lengths"], out["counts"] = block, spread["what"], counts
    by_mode = {m: [next(x for x in rr["results"] if x["mode"] == m) for rr in rounds] for m in MODES}
    out["modes"] = {m: {"target_fraction": median([x["target_fraction"] for x in v]),
                        "step_ms": median([x["step_ms"] for x in v]),
                        "target_tokens_per_s": median([x["target_tokens_per_s"] for x in v]),
                        "target_tokens_per_s_runs": [x["target_tokens_per_s"] for x in v],
                        "mean_loss_runs": [x["mean_loss"] for x in v]} for m, v in by_mode.items()}

    def per_round(x_, y_):
        return [x["target_tokens_per_s"] / y["target_tokens_per_s"] for x, y in zip(by_mode[x_], by_mode[y_])]

    out["pack_over_pad_runs"] = per_round("pack", "pad")
    out["pack_over_pad"] = median(out["pack_over_pad_runs"])
    out["mask_cost_runs"] = [1 - x for x in per_round("pack", "pack_unmasked")]
    out["mask_cost"] = median(out["mask_cost_runs"])
    out["targets_met"] = {"pack_over_pad": out["pack_over_pad"] >= 2.5, "mask_cost": out["mask_cost"] <= 0.10}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder holding frugal and packing_bench")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (invocations)")
    ap.add_argument("--conversations", type=int, default=1200, help="chat conversations in the dataset")
    ap.add_argument("--block", type=int, default=1024, help="model.block (positions a row)")
    ap.add_argument("--rows", type=int, default=4, help="rows per batch")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per mode and round")
    ap.add_argument("--arch", default="llama", choices=["llama", "gpt"])
    ap.add_argument("--quick", action="store_true", help="1 round of 2 steps at block 256 (a smoke run)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    frugal, binary = os.path.join(a.build, "frugal"), os.path.join(a.build, "packing_bench")
    for b in (frugal, binary):
        if not os.access(b, os.X_OK):
            die(f"packing_bench: {b} is missing; build it (cmake --build build --target frugal packing_bench)")
    if a.quick:
        a.rounds, a.steps, a.block, a.conversations = 1, 2, 256, 200
    t0 = time.time()
    common = common_fields("packing", a.quick, a.rounds)
    text = corpus(os.path.join(ROOT, "bench", "out", "english.txt"))
    out = {"block": a.block, "rows_per_batch": a.rows, "steps": a.steps, "datasets": {}}
    with tempfile.TemporaryDirectory(prefix="frugal-packing-") as tmp:
        make_tokenizer(text, os.path.join(tmp, "tok"))
        for name, spread in SPREADS.items():
            for block in [a.block] + ([2 * a.block] if spread["longer_block"] else []):
                key = name if block == a.block else f"{name}, block {block}"
                out["datasets"][key] = measure_spread(a, frugal, binary, tmp, text, name, spread, block)
    first = next(iter(out["datasets"].values()))
    out["threads"], out["model"] = first.pop("threads"), first["model"].rsplit(", block", 1)[0]
    for d in out["datasets"].values():
        d.pop("threads", None)
    path = save_result(a.results or results_dir(quick=a.quick), common, out, t0)
    print(f"{out['rows_per_batch']} rows; {out['model']}")
    for name, d in out["datasets"].items():
        print(f"\n{name}: {d['documents']} documents, {d['document_tokens']:,} tokens, block {d['block']}")
        for m, v in d["modes"].items():
            print(f"  {m:14} targets {v['target_fraction']:.3f} of positions  step {v['step_ms']:.0f} ms  "
                  f"{v['target_tokens_per_s']:,.0f} target tok/s")
        print(f"  pack / pad {d['pack_over_pad']:.2f}x; mask cost {100 * d['mask_cost']:.1f}%")
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
