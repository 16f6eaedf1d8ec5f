#!/usr/bin/env python3
"""`frugal prepare --format parquet` against files the reference `pyarrow` library writes.

1. Documents: two files (one with three row groups, one with a large_string column), nulls and
   empty cells among the texts; the token stream (byte tokens) of train + val is every non-empty
   text in file and row order, each followed by the separator "\\n\\n".
2. A table: float32, float64 and int64 feature columns and a string label column; every row comes
   back as one record (features as float32, the label as its class id, classes sorted), split
   into train and val; `frugal train` on the records with a user module is the next step and is
   covered by torchscript_check.py.
3. Refusals, exit 2 with the file named: a truncated file, a file that is not Parquet, a null
   feature cell (column and row named), a text column of another type, a missing label column, a
   --text-column named but missing (the columns listed; not a table read instead); --dedup on a
   table.

Usage: parquet_check.py FRUGAL_BINARY. Exits 77 (skipped) when pyarrow is not installed or this
frugal was built without Parquet support.
"""
import os
import struct
import subprocess
import sys
import tempfile

from interop_common import Check, check_refusal, dataset_items

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)


fail = Check("parquet_check").fail


def prepare(frugal, inputs, out, *extra, expect=0):
    p = subprocess.run([frugal, "prepare", *inputs, "--out", out, "--format", "parquet", "--quiet", *extra],
                       capture_output=True, text=True)
    if p.returncode == 2 and "built without" in p.stderr:
        print(f"skipped: {p.stderr.strip()}")
        sys.exit(77)
    if p.returncode != expect:
        fail(f"prepare {inputs} exited {p.returncode}, expected {expect}:\n{p.stdout[-1000:]}\n{p.stderr[-1500:]}")
    return p


def check_documents(frugal, tmp):
    a = [f"document {i}: café ☕ {'x' * (i % 7)}" for i in range(40)]
    a[5], a[9] = None, ""
    b = [f"second file, row {i}\nwith a second line" for i in range(15)]
    fa, fb = os.path.join(tmp, "a.parquet"), os.path.join(tmp, "b.parquet")
    pq.write_table(pa.table({"id": list(range(40)), "text": pa.array(a, pa.string())}), fa, row_group_size=16)
    pq.write_table(pa.table({"id": list(range(15)), "text": pa.array(b, pa.large_string())}), fb)
    ds = os.path.join(tmp, "docs")
    prepare(frugal, [fa, fb], ds, "--dedup", "none", "--val-fraction", "0.1")
    m, items = dataset_items(ds)
    want = [t for d in a + b if d for t in list(d.encode("utf-8")) + [10, 10]]
    got = items["train"] + items["val"]
    if got != want:
        fail(f"the token stream differs from the texts' bytes ({len(got)} vs {len(want)} tokens)")
    if m["counts"]["documents"] != 53:
        fail(f"{m['counts']['documents']} documents, expected 53 (55 rows, one null, one empty)")
    return len(want)


def check_table(frugal, tmp):
    n = 60
    cols = {"f32": pa.array([i * 0.5 for i in range(n)], pa.float32()),
            "f64": pa.array([1.0 / (i + 1) for i in range(n)], pa.float64()),
            "i64": pa.array([i * 3 - 7 for i in range(n)], pa.int64()),
            "label": pa.array([["cat", "dog", "ant"][i % 3] for i in range(n)])}
    f = os.path.join(tmp, "table.parquet")
    pq.write_table(pa.table(cols), f, row_group_size=25)
    ds = os.path.join(tmp, "table")
    prepare(frugal, [f], ds, "--label-column", "label", "--val-fraction", "0.2")
    m, items = dataset_items(ds)
    if m["classes"] != ["ant", "cat", "dog"] or m["features"] != ["f32", "f64", "i64"]:
        fail(f"classes {m['classes']} / features {m['features']}")
    classes = {"ant": 0, "cat": 1, "dog": 2}
    want = sorted((classes[cols["label"][i].as_py()],
                   struct.unpack("<3f", struct.pack("<3f", cols["f32"][i].as_py(), cols["f64"][i].as_py(),
                                                    float(cols["i64"][i].as_py()))))
                  for i in range(n))
    got = sorted((struct.unpack_from("<q", r, 0)[0], struct.unpack_from("<3f", r, 8)) for r in items["train"] + items["val"])
    if got != want:
        fail("the records are not the table's rows (features as float32, labels as class ids)")
    if len(items["val"]) != 12:
        fail(f"{len(items['val'])} validation records, expected 12 (0.2 of 60)")
    return n


def check_refusals(frugal, tmp):
    good = os.path.join(tmp, "a.parquet")
    data = open(good, "rb").read()
    cases = []
    trunc = os.path.join(tmp, "truncated.parquet")
    open(trunc, "wb").write(data[:-100])
    cases.append(([trunc], [], [trunc, "magic bytes"]))
    text = os.path.join(tmp, "notes.parquet")
    open(text, "w").write("this is a text file, not Parquet\n" * 10)
    cases.append(([text], [], [text]))
    nulls = os.path.join(tmp, "nulls.parquet")
    pq.write_table(pa.table({"x": pa.array([1.0, None, 3.0]), "y": [0, 1, 0]}), nulls)
    cases.append(([nulls], [], [nulls, "'x'", "row 1"]))
    ints = os.path.join(tmp, "ints.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3], "y": [0, 1, 0]}), ints)
    cases.append(([ints], [], [ints, "'text'", "not text"]))
    cases.append(([nulls], ["--label-column", "nope"], [nulls, "'nope'"]))
    num = os.path.join(tmp, "num.parquet")
    pq.write_table(pa.table({"x": [1.0, 2, 3, 4], "y": [1, 2, 3, 4], "label": [0, 1, 0, 1]}), num)
    cases.append(([num], ["--text-column", "body"], [num, "'body'", "columns: x, y, label"]))
    cases.append(([num], ["--dedup", "exact"], ["--dedup exact", "a Parquet table"]))
    # A NaN feature in the second file: named by that file and its own row.
    first, nan = os.path.join(tmp, "rows-1.parquet"), os.path.join(tmp, "rows-2.parquet")
    pq.write_table(pa.table({"x": [1.0, 2.0], "y": [0, 1]}), first)
    pq.write_table(pa.table({"x": [1.0, 2.0, float("nan")], "y": [0, 1, 0]}), nan)
    cases.append(([first, nan], [], [nan, "'x'", "row 2 (0-based)", "finite"]))
    for i, (inputs, extra, words) in enumerate(cases):
        out = os.path.join(tmp, f"bad{i}")
        check_refusal(fail, f"case {i}", out, prepare(frugal, inputs, out, *extra, expect=2), words)
    return len(cases)


def main():
    frugal = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tokens = check_documents(frugal, tmp)
        rows = check_table(frugal, tmp)
        refused = check_refusals(frugal, tmp)
    print(f"parquet_check: pyarrow {pa.__version__}: documents from 2 files (3 row groups, string and large_string, "
          f"a null and an empty cell) -> {tokens} tokens equal to the texts' bytes; a {rows}-row table -> the same "
          f"rows as records; {refused} bad inputs refused by name")


if __name__ == "__main__":
    main()
