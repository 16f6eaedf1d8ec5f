#!/usr/bin/env python3
"""Builds the bench's English text corpus (2.7 MB by default) from documentation that ships with
Debian 12 and the pinned PyTorch wheel, so `make bench` can rebuild the same bytes on a fresh
machine without a network. Sources, in this order, until the size is reached:

  1. the Python Language Reference topics of Debian's Python 3.11
     (/usr/lib/python3.11/pydoc_data/topics.py, package libpython3.11-stdlib; what `pydoc`
     shows for keywords and statements), topics sorted by name;
  2. the licence texts of /usr/share/common-licenses (package base-files), regular files sorted
     by name (the symbolic links there only repeat them);
  3. the docstrings of Debian's Python 3.11 standard library (/usr/lib/python3.11, packages
     libpython3.11-minimal and libpython3.11-stdlib; tests and modules of optional packages
     excluded), files sorted by path, each distinct docstring once;
  4. the docstrings of the installed torch package (the wheel's Python files), likewise.

The output is cut at the last line break before --bytes. A JSON file beside it (PATH.json)
records the byte count, SHA-256 and the versions of the packages read, and the bench copies it
into its results, so a figure can always be traced to the exact corpus it was measured on.

  bench/english_text.py --out bench/out/english.txt [--bytes 2700000]
"""
import argparse
import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys

DEBIAN_STDLIB = "/usr/lib/python3.11"
LICENSES = "/usr/share/common-licenses"
# Folders of /usr/lib/python3.11 that are tests or belong to optional Debian packages
# (python3-lib2to3, python3-distutils, idle-python3.11, python3-tk), or are not stdlib at all.
SKIP_DIRS = {"test", "tests", "lib2to3", "distutils", "idlelib", "tkinter", "turtledemo", "site-packages",
             "dist-packages", "__pycache__"}


def topics_text():
    """The pydoc topics dictionary, read without executing the file."""
    path = os.path.join(DEBIAN_STDLIB, "pydoc_data", "topics.py")
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "topics":
            topics = ast.literal_eval(node.value)
            return [topics[k].strip() for k in sorted(topics)]
    raise SystemExit(f"english_text: no 'topics' dictionary in {path}")


def license_texts():
    out = []
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.isfile(path) and not os.path.islink(path):
            out.append(open(path, encoding="utf-8", errors="replace").read().strip())
    return out


def docstrings(root):
    """Module, class and function docstrings of every .py file under root, in path order."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("config-"))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            try:
                tree = ast.parse(open(path, encoding="utf-8").read(), path)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue  # a file this interpreter cannot parse adds nothing
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) > 40:  # one-liners such as "Return x." are not prose
                        out.append(doc.strip())
    return out


def package_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def build(target):
    """Returns (bytes, sources used)."""
    for path in (DEBIAN_STDLIB, LICENSES):
        if not os.path.isdir(path):
            raise SystemExit(f"english_text: {path} is missing; the corpus is built from Debian 12's "
                             "python3.11 and base-files packages")
    chunks, seen, used, size = [], set(), [], 0
    torch_spec = importlib.util.find_spec("torch")
    sources = [
        ("python3.11 pydoc topics", topics_text, {"libpython3.11-stdlib": package_version("libpython3.11-stdlib")}),
        ("common-licenses", license_texts, {"base-files": package_version("base-files")}),
        ("python3.11 stdlib docstrings", lambda: docstrings(DEBIAN_STDLIB),
         {"libpython3.11-minimal": package_version("libpython3.11-minimal"),
          "libpython3.11-stdlib": package_version("libpython3.11-stdlib")}),
    ]
    if torch_spec and torch_spec.submodule_search_locations:
        torch_dir = list(torch_spec.submodule_search_locations)[0]
        version = None
        vfile = os.path.join(torch_dir, "version.py")
        if os.path.exists(vfile):
            for line in open(vfile):
                if line.startswith("__version__"):
                    version = line.split("=", 1)[1].strip().strip("'\"")
        sources.append(("torch docstrings", lambda: docstrings(torch_dir), {"torch": version}))
    for name, fn, versions in sources:
        n0 = size
        for text in fn():
            if text in seen:
                continue
            seen.add(text)
            b = (text + "\n\n").encode("utf-8")
            chunks.append(b)
            size += len(b)
            if size >= target:
                break
        used.append({"source": name, "bytes": size - n0, "packages": versions})
        if size >= target:
            break
    data = b"".join(chunks)
    if len(data) < target:
        raise SystemExit(f"english_text: the sources hold only {len(data):,} bytes, {target:,} asked")
    data = data[:data.rindex(b"\n", 0, target) + 1]
    return data, used


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output text file (PATH.json gets its description)")
    ap.add_argument("--bytes", type=int, default=2_700_000, help="size to cut the corpus at (default 2.7 MB)")
    a = ap.parse_args()
    data, used = build(a.bytes)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "wb") as f:
        f.write(data)
    meta = {"path": a.out, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "sources": used}
    with open(a.out + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
