#!/usr/bin/env python3
"""nanoGPT's data folder as its prepare.py scripts leave it: train.bin / val.bin (headerless uint16)
and, for character-level data, meta.pkl with the vocabulary.

1. `frugal train` on data.source = "shards:DIR" takes model.vocab from meta.pkl's vocab_size (65,
   as shakespeare_char) when the run leaves it unset; config.toml names meta.pkl as its origin.
2. A meta.pkl that names a function (a pickle that would run code when unpickled) is refused with
   exit 2, naming the file, and the code does not run.

Usage: nanogpt_check.py FRUGAL_BINARY.
"""
import array
import os
import pickle
import sys
import tempfile

from interop_common import Check

CHECK = Check("nanogpt_check")
fail, run = CHECK.fail, CHECK.run


class Evil:
    """Unpickling this calls os.system: what a hostile meta.pkl can do to a plain pickle.load."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def main():
    frugal = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "shakespeare_char")
        os.makedirs(data)
        chars = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak!\n"))
        text = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak!\n" * 40
        stoi = {c: i for i, c in enumerate(chars)}
        ids = [stoi[c] for c in text]
        cut = int(len(ids) * 0.9)
        array.array("H", ids[:cut]).tofile(open(os.path.join(data, "train.bin"), "wb"))
        array.array("H", ids[cut:]).tofile(open(os.path.join(data, "val.bin"), "wb"))
        with open(os.path.join(data, "meta.pkl"), "wb") as f:
            pickle.dump({"vocab_size": 65, "itos": dict(enumerate(chars)), "stoi": stoi}, f)
        sets = [f"run.out_dir={tmp}", "run.name=nano", "run.threads=1", f"data.source=shards:{data}",
                "model.layers=1", "model.heads=2", "model.embd=32", "model.block=32", "data.micro_batch=4",
                "train.steps=4", "train.eval_every=0", "checkpoint.enabled=false"]
        run([frugal, "train", "--quiet"] + [x for s in sets for x in ("--set", s)])
        toml = open(os.path.join(tmp, "nano", "config.toml")).read()
        line = next((l for l in toml.splitlines() if l.startswith("vocab = ")), "")
        if not line.startswith("vocab = 65") or "meta.pkl vocab_size" not in line:
            fail(f"model.vocab was not taken from meta.pkl: '{line}'")

        marker = os.path.join(tmp, "code-ran")
        with open(os.path.join(data, "meta.pkl"), "wb") as f:
            pickle.dump({"vocab_size": Evil(marker)}, f)
        sets[1] = "run.name=evil"
        p = run([frugal, "train", "--quiet"] + [x for s in sets for x in ("--set", s)], expect=2)
        if "meta.pkl" not in p.stderr or os.path.exists(marker):
            fail(f"a meta.pkl that runs code was not refused before running it: {p.stderr[-500:]}")
    print("nanogpt_check: model.vocab = 65 from meta.pkl (origin named in config.toml); a meta.pkl that would run "
          "code is refused and the code never runs")


if __name__ == "__main__":
    main()
