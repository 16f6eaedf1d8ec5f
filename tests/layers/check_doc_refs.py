#!/usr/bin/env python3
"""Checks that what README.md and docs/**/*.md name still exists: every repository path written
in backticks (`src/model/gpt.cpp`, `include/frugal/train/task.h`, `tests/...`, `bench/...`,
`scripts/...`, `docs/...`, and header paths written from include/frugal/ or src/, such as
`train/run_setup.h` or `model/internal/hf_json.h`) is a file or folder of the tree, and every
config key written in backticks (`train.lr`, `model.kv_heads = 2`) is a key of the schema, as
docs/config.md (generated from it, and checked against it by ConfigSchema.DocsConfigMdIsUpToDate)
lists them. A moved file or a renamed key then fails here, naming the document and the line.

  tests/layers/check_doc_refs.py [ROOT]        # exit 0 when every reference resolves
  tests/layers/check_doc_refs.py --self-test   # must catch a planted stale path and key
"""
import os
import re
import sys
import tempfile

TOP = ("src/", "include/", "tests/", "bench/", "scripts/", "docs/", "examples/", "cmake/", "fuzz/", "third_party/",
       ".ci/")
# Header and source paths written from include/frugal/ or src/ (the docs' usual short form).
AREAS = ("core/", "kernels/", "data/", "ckpt/", "model/", "monitor/", "train/", "dist/", "tune/", "search/", "cli/",
         "spm/")
SOURCE = (".h", ".cpp", ".cu", ".cuh", ".py")
# Folders a run or a build makes: named by the docs, not part of the tree.
GENERATED = ("bench/out/", "build/")
# Names that look like keys but are files (`train.bin`, `model.safetensors`).
FILE_SUFFIXES = ("json", "jsonl", "toml", "md", "py", "cpp", "h", "sh", "bin", "safetensors", "txt", "pkl")
BACKTICK = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")
KEY = re.compile(r"^([a-z_]+)\.([a-z_0-9]+)(\s*=.*)?$")


def schema_keys(root):
    """section -> set of keys, from docs/config.md's tables."""
    keys, section = {}, None
    with open(os.path.join(root, "docs", "config.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^## \[(\w+)\]", line)
            if m:
                section = m.group(1)
                keys[section] = set()
                continue
            m = re.match(r"^\| `([a-z_0-9]+)` \|", line)
            if m and section:
                keys[section].add(m.group(1))
    return keys


def exists(root, ref):
    ref = ref.rstrip("/")
    for base in ("", "include/frugal/", "src/"):
        if os.path.exists(os.path.join(root, base + ref)):
            return True
    return False


def check_text(root, rel, text, keys):
    errors = []
    for no, line in enumerate(text.splitlines(), 1):
        for token in BACKTICK.findall(line):
            token = token.strip()
            # A path: no placeholders, globs, options or URLs.
            if any(c in token for c in "<>*{}$~ ") or "://" in token:
                pass
            elif PATH.match(token) and (token.startswith(TOP) or (token.startswith(AREAS) and token.endswith(SOURCE))):
                if token.startswith(GENERATED):
                    continue
                if not exists(root, token):
                    errors.append(f"{rel}:{no}: `{token}` names no file or folder of the tree")
                continue
            m = KEY.match(token)
            if m and m.group(1) in keys and m.group(2) not in FILE_SUFFIXES:
                if m.group(2) not in keys[m.group(1)]:
                    errors.append(f"{rel}:{no}: `{token}` is not a config key ([{m.group(1)}] has no "
                                  f"`{m.group(2)}`; docs/config.md lists them)")
    return errors


def documents(root):
    yield "README.md"
    for dirpath, _, files in os.walk(os.path.join(root, "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root):
    keys = schema_keys(root)
    errors = []
    for rel in documents(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            errors += check_text(root, rel, f.read(), keys)
    return errors


def self_test(root):
    keys = schema_keys(root)
    planted = ("the step lives in `src/train/no_such_step.cpp`; set `train.no_such_key = 2`; "
               "`train.lr` and `src/train/train_step.cpp` and `train/run_setup.h` exist")
    errors = check_text(root, "planted.md", planted, keys)
    if len(errors) != 2 or "no_such_step" not in errors[0] or "no_such_key" not in errors[1]:
        print("check_doc_refs self-test: expected the two planted references, got:\n" + "\n".join(errors))
        return 1
    print("check_doc_refs self-test: catches a stale path and a stale key, passes the real ones")
    return 0


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "--self-test" in sys.argv:
        return self_test(root)
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"check_doc_refs: {len(errors)} reference(s) in the docs name nothing that exists")
        return 1
    print(f"check_doc_refs: every path and config key the docs name exists ({len(list(documents(root)))} documents)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
