#!/usr/bin/env python3
"""`frugal prepare --tokenizer hf:tokenizer.json` and `frugal sample` against the reference
`tokenizers` library.

1. The library trains a byte-level BPE tokenizer (with <|endoftext|>, as GPT-2's) on a corpus made
   here (ASCII, accents, CJK, emoji) and saves tokenizer.json. `frugal prepare --format jsonl
   --tokenizer hf:tokenizer.json --dedup none` writes token shards whose train + val stream is,
   id for id, the library's encoding of every document followed by <|endoftext|>; the manifest
   names the tokenizer ("hf"), its vocabulary and separator, and the dataset holds the file.
2. A tokenizer without an end-of-text token separates documents with the ids of a blank line.
3. A short run on that dataset; `frugal sample` encodes the prompt to the library's ids and
   decodes the generated ids to the library's text (skip_special_tokens=True).
4. A tokenizer.json the library cannot load is refused (exit 2) naming the file.

Usage: hf_tokenizer_check.py FRUGAL_BINARY. Exits 77 (skipped) when tokenizers is not installed.
"""
import json
import os
import sys
import tempfile

from interop_common import Check, read_shard

try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)


CHECK = Check("hf_tokenizer_check")
fail, run = CHECK.fail, CHECK.run


def corpus():
    base = ["the cat sat on the mat", "a naïve café in Zürich", "日本語のテキストです", "emoji 🙂🚀 and tabs\tok",
            "numbers 12345 and 3.14159", "    leading spaces and trailing  ", "line one\nline two\n\nline four"]
    return [f"{base[i % len(base)]} #{i} " + " ".join(base[(i * 3 + k) % len(base)] for k in range(i % 4))
            for i in range(120)]


def bpe(docs, special):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    return tok


def stream_of(ds):
    with open(os.path.join(ds, "manifest.json")) as f:
        m = json.load(f)
    out = []
    for split in ("train", "val"):
        for shard in m["splits"][split]:
            out += read_shard(os.path.join(ds, shard["file"]))
    return m, out


def prepare(frugal, tmp, docs_file, tok_file, name, expect=0):
    ds = os.path.join(tmp, name)
    p = run([frugal, "prepare", docs_file, "--out", ds, "--format", "jsonl", "--tokenizer", "hf:" + tok_file,
             "--dedup", "none", "--val-fraction", "0.1", "--quiet"], expect)
    return ds, p


def main():
    frugal = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        docs = corpus()
        docs_file = os.path.join(tmp, "docs.jsonl")
        with open(docs_file, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")

        # 1. With <|endoftext|>.
        tok = bpe(docs, ["<|endoftext|>"])
        tok_file = os.path.join(tmp, "tokenizer.json")
        tok.save(tok_file)
        eos = tok.token_to_id("<|endoftext|>")
        ds, _ = prepare(frugal, tmp, docs_file, tok_file, "ds")
        m, got = stream_of(ds)
        want = [i for d in docs for i in tok.encode(d, add_special_tokens=False).ids + [eos]]
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got + [None] * len(want), want)) if a != b)
            fail(f"frugal's token stream differs from the tokenizers library's at position {first} of {len(want)}: "
                 f"{got[first:first + 8]} vs {want[first:first + 8]}")
        t = m["tokenizer"]
        if t["name"] != "hf" or t["vocab"] != tok.get_vocab_size(with_added_tokens=True) or t["separator"] != [eos]:
            fail(f"manifest tokenizer {t}")
        if t.get("model", {}).get("file") != "tokenizer.json" or \
                open(os.path.join(ds, "tokenizer.json"), "rb").read() != open(tok_file, "rb").read():
            fail("the dataset does not hold the tokenizer.json it was tokenised with")

        # 2. Without an end-of-text token.
        plain = bpe(docs, [])
        plain_file = os.path.join(tmp, "plain.json")
        plain.save(plain_file)
        ds2, _ = prepare(frugal, tmp, docs_file, plain_file, "ds2")
        m2, got2 = stream_of(ds2)
        sep = plain.encode("\n\n", add_special_tokens=False).ids
        want2 = [i for d in docs for i in plain.encode(d, add_special_tokens=False).ids + sep]
        if m2["tokenizer"]["separator"] != sep or got2 != want2:
            fail(f"without <|endoftext|>: separator {m2['tokenizer']['separator']} (want {sep}), stream equal: "
                 f"{got2 == want2}")

        # 3. Train briefly, sample with the run's tokenizer.
        run([frugal, "train", "--quiet", "--set", f"run.out_dir={tmp}", "--set", "run.name=tok", "--set",
             f"data.source=shards:{ds}", "--set", "model.layers=1", "--set", "model.heads=2", "--set", "model.embd=32",
             "--set", "model.block=32", "--set", "data.micro_batch=4", "--set", "train.steps=5", "--set",
             "train.eval_every=0", "--set", "run.threads=1", "--set", "checkpoint.enabled=false"])
        prompt = "the café 🙂"
        p = run([frugal, "sample", os.path.join(tmp, "tok"), "--prompt", prompt, "--max-tokens", "6", "--stop", "",
                 "--json"])
        s = json.loads(p.stdout.strip().splitlines()[-1])
        if s["tokenizer"] != "hf" or s["prompt_tokens"] != tok.encode(prompt, add_special_tokens=False).ids:
            fail(f"sample encoded '{prompt}' as {s['prompt_tokens']}, the library as "
                 f"{tok.encode(prompt, add_special_tokens=False).ids}")
        # Special tokens (<|endoftext|>) are left out of the text, and the text is what follows the
        # prompt's when both are decoded together, as transformers' text-generation pipeline does.
        prompt_text = tok.decode(s["prompt_tokens"], skip_special_tokens=True)
        want = tok.decode(s["prompt_tokens"] + s["tokens"], skip_special_tokens=True)[len(prompt_text):]
        if len(s["tokens"]) != 6 or s["text"] != want:
            fail(f"sample decoded {s['tokens']} as {s['text']!r}, the library as {want!r}")

        # 4. A file the library cannot load.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write('{"version": "1.0", "model": 42}')
        _, p = prepare(frugal, tmp, docs_file, bad, "ds3", expect=2)
        if bad not in p.stderr:
            fail(f"a broken tokenizer.json is not named: {p.stderr[-600:]}")
        if os.path.exists(os.path.join(tmp, "ds3")):
            fail("a failed prepare left its output folder")

    print(f"hf_tokenizer_check: {len(docs)} documents, {len(want)} tokens: frugal prepare's stream equals the "
          f"tokenizers library's id for id (with <|endoftext|> and with a blank-line separator); sample encodes "
          f"and decodes with the run's tokenizer.json")


if __name__ == "__main__":
    main()
