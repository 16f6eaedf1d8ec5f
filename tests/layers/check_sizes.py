#!/usr/bin/env python3
"""Holds frugal's C++ to two sizes a reader can take in (docs/ARCHITECTURE.md, "Layout"): no
function over 100 lines and no file over 500, in src/, include/, tests/, fuzz/ and examples/.
Function lengths are lizard's (a maintained C/C++ analyser: first line of the signature to the
closing brace). bench/ is left out: its programs are measurement scripts, checked by their runs.

  tests/layers/check_sizes.py [ROOT]    # exit 0 when every file and function is within the limits
  tests/layers/check_sizes.py --report  # the longest functions and files, limits or not
  tests/layers/check_sizes.py --self-test  # on made-up sources: must find what is planted there
"""
import os
import sys
import tempfile

try:
    import lizard
except ImportError:  # a GPU node's own python3 (scripts/gpu-check.sh) has no lizard: listed as skipped
    print("skipped: this python has no lizard (scripts/install-deps.sh puts it in .venv/)")
    sys.exit(77)

MAX_FUNCTION_LINES = 100
MAX_FILE_LINES = 500
FOLDERS = ("src", "include", "tests", "fuzz", "examples")
SUFFIXES = (".cpp", ".h", ".cu", ".cuh", ".cc", ".hpp")


def sources(root):
    for top in FOLDERS:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "third_party")
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    yield os.path.join(dirpath, name)


def measure(root):
    """(file lines, [(function length, name, line)]) per source file, relative path as key."""
    out = {}
    for path in sources(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        info = lizard.analyze_file.analyze_source_code(path, text)
        functions = [(fn.length, fn.long_name, fn.start_line) for fn in info.function_list]
        out[os.path.relpath(path, root)] = (text.count("\n"), functions)
    return out


def problems(measured):
    errors = []
    for rel, (lines, functions) in measured.items():
        if lines > MAX_FILE_LINES:
            errors.append(f"{rel}: {lines} lines, over {MAX_FILE_LINES}: split it by what its parts do")
        for length, name, line in functions:
            if length > MAX_FUNCTION_LINES:
                errors.append(f"{rel}:{line}: {name} is {length} lines, over {MAX_FUNCTION_LINES}: "
                              "give its steps names of their own")
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src", "x"))
        long_fn = "int f() {\n" + "  int a = 0;\n" * 100 + "  return 0;\n}\n"  # 103 lines
        ok_fn = "int g() {\n" + "  int a = 0;\n" * 97 + "  return 0;\n}\n"  # 100 lines
        with open(os.path.join(root, "src", "x", "long_fn.cpp"), "w") as f:
            f.write(long_fn + ok_fn)
        with open(os.path.join(root, "src", "x", "long_file.h"), "w") as f:
            f.write("// x\n" * 501)
        with open(os.path.join(root, "src", "x", "fine.cpp"), "w") as f:
            f.write(ok_fn + "// x\n" * 300)
        found = problems(measure(root))
        want = ["src/x/long_file.h: 501 lines", "src/x/long_fn.cpp:1: f() is 103 lines"]
        missing = [w for w in want if not any(e.startswith(w) for e in found)]
        extra = [e for e in found if not any(e.startswith(w) for w in want)]
        if missing or extra:
            print(f"check_sizes self-test failed: missing {missing}, unexpected {extra}", file=sys.stderr)
            return 1
    print("check_sizes self-test: finds the planted long function and long file, and nothing else")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    args = [a for a in argv if not a.startswith("--")]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    measured = measure(root)
    if "--report" in argv:
        fns = sorted(((l, n, f"{rel}:{line}") for rel, (_, fs) in measured.items() for l, n, line in fs), reverse=True)
        files = sorted(((lines, rel) for rel, (lines, _) in measured.items()), reverse=True)
        print(f"{len(fns)} functions: {sum(1 for f in fns if f[0] > 60)} over 60 lines, "
              f"{sum(1 for f in fns if f[0] > MAX_FUNCTION_LINES)} over {MAX_FUNCTION_LINES}")
        for l, n, where in fns[:10]:
            print(f"  {l:4d}  {n}  ({where})")
        print(f"{len(files)} files: {sum(1 for f in files if f[0] > 400)} over 400 lines, "
              f"{sum(1 for f in files if f[0] > MAX_FILE_LINES)} over {MAX_FILE_LINES}")
        for lines, rel in files[:10]:
            print(f"  {lines:4d}  {rel}")
        return 0
    errors = problems(measured)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_sizes: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_sizes: {len(measured)} files, every function within {MAX_FUNCTION_LINES} lines and every "
          f"file within {MAX_FILE_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
