#!/usr/bin/env python3
"""Checks docs/levers.md's lever chain: for every lever, its config key exists (docs/config.md is
generated from the schema, so a key there is a key of the code), its header and test file exist,
the test file is named after the header and includes it, the lever's name is its config section, key
or header, and its bench key names raw results under
bench/results/<date>/ (a JSON file whose name starts with the key), or is "—" with a reason.

  tests/levers/check_lever_chain.py [ROOT]     # exit 0 when every link of every lever resolves
"""
import glob
import os
import re
import sys


def rows(doc):
    m = re.search(r"<!-- lever-chain -->(.*?)<!-- /lever-chain -->", doc, flags=re.S)
    if not m:
        raise SystemExit("check_lever_chain: docs/levers.md has no <!-- lever-chain --> table")
    out = []
    for line in m.group(1).strip().splitlines()[2:]:  # past the header and the rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            raise SystemExit(f"check_lever_chain: a row without 5 cells: {line}")
        out.append([c.strip("`") if i < 4 else c for i, c in enumerate(cells)])
    return out


def check(root):
    doc = open(os.path.join(root, "docs", "levers.md"), encoding="utf-8").read()
    config_md = open(os.path.join(root, "docs", "config.md"), encoding="utf-8").read()
    errors = []
    table = rows(doc)
    if not table:
        errors.append("the lever-chain table is empty")
    for lever, key, header, test, bench in table:
        where = f"lever '{lever}'"
        section, _, name = key.partition(".")
        sec = re.search(rf"^## \[{re.escape(section)}\]$(.*?)(?=^## |\Z)", config_md, flags=re.S | re.M)
        if not sec or not re.search(rf"^\| `{re.escape(name)}` \|", sec.group(1), flags=re.M):
            errors.append(f"{where}: config key {key} is not in docs/config.md (the schema)")
        for path in (header, test):
            if not os.path.isfile(os.path.join(root, path)):
                errors.append(f"{where}: {path} does not exist")
        stem = os.path.splitext(os.path.basename(header))[0]
        # A reader finds the lever by its name: it is the config section, the key or the header.
        if lever not in (section, name, stem):
            errors.append(f"{where}: the name is neither the config section [{section}], the key {name} nor the "
                          f"header {stem}.h")
        if os.path.basename(test) != stem + "_test.cpp":
            errors.append(f"{where}: the test of {header} is {stem}_test.cpp, not {os.path.basename(test)}")
        include = header.replace("include/", "", 1)
        if os.path.isfile(os.path.join(root, test)) and f'#include "{include}"' not in open(os.path.join(root, test)).read():
            errors.append(f"{where}: {test} does not include {include}")
        key_bench = bench.strip("`")
        if key_bench.startswith("—"):
            if len(key_bench) < 4:
                errors.append(f"{where}: a lever without a bench key says why")
        elif not glob.glob(os.path.join(root, "bench", "results", "*", key_bench + "*.json")):
            errors.append(f"{where}: no bench/results/<date>/{key_bench}*.json")
    return errors


def main(argv):
    root = argv[0] if argv else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    errors = check(root)
    for e in errors:
        print(f"check_lever_chain: {e}", file=sys.stderr)
    if errors:
        return 1
    print("check_lever_chain: every lever's config key, header, test and bench results resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
