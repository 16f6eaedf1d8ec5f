#!/usr/bin/env python3
"""Checks that no two source files of one folder of src/ define the same name with internal
linkage: a function, variable, or type declared `static` at namespace scope or inside an
anonymous namespace.

The library and the CLI compile in unity groups of files of one folder (frugal_unity_groups in
cmake/FrugalHelpers.cmake): the files of a group share one translation unit, where two such
names meet. Two definitions alike stop the compiler, but two functions of one name with
different parameters become overloads of each other, and a call in one file can bind to the
other file's function without a word. Aliases (`using X = ...;`, `namespace x = ...;`) are left
out: the same alias twice is valid C++ and two different ones do not compile.

  tests/layers/check_internal_names.py [ROOT]   # exit 0 when every folder's names are distinct;
                                                # else 1, naming the folder, the name, the files
  tests/layers/check_internal_names.py --self-test   # the checker on made-up folders first
"""
import collections
import os
import re
import sys
import tempfile

# Comments, raw strings, strings and character literals out, lines kept (line numbers stay right).
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_RAW = re.compile(r'R"(\w*)\(.*?\)\1"', re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
_CHAR = re.compile(r"'(?:\\.|[^'\\\n])*'")
_DIGIT_SEP = re.compile(r"(?<=[0-9A-Fa-f])'(?=[0-9A-Fa-f])")  # 1'000'000


def _blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def first_branches(text):
    """The text with every #elif / #else branch blanked: the two branches of a conditional often
    open the same brace (a signature that differs by version), which would count twice."""
    out, skipping = [], []  # per open #if: whether this branch is a later one
    for line in text.split("\n"):
        directive = re.match(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b", line)
        if directive:
            kind = directive.group(1)
            if kind.startswith("if"):
                skipping.append(False)
            elif kind in ("elif", "else") and skipping:
                skipping[-1] = True
            elif kind == "endif" and skipping:
                skipping.pop()
            out.append("")
            continue
        out.append("" if any(skipping) else line)
    return "\n".join(out)


def strip_code(text):
    text = _COMMENT.sub(_blank, text)
    text = _RAW.sub(_blank, text)
    text = _DIGIT_SEP.sub("", text)
    text = _STRING.sub(_blank, text)
    return first_branches(_CHAR.sub(_blank, text))


# A declaration's name at the start of a line: a type, or the name before '(' / '=' / '{' / ';' /
# '[' of a function or variable (after its return type or type).
_TYPE_DECL = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+([A-Za-z_]\w*)")
_VALUE_DECL = re.compile(
    r"^\s*(?:template\s*<.*>\s*)?(?:(?:static|inline|constexpr|const|thread_local|extern)\s+)*"
    r"[A-Za-z_][\w:<>,\s*&]*?[\s*&]([A-Za-z_]\w*)\s*(?:\(|=|\{|;|\[)")
_NOT_NAMES = {"operator", "return", "else", "delete", "new", "throw", "case", "goto"}
_NAMESPACE_OPEN = re.compile(r"^\s*(?:inline\s+)?namespace(?:\s+[\w:]+)?\s*$")
_EXTERN_C_OPEN = re.compile(r'^\s*extern\s+"?\s*"?\s*$')


_ATTRIBUTES = re.compile(r"^(\s*)(?:\[\[[^\]]*\]\]\s*)+")


def declared_names(text):
    """(name, line, internal) of each name the file declares at namespace scope: with internal
    linkage (static, or in an anonymous namespace) any function, variable or type; with external
    linkage functions only (the names an internal function could be taken for)."""
    found = []
    stack = []  # one entry per open brace: "ns", "anon" or "other"
    for number, line in enumerate(strip_code(text).split("\n"), 1):
        line = _ATTRIBUTES.sub(r"\1", line)  # [[noreturn]] void fail(...)
        at_namespace_scope = all(kind in ("ns", "anon") for kind in stack)
        internal = "anon" in stack or re.match(r"^\s*static\s", line) is not None
        if at_namespace_scope and not re.match(r"^\s*(?:using|namespace|typedef|template\s*<[^>]*>\s*using)\b", line):
            match = _TYPE_DECL.match(line) or _VALUE_DECL.match(line)
            is_function = match is not None and match.re is _VALUE_DECL and line[match.end() - 1] == "("
            if match and match.group(1) not in _NOT_NAMES and (internal or is_function):
                found.append((match.group(1), number, internal))
        for brace in re.finditer(r"[{}]", line):
            if brace.group(0) == "}":
                if stack:
                    stack.pop()
                continue
            before = line[:brace.start()]
            if re.match(r"^\s*namespace\s*$", before):
                stack.append("anon")
            elif _NAMESPACE_OPEN.match(before) or _EXTERN_C_OPEN.match(before):
                stack.append("ns")
            else:
                stack.append("other")
    return found


def internal_names(text):
    """(name, line) of each name with internal linkage the file defines at namespace scope."""
    return [(n, l) for n, l, internal in declared_names(text) if internal]


def check(root):
    problems = []
    src = os.path.join(root, "src")
    for folder, _, files in sorted(os.walk(src)):
        internal = collections.defaultdict(list)  # name -> [(file, line)]
        external = collections.defaultdict(list)
        for name in sorted(files):
            if not name.endswith(".cpp"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                names = declared_names(f.read())
            for table, kind in ((internal, True), (external, False)):
                for ident in sorted({n for n, _, k in names if k == kind}):
                    line = min(l for n, l, k in names if n == ident and k == kind)
                    table[ident].append((os.path.relpath(path, root), line))
        here = os.path.relpath(folder, root)
        for ident, places in sorted(internal.items()):
            if len(places) > 1:
                where = ", ".join(f"{p}:{l}" for p, l in places)
                problems.append(f"{here}: '{ident}' has internal linkage in {len(places)} files ({where}); "
                                f"these files may share a unity translation unit: rename all but one")
            others = [(p, l) for p, l in external.get(ident, []) if p not in {q for q, _ in places}]
            if others:
                where = ", ".join(f"{p}:{l}" for p, l in places)
                there = ", ".join(f"{p}:{l}" for p, l in others)
                problems.append(f"{here}: '{ident}' has internal linkage in {where} and is a function with "
                                f"external linkage in {there}; in one unity translation unit a call could "
                                f"bind to either: rename the internal one")
    return problems


def self_test():
    """The checker finds what it is for in made-up sources, and leaves alone what it must. Each
    planted case fails the test if the part of the checker it exercises is broken: a brace in a
    string, a character or a comment that were counted, an #else branch that was counted, an
    attribute before a declaration, or the external-linkage rule."""
    a = """namespace frugal {
namespace {
using Clock = std::chrono::steady_clock;  // an alias: allowed twice
struct Row { int x; };
double since(Clock::time_point t0) { return 0; }
[[noreturn]] void fail(const char* why) { throw why; }
}  // namespace
void api() { static int calls = 0; }  // a function's own static: not namespace scope
}  // namespace frugal
"""
    b = """namespace frugal::detail {
const char* open_brace() { return "{"; }  // braces in a string, a character and a comment
char open_char() { return '{'; }           // are not counted: otherwise what follows would
/* { */                                    // not be at namespace scope and go unseen
static std::string since(int x,
                         int y) { return "namespace { int hidden(); }"; }
/* namespace { int commented(); } */
class Row;  // declared in another file too, with internal linkage in neither
static void fail(int code);
}  // namespace frugal::detail
namespace {
struct Row {};
}
"""
    # The other folder. a.cpp: a signature that differs by version opens its brace in both
    # branches of a conditional; the #else's is not counted, so the anonymous namespace closes
    # where it does and `exported` stays external, like c.cpp's (no clash: not this checker's
    # business). `median` is internal in c.cpp and external in a.cpp: a clash.
    a2 = """namespace frugal {
namespace {
#if VERSION >= 2
int versioned(int x) {
#else
int versioned(long x) {
#endif
  return 0;
}
}  // namespace
int exported() { return 1; }
double median(std::vector<double> v) { return v[0]; }
}  // namespace frugal
"""
    c = """namespace frugal {
void since(double) {}  // external linkage, no internal `since` in this folder
void exported(long x) {}
}
static int versioned = 0;
namespace frugal {
namespace {
double median(std::vector<double> v) { return v[v.size() / 2]; }
}
}
"""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src", "x"))
        os.makedirs(os.path.join(root, "src", "y"))
        for folder, name, text in (("x", "a.cpp", a), ("x", "b.cpp", b), ("y", "c.cpp", c), ("y", "a.cpp", a2)):
            with open(os.path.join(root, "src", folder, name), "w", encoding="utf-8") as f:
                f.write(text)
        got = check(root)
    named = sorted(p.split("'")[1] for p in got)
    text = " ".join(got)
    expected = ["Row", "fail", "median", "since", "versioned"]
    places = ["src/x/a.cpp:5", "src/x/b.cpp:5", "src/x/a.cpp:6", "src/x/b.cpp:9", "src/y/a.cpp:4", "src/y/c.cpp:5",
              "src/y/c.cpp:8 and is a function with external linkage in src/y/a.cpp:12"]
    if named != expected or not all(p in text for p in places):
        print(f"check_internal_names --self-test: expected clashes of {expected} at {places}, got:")
        for p in got:
            print("  " + p)
        return 1
    print(f"check_internal_names --self-test: found the {len(expected)} planted clashes, no more")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_internal_names: {len(problems)} clash(es) of names in a folder")
        return 1
    print("check_internal_names: every folder's internal names are distinct, from each other and from its external functions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
