"""What the interop checks (tests/interop/*_check.py) share: failing under the check's name,
running a command that must exit with a given code, and reading frugal's shard files
(docs/formats/shards.md) with nothing but the standard library."""
import glob
import json
import os
import struct
import subprocess
import sys


class Check:
    def __init__(self, name):
        self.name = name

    def fail(self, msg):
        print(f"{self.name}: FAIL: {msg}")
        sys.exit(1)

    def run(self, args, expect=0):
        """Runs `args`; fails unless it exits `expect`. Returns the CompletedProcess (text)."""
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode != expect:
            self.fail(f"{' '.join(args[:3])}... exited {p.returncode}, expected {expect}:\n{p.stdout[-1500:]}\n"
                      f"{p.stderr[-2500:]}")
        return p


def check_refusal(fail, what, out, p, words):
    """A refused `frugal prepare` (p, a CompletedProcess): its message names every one of `words`,
    and neither the output folder `out` nor a temporary one beside it is left behind."""
    missing = [w for w in words if w not in p.stderr]
    if missing:
        fail(f"{what}: the message does not name {missing}: {p.stderr[-600:]}")
    if os.path.exists(out) or glob.glob(out + ".tmp-*"):
        fail(f"{what}: a failed prepare left {out}")


def dataset_items(ds):
    """A dataset folder's manifest.json and the items of its train and val shards (read_shard)."""
    with open(os.path.join(ds, "manifest.json")) as f:
        m = json.load(f)
    return m, {s: [x for sh in m["splits"][s] for x in read_shard(os.path.join(ds, sh["file"]))]
               for s in ("train", "val")}


def read_shard(path):
    """The items of an uncompressed shard: token ids (a token shard) or record byte strings."""
    data = open(path, "rb").read()
    if data[:8] != b"FRUGSHRD":
        raise ValueError(f"{path} is not a frugal shard")
    kind, dtype = struct.unpack_from("<II", data, 12)
    count, blocks, index = struct.unpack_from("<QQQ", data, 24)
    if kind == 1:  # tokens: blocks back to back from offset 64, uint16 or uint32
        return list(struct.unpack_from(f"<{count}{'H' if dtype == 1 else 'I'}", data[64:index]))
    offsets = [struct.unpack_from("<Q", data, index + 24 * b)[0] for b in range(blocks)]
    out = []
    for i in range(count):
        b, off, n = struct.unpack_from("<III", data, index + 24 * blocks + 12 * i)
        out.append(data[offsets[b] + off:offsets[b] + off + n])
    return out
