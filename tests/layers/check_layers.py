#!/usr/bin/env python3
"""Checks that frugal's source folders include one another only downwards (docs/ARCHITECTURE.md,
"Layers"). Every #include of a frugal header ("frugal/<area>/..." or "<area>/internal/...") in
include/frugal/ and src/ must name an area of a strictly lower layer, or the including file's own
area. A folder missing from LAYERS is an error too, so a new folder is placed on purpose.

  tests/layers/check_layers.py [ROOT]      # exit 0 when every include runs downwards and
                                           # docs/ARCHITECTURE.md's folder graph is current
  tests/layers/check_layers.py --graph     # print which folder includes which (counts)
  tests/layers/check_layers.py --write-doc # rewrite the graph in docs/ARCHITECTURE.md
"""
import os
import re
import sys

# Bottom to top. Areas of the same layer may not include each other (except where listed in
# SIDEWAYS), so that each layer's areas can be read, built and tested without the others.
LAYERS = [
    ["core", "kernels"],           # config, errors, console, events (callback.h), memory, clocks; CUDA kernels
    ["data", "ckpt"],              # batch sources and formats; checkpoint files
    ["model", "monitor"],          # the reference GPT; observers of the event list
    ["train"],                     # the step, its levers, the Trainer and its callback connector
    ["dist"],                      # processes: c10d groups, data parallel, ZeRO-1, launcher
    ["tune", "search"],            # tune: doctor, batch-size finder, tune, plan, smoke (they run the Trainer);
                                   # search: trials as child processes, halving, the search report
    ["cli", "spm"],                # the programs
]
SIDEWAYS = set()
RANK = {area: i for i, layer in enumerate(LAYERS) for area in layer}
# A quoted or angled include of a frugal header: "frugal/<area>/x.h" (public) or "<area>/x.h",
# "<area>/internal/x.h" (relative to src/), and the umbrella "frugal/frugal.h".
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def area_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "include" and len(rel) > 3:  # include/frugal/<area>/x.h
        return rel[2]
    if rel[0] == "src" and len(rel) > 2:  # src/<area>/...
        return rel[1]
    return None  # include/frugal/frugal.h, the umbrella header, may include every area


def scan(root):
    edges, errors = {}, []
    for top in ("include/frugal", "src"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".hpp", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                mine = area_of(root, path)
                if mine is None:
                    continue
                rel = os.path.relpath(path, root)
                if mine not in RANK:
                    errors.append(f"{rel}: folder '{mine}' has no layer; add it to LAYERS in {__file__}")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if ".." in target.split("/"):
                            errors.append(f"{rel}:{no}: includes through '..': {line.strip()}; name the header "
                                          "by its area (\"frugal/<area>/x.h\" or \"<area>/internal/x.h\")")
                            continue
                        parts = target.split("/")
                        if parts[0] == "frugal" and len(parts) == 2:  # the umbrella header, frugal/frugal.h
                            if parts[1] == "frugal.h":
                                errors.append(f"{rel}:{no}: includes the umbrella frugal/frugal.h (every area); "
                                              "include the headers it needs")
                            continue
                        theirs = parts[1] if parts[0] == "frugal" and len(parts) > 2 else parts[0]
                        if len(parts) < 2 or (parts[0] != "frugal" and theirs not in RANK):
                            continue  # a library's header (<torch/...>, <fmt/...>, "httplib.h")
                        if "internal" in parts and theirs != mine:
                            errors.append(f"{rel}:{no}: includes {theirs}'s internal header {target}; internals "
                                          f"are for their own area only (move it to include/frugal/{theirs}/)")
                        if theirs == "third_party" or theirs == mine:
                            continue
                        edges[(mine, theirs)] = edges.get((mine, theirs), 0) + 1
                        if theirs not in RANK:
                            errors.append(f"{rel}:{no}: includes '{theirs}', a folder with no layer")
                        elif RANK[theirs] >= RANK[mine] and (mine, theirs) not in SIDEWAYS:
                            how = "upwards" if RANK[theirs] > RANK[mine] else "sideways"
                            errors.append(f"{rel}:{no}: {mine} (layer {RANK[mine]}) includes {theirs} "
                                          f"(layer {RANK[theirs]}), {how}: {line.strip()}")
    return edges, errors


DOC_BLOCK = re.compile(r"<!-- layer-graph -->\n.*?<!-- /layer-graph -->", re.S)


def doc_graph(edges):
    """The folder graph as docs/ARCHITECTURE.md shows it: each folder and the folders it includes."""
    lines = ["```"]
    for layer in LAYERS:
        for area in layer:
            below = sorted({b for (a, b) in edges if a == area}, key=lambda b: (RANK.get(b, 99), b))
            lines.append(f"{area:8} -> {', '.join(below) if below else '(nothing)'}")
    lines.append("```")
    return "<!-- layer-graph -->\n" + "\n".join(lines) + "\n<!-- /layer-graph -->"


HOMES_BLOCK = re.compile(r"<!-- command-homes -->\n(.*?)<!-- /command-homes -->", re.S)
SUBCOMMAND = re.compile(r'add_subcommand\(\s*"([a-z_-]+)"')


def check_command_homes(root, doc, doc_path):
    """docs/ARCHITECTURE.md's "Commands and their homes" table: a row for every `frugal X` the CLI
    declares (src/cli/*.cpp), none for a command that is gone, and every path it names exists."""
    m = HOMES_BLOCK.search(doc)
    if not m:
        return [f"{doc_path}: no <!-- command-homes --> table"]
    errors, rows = [], {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
            for path in re.findall(r"`((?:src|include)/[^`]+)`", cells[1] + " " + cells[2]):
                if not os.path.isfile(os.path.join(root, path)):
                    errors.append(f"{doc_path}: command '{cells[0].strip('`')}' names {path}, which does not exist")
    declared = set()
    cli = os.path.join(root, "src", "cli")
    for name in sorted(os.listdir(cli)):
        if name.endswith(".cpp"):
            declared |= set(SUBCOMMAND.findall(open(os.path.join(cli, name), encoding="utf-8").read()))
    for cmd in sorted(declared - rows.keys()):
        errors.append(f"{doc_path}: `frugal {cmd}` has no row in the command-homes table")
    for cmd in sorted(rows.keys() - declared):
        errors.append(f"{doc_path}: the command-homes table lists '{cmd}', which src/cli/ does not declare")
    return errors


def main(argv):
    graph = "--graph" in argv
    write_doc = "--write-doc" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    edges, errors = scan(root)
    if graph:
        for (a, b), n in sorted(edges.items(), key=lambda e: (RANK.get(e[0][0], 99), e[0])):
            print(f"{a} -> {b}: {n}")
    doc_path = os.path.join(root, "docs", "ARCHITECTURE.md")
    doc = open(doc_path, encoding="utf-8").read()
    if not DOC_BLOCK.search(doc):
        errors.append(f"{doc_path}: no <!-- layer-graph --> block")
    else:
        new = DOC_BLOCK.sub(lambda _: doc_graph(edges), doc)
        if write_doc and new != doc:
            open(doc_path, "w", encoding="utf-8").write(new)
        elif new != doc:
            errors.append(f"{doc_path}: the folder graph is out of date; run tests/layers/check_layers.py --write-doc")
    errors += check_command_homes(root, doc, doc_path)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} problem(s). The layer order is "
              f"{' -> '.join('/'.join(l) for l in LAYERS)}: move the code, or invert the dependency "
              "through an interface in the lower layer", file=sys.stderr)
        return 1
    print(f"check_layers: every include runs downwards ({sum(edges.values())} cross-folder includes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
